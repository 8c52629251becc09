"""S10 (sources): one source ConfigMap read by 1,000 ConfigBundles.

In one run on one control plane, against the raw floor measured in the same run:

- ``namespaces`` (50) namespaces besides the source's own, ``s10-src``; the source
  ConfigMap ``s10-src/s10-source`` labelled ``cbop.dev/source: "true"`` and shared
  with the 50 others by name (``cbop.dev/share-with``: a comma list of 50 names).
- **raw**: 1,000 ConfigMaps laid out as the bundles' (``local`` (500) in ``s10-src``,
  ``elsewhere`` (500) spread over the 50 namespaces) are created, then ``workers``
  threads update each once (a PUT carrying the resourceVersion the create returned, as
  cbop updates from its cache). Seconds from the first update until the watch has shown
  every one with the new value. The ConfigMaps are deleted after.
- **cbop**: ``python -m cbop --workers 4 --kube-api-qps 0 --no-rollout
  --no-cluster-bundles`` (cluster-wide)
  and 1,000 ConfigBundles in the same layout, each reading the source (and one key of
  its own); converged and quiet. Then the source is patched once: seconds from the
  patch until the watch has shown all 1,000 ConfigMaps with the new value, and the ratio
  to raw; kube-apiserver's ``apiserver_request_total`` over that time (minus the bench's
  own requests): GETs of ConfigMaps (the goal: zero), ConfigMap writes by answer, and
  MODIFIED events per ConfigMap from the watch (the goal: exactly one each).
- **controller-runtime** (with ``controller-runtime`` among the impls, before cbop): the
  Go peer (``bench/peers/controller-runtime``, ``--sources``: a label-selected cache of
  sources, a field index from a source to its readers, the share-with check,
  ``status.sources``, and cbop's "ConfigMaps first, statuses after"), the same 4
  workers, cluster-wide, on the same cluster: the same bundles (named ``p-*``)
  converged, the same source patch and the same measurements (time, GETs, writes by
  answer, MODIFIED per ConfigMap, CPU of the peer and kube-apiserver). Its bundles and
  ConfigMaps are deleted after, and the peer stopped, before cbop starts.
- **idle**: ``idle`` seconds (60) with nothing changing: writes on ConfigMaps,
  ConfigBundles and Events (the goal: zero).
- **RSS**: cbop's steady VmRSS (mean over ``steady_seconds``) converged, then again
  after ``unlabelled`` (10,000) ConfigMaps without the source label (about 1 KiB each)
  were created in another namespace: cbop caches only labelled sources, so the goal is
  flat.

The load average of the machine is taken at the start of each phase. With ``--profile
DIR``, py-spy records cbop over the source change (``cbop-s10-change-<pid>.collapsed``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.operators import cluster
from bench.operators.clusterbundles import (
    Counter,
    code_cells,
    code_delta,
    cpu_cell,
    cpu_share_of,
    goal_word,
    run_parallel,
    write_codes,
)
from bench.operators.procs import Operator, Sampler, cbop_revision, wait_quiet
from bench.operators.scenarios import Bench, log, profiler
from cbop.api import ANNOTATION_SHARE_WITH, SOURCE_SELECTOR
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, NAMESPACES, ApiError, ConnectionFailed, KubeClient

SCENARIOS = frozenset({"s10"})
#: The Go peer measured against the same floor when it is among the impls.
PEER = "controller-runtime"
SOURCE_NS = "s10-src"
SOURCE = "s10-source"
#: Label on every ConfigMap the watch follows (the bundles' and the raw floor's).
OUT_LABEL = "bench.cbop.dev/s10-out"
#: Resources whose writes count as cbop's in the idle window.
WRITTEN = frozenset({"configbundles", "configmaps", "events"})
#: The source's shared content besides the changing key: about 1 KiB of YAML.
COMMON = "".join(f"setting-{i:03d}: value-{i:03d}\n" for i in range(40))


@dataclass(frozen=True)
class Sizes:
    """The sizes of one S10 run.

    Attributes:
        local: bundles in the source's namespace.
        elsewhere: bundles in the other namespaces (spread evenly).
        namespaces: the other namespaces.
        unlabelled: ConfigMaps without the source label added for the second RSS figure.
        idle: seconds of the idle window.
    """

    local: int = 500
    elsewhere: int = 500
    namespaces: int = 50
    unlabelled: int = 10_000
    idle: float = 60.0


def load() -> str:
    """The 1, 5 and 15 minute load averages, e.g. ``"3.10 2.95 2.40"``."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def other_namespaces(sizes: Sizes) -> list[str]:
    return [f"s10-ns-{i:03d}" for i in range(sizes.namespaces)]


def layout(sizes: Sizes, prefix: str) -> list[tuple[str, str]]:
    """(namespace, name) of every reader: ``local`` in the source's namespace, the rest
    spread over the other namespaces."""
    out = [(SOURCE_NS, f"{prefix}-{i:04d}") for i in range(sizes.local)]
    others = other_namespaces(sizes)
    out += [(others[i % len(others)], f"{prefix}-{i:04d}") for i in range(sizes.elsewhere)]
    return out


def source_body(sizes: Sizes, value: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": SOURCE,
            "labels": {SOURCE_SELECTOR.split("=")[0]: "true"},
            "annotations": {ANNOTATION_SHARE_WITH: ",".join(other_namespaces(sizes))},
        },
        "data": {"v": value, "common.yaml": COMMON},
    }


def bundle_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": CONFIGBUNDLES.api_version,
        "kind": CONFIGBUNDLES.kind,
        "metadata": {"name": name},
        "spec": {
            "sources": [{"configMap": {"name": SOURCE, "namespace": SOURCE_NS}}],
            "data": {"bundle": name},
            "labels": {OUT_LABEL: "1"},
        },
    }


def raw_body(name: str, value: str) -> dict[str, Any]:
    """What the raw floor writes: the content a bundle's ConfigMap holds."""
    return {
        "metadata": {"name": name, "labels": {OUT_LABEL: "1"}},
        "data": {"v": value, "common.yaml": COMMON, "bundle": name},
    }


# ------------------------------------------------------------------------ observing


class Watcher:
    """A cluster-wide watch on the ConfigMaps labelled :data:`OUT_LABEL`: per ConfigMap,
    its value of ``v``, when it first showed the expected value, and its MODIFIED events.
    Timestamps are ``time.monotonic()`` when an event is decoded."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._want = ""
        self.value: dict[str, str | None] = {}
        self.seen: dict[str, float] = {}
        self.modified: dict[str, int] = {}
        self._streams: list[Any] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        self._synced.wait(60)
        return self

    def stop(self) -> None:
        self._stop.set()
        for stream in list(self._streams):
            with contextlib.suppress(Exception):
                stream.close()
        self._thread.join(5)

    def expect(self, value: str) -> None:
        """Expect ``v == value`` from now on; the times and MODIFIED counts start again."""
        with self._lock:
            self._want = value
            self.seen = {k: time.monotonic() for k, v in self.value.items() if v == value}
            self.modified = {}

    def _run(self) -> None:
        listed = self._kube.list(CONFIGMAPS, None, label_selector=f"{OUT_LABEL}=1")
        for item in listed["items"]:
            self._handle("ADDED", item)
        rv = listed["metadata"]["resourceVersion"]
        self._synced.set()
        while not self._stop.is_set():
            try:
                stream = self._kube.watch(
                    CONFIGMAPS,
                    None,
                    resource_version=rv,
                    label_selector=f"{OUT_LABEL}=1",
                    timeout_seconds=1800,
                    read_timeout=150,
                )
            except (ApiError, ConnectionFailed):
                if self._stop.wait(0.5):
                    return
                continue
            self._streams.append(stream)
            try:
                for event in stream:
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._handle(event["type"], obj)
            except (ApiError, ConnectionFailed):
                if self._stop.is_set():
                    return
            finally:
                stream.close()
                with contextlib.suppress(ValueError):
                    self._streams.remove(stream)

    def _handle(self, kind: str, obj: Mapping[str, Any]) -> None:
        now = time.monotonic()
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        with self._lock:
            if kind == "DELETED":
                self.value.pop(key, None)
                return
            value = (obj.get("data") or {}).get("v")
            self.value[key] = value
            if kind == "MODIFIED":
                self.modified[key] = self.modified.get(key, 0) + 1
            if value == self._want and key not in self.seen:
                self.seen[key] = now
                self._changed.notify_all()

    def wait_all(self, keys: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not all(k in self.seen for k in keys):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 1.0))
        return True

    def last_seen(self, keys: list[str]) -> float | None:
        with self._lock:
            times = [self.seen[k] for k in keys if k in self.seen]
        return max(times) if times else None

    def spread(self, keys: list[str], t0: float) -> list[float]:
        """Seconds after ``t0`` when the first, the median and the last of ``keys`` changed."""
        with self._lock:
            times = sorted(self.seen[k] - t0 for k in keys if k in self.seen)
        if not times:
            return []
        return [round(times[0], 3), round(times[len(times) // 2], 3), round(times[-1], 3)]

    def modified_histogram(self, keys: list[str]) -> dict[int, int]:
        """k -> how many of ``keys`` saw k MODIFIED events since :meth:`expect`."""
        with self._lock:
            out: dict[int, int] = {}
            for k in keys:
                n = self.modified.get(k, 0)
                out[n] = out.get(n, 0) + 1
            return out


# -------------------------------------------------------------------------- helpers


def _steady_mib(bench: Bench, op: Operator) -> float:
    sampler = Sampler(op.pid, interval=0.25).start()
    try:
        wait_quiet(op.pid, timeout=180)
        since = time.monotonic()
        time.sleep(bench.s.steady_seconds)
        return sampler.mean_rss_mib(since)
    finally:
        sampler.stop()


def _writes(api: cluster.RequestCounts) -> dict[str, float]:
    return {
        "|".join(k): v for k, v in api.items() if k[0] in cluster.WRITE_VERBS and k[1] in WRITTEN
    }


def _keys(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{ns}/{name}" for ns, name in pairs]


# ------------------------------------------------------------------------------ run


def run(bench: Bench, sizes: Sizes, impls: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Run S10 once (see the module docstring); return its record.

    ``impls``: with :data:`PEER` in it, the Go peer is measured too (before cbop).
    """
    kube = bench.kube
    threads = bench.s.workers
    rec: dict[str, Any] = {"bundles": sizes.local + sizes.elsewhere, "load": {}}
    namespaces = [SOURCE_NS, *other_namespaces(sizes)]
    run_parallel(
        lambda ns: kube.create(NAMESPACES, None, {"metadata": {"name": ns}}),
        namespaces,
        bench.s.loader_threads,
    )
    kube.create(CONFIGMAPS, SOURCE_NS, source_body(sizes, "1"))
    cluster.wait_api_quiet(kube)
    watcher = Watcher(kube).start()
    try:
        rec["raw"] = _raw(bench, watcher, sizes, threads)
        if PEER in impls:
            rec["peer"] = _peer(bench, watcher, sizes)
        rec["cbop"] = _cbop(bench, watcher, sizes)
    finally:
        watcher.stop()
        bench.stop()
    raw_s = rec["raw"]["seconds"]
    rec["ratio"] = rec["cbop"]["change"]["seconds"] / raw_s if raw_s else float("nan")
    if "peer" in rec:
        peer_s = rec["peer"]["change"]["seconds"]
        rec["peer_ratio"] = peer_s / raw_s if raw_s else float("nan")
        rec["cbop_peer_ratio"] = (
            rec["cbop"]["change"]["seconds"] / peer_s if peer_s else float("nan")
        )
    return rec


def _raw(bench: Bench, watcher: Watcher, sizes: Sizes, threads: int) -> dict[str, Any]:
    kube = bench.kube
    pairs = layout(sizes, "raw")
    keys = _keys(pairs)
    watcher.expect("1")
    created = run_parallel(
        lambda p: kube.create(CONFIGMAPS, p[0], raw_body(p[1], "1")), pairs, bench.s.loader_threads
    )
    watcher.wait_all(keys, 120)
    cluster.wait_api_quiet(kube)
    rec: dict[str, Any] = {"load": load()}
    watcher.expect("2")

    def update(obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        body = raw_body(meta["name"], "2")
        body["metadata"]["resourceVersion"] = meta["resourceVersion"]
        kube.update(CONFIGMAPS, meta["namespace"], meta["name"], body)

    log(f"S10 raw: updating {len(created)} ConfigMaps with {threads} threads")
    share = cpu_share_of(bench, bench=os.getpid())
    t0 = time.monotonic()
    run_parallel(update, created, threads)
    rec["complete"] = watcher.wait_all(keys, 300)
    rec["cpu_share"] = share.stop()
    last = watcher.last_seen(keys)
    rec["seconds"] = (last - t0) if last is not None else float("nan")
    rec["spread"] = watcher.spread(keys, t0)
    log(f"S10 raw: {len(keys)} ConfigMaps updated in {rec['seconds']:.2f} s")
    run_parallel(lambda p: kube.delete(CONFIGMAPS, p[0], p[1]), pairs, bench.s.loader_threads)
    cluster.wait_api_quiet(kube)
    return rec


def _converge(
    bench: Bench, watcher: Watcher, keys: list[str], pairs: list[tuple[str, str]], name: str
) -> dict[str, Any]:
    """Create the bundles of ``pairs`` and wait until every ConfigMap shows ``v: "1"``."""
    kube = bench.kube
    watcher.expect("1")
    rec: dict[str, Any] = {"load_converge": load()}
    t0 = time.monotonic()
    run_parallel(
        lambda p: kube.create(CONFIGBUNDLES, p[0], bundle_body(p[1])),
        pairs,
        bench.s.loader_threads,
    )
    complete = watcher.wait_all(keys, 600)
    last = watcher.last_seen(keys)
    rec["converge"] = {
        "complete": complete,
        "seconds": (last - t0) if last is not None else float("nan"),
    }
    log(f"S10 {name}: {len(keys)} bundles converged in {rec['converge']['seconds']:.2f} s")
    cluster.wait_api_quiet(kube, quiet=3.0, timeout=180)
    return rec


def _change(
    bench: Bench, watcher: Watcher, keys: list[str], name: str, op: Operator
) -> dict[str, Any]:
    """Patch the source once (``v: "2"``) and measure until every reader's ConfigMap has it.

    ``name`` names the operator ``op`` in the CPU figures. Returns the change's record
    (``load``: the load average at its start).
    """
    kube = bench.kube
    cluster.wait_api_quiet(kube)
    load_change = load()
    watcher.expect("2")
    counter = Counter(kube).mark()
    codes0 = write_codes(kube)
    share = cpu_share_of(bench, **{name: op.pid}, bench=os.getpid())
    spy = None
    if bench.s.profile is not None and name == "cbop":
        spy = profiler(op.pid, bench.s.profile / f"cbop-s10-change-{op.pid}.collapsed")
        time.sleep(1.0)  # py-spy attaches
    log(f"S10 {name}: the source changes; {len(keys)} readers")
    t0 = time.monotonic()
    kube.patch(CONFIGMAPS, SOURCE_NS, SOURCE, {"data": {"v": "2"}})
    complete = watcher.wait_all(keys, 600)
    shares = share.stop()
    last = watcher.last_seen(keys)
    cluster.wait_api_quiet(kube)
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)
    api = counter.since()
    codes = code_delta(write_codes(kube), codes0)
    rec: dict[str, Any] = {
        "load": load_change,
        "complete": complete,
        "seconds": (last - t0) if last is not None else float("nan"),
        "cpu_share": shares,
        "configmap_gets": api.get(("GET", "configmaps", ""), 0.0),
        "gets": {"|".join(k): v for k, v in api.items() if k[0] == "GET"},
        "configmap_writes": sum(
            v for k, v in api.items() if k[0] in cluster.WRITE_VERBS and k[1] == "configmaps"
        ),
        "status_writes": sum(
            v
            for k, v in api.items()
            if k[0] in cluster.WRITE_VERBS and k[1] == "configbundles" and k[2] == "status"
        ),
        "writes_by_code": codes,
        "modified_per_configmap": watcher.modified_histogram(keys),
        "spread": watcher.spread(keys, t0),
        "requests": {"|".join(k): v for k, v in sorted(api.items())},
    }
    log(
        f"S10 {name}: all {len(keys)} ConfigMaps changed in {rec['seconds']:.2f} s; "
        f"ConfigMap GETs {rec['configmap_gets']:.0f}, writes "
        f"{rec['configmap_writes']:.0f}, status writes {rec['status_writes']:.0f}, "
        f"MODIFIED per ConfigMap {rec['modified_per_configmap']}"
    )
    return rec


def _peer(bench: Bench, watcher: Watcher, sizes: Sizes) -> dict[str, Any]:
    """The Go peer on the same cluster: converge, one source change; then cleaned up."""
    kube = bench.kube
    pairs = layout(sizes, "p")
    keys = _keys(pairs)
    op = Operator(
        PEER,
        bench.s.kubeconfig,
        None,
        workers=bench.s.workers,
        resync=0.0,
        log_path=bench.s.logs / "s10-controller-runtime.log",
        extra_args=["--sources"],
    )
    bench.current = op
    try:
        op.wait_ready()
        rec = _converge(bench, watcher, keys, pairs, PEER)
        rec["change"] = _change(bench, watcher, keys, PEER, op)
        # Back to the value the next operator converges on, then the peer's objects go.
        watcher.expect("1")
        kube.patch(CONFIGMAPS, SOURCE_NS, SOURCE, {"data": {"v": "1"}})
        watcher.wait_all(keys, 300)
        run_parallel(
            lambda p: kube.delete(CONFIGBUNDLES, p[0], p[1]), pairs, bench.s.loader_threads
        )
        deadline = time.monotonic() + 300
        while kube.list(CONFIGBUNDLES, None)["items"] and time.monotonic() < deadline:
            time.sleep(1.0)
    finally:
        op.stop()
        bench.current = None

    def gone(p: tuple[str, str]) -> None:
        with contextlib.suppress(ApiError):  # the garbage collector may be first
            kube.delete(CONFIGMAPS, p[0], p[1])

    run_parallel(gone, pairs, bench.s.loader_threads)
    cluster.wait_api_quiet(kube)
    return rec


def _cbop(bench: Bench, watcher: Watcher, sizes: Sizes) -> dict[str, Any]:
    kube = bench.kube
    pairs = layout(sizes, "b")
    keys = _keys(pairs)
    op = Operator(
        "cbop",
        bench.s.kubeconfig,
        None,
        workers=bench.s.workers,
        resync=0.0,
        log_path=bench.s.logs / "s10-cbop.log",
        # Only ConfigBundles here (no ClusterConfigBundle CRD is installed).
        extra_args=["--no-cluster-bundles"],
    )
    bench.revisions.add(cbop_revision())
    bench.current = op
    op.wait_ready()
    rec: dict[str, Any] = _converge(bench, watcher, keys, pairs, "cbop")
    rec["rss_mib"] = _steady_mib(bench, op)
    rec["change"] = _change(bench, watcher, keys, "cbop", op)
    rec["load_change"] = rec["change"]["load"]

    # Idle.
    cluster.wait_api_quiet(kube)
    counter = Counter(kube).mark()
    log(f"S10 idle {sizes.idle:.0f} s")
    time.sleep(sizes.idle)
    idle = _writes(counter.since())
    rec["idle"] = {"seconds": sizes.idle, "writes": sum(idle.values()), "by_kind": idle}
    log(f"S10 idle: {rec['idle']['writes']:.0f} writes")

    # RSS with 10,000 ConfigMaps that are no sources.
    other = "s10-unlabelled"
    kube.create(NAMESPACES, None, {"metadata": {"name": other}})

    def unlabelled(i: int) -> None:
        body = {
            "metadata": {"name": f"plain-{i:05d}", "labels": {"app": "unrelated"}},
            "data": {"config.yaml": f"id: {i}\n" + "x: y\n" * 200},
        }
        kube.create(CONFIGMAPS, other, body)

    t = time.monotonic()
    run_parallel(unlabelled, list(range(sizes.unlabelled)), bench.s.loader_threads)
    log(f"S10: {sizes.unlabelled} unlabelled ConfigMaps in {time.monotonic() - t:.1f} s")
    cluster.wait_api_quiet(kube, quiet=3.0, timeout=180)
    rec["rss_unlabelled_mib"] = _steady_mib(bench, op)
    rec["unlabelled"] = sizes.unlabelled
    log(
        f"S10 RSS: {rec['rss_mib']:.1f} MiB converged, {rec['rss_unlabelled_mib']:.1f} MiB "
        f"with {sizes.unlabelled} unlabelled ConfigMaps"
    )
    return rec


# ------------------------------------------------------------------------- report


def _spread(phase: Mapping[str, Any]) -> str:
    return " / ".join(f"{t:.2f}" for t in phase.get("spread") or ()) or "-"


def _cpu(phase: Mapping[str, Any], name: str) -> str:
    value = (phase.get("cpu_share") or {}).get(name)
    return "-" if value is None else f"{value:.1f}"


def _peer_rows(r: Mapping[str, Any]) -> list[str]:
    """The Go peer's rows of the S10 table (none when it did not run)."""
    p = r.get("peer")
    if not p:
        return []
    change = p["change"]
    per_cm = change["modified_per_configmap"]
    ones = per_cm.get(1, per_cm.get("1", 0))
    return [
        f"| controller-runtime: source change to all {r['bundles']:,} ConfigMaps changed, s "
        f"(load {change['load']}) | {change['seconds']:.2f} | |",
        f"| first / median / last ConfigMap changed, s: controller-runtime | {_spread(change)} | |",
        f"| controller-runtime / raw | {r['peer_ratio']:.2f}x | |",
        f"| cbop / controller-runtime | {r['cbop_peer_ratio']:.2f}x | |",
        f"| kube-apiserver CPU s / machine busy: controller-runtime change "
        f"| {cpu_cell(change)} | |",
        f"| CPU s of controller-runtime / of the bench's own client: change "
        f"| {_cpu(change, PEER)} / {_cpu(change, 'bench')} | |",
        f"| controller-runtime change: ConfigMap GETs / writes by answer / status writes "
        f"| {change['configmap_gets']:.0f} / {code_cells(change, 'configmaps')} / "
        f"{change['status_writes']:.0f} | |",
        f"| controller-runtime change: ConfigMaps with exactly one MODIFIED event | {ones} | |",
        f"| controller-runtime: {r['bundles']:,} bundles created to all ConfigMaps matching, s "
        f"| {p['converge']['seconds']:.2f} | |",
    ]


def markdown(results: dict[str, Any]) -> str:
    """The S10 section of the results file ("" when it did not run)."""
    r = results.get("s10")
    if not r:
        return ""
    raw, c = r["raw"], r["cbop"]
    change = c["change"]
    per_cm = change["modified_per_configmap"]
    ones = per_cm.get(1, per_cm.get("1", 0))
    lines = [
        "",
        f"### S10 one source read by {r['bundles']:,} ConfigBundles",
        "",
        f"Load average: raw {raw['load']}; cbop converge {c['load_converge']}; "
        f"source change {c['load_change']}.",
        "",
        "| measure | value | goal |",
        "|---|---:|---|",
        f"| raw: {r['bundles']:,} ConfigMaps updated, {results['settings']['workers']} "
        f"threads, s | {raw['seconds']:.2f} | floor |",
        f"| cbop: source change to all {r['bundles']:,} ConfigMaps changed, s "
        f"| {change['seconds']:.2f} | |",
        f"| first / median / last ConfigMap changed, s: raw | {_spread(raw)} | |",
        f"| first / median / last ConfigMap changed, s: source change | {_spread(change)} | |",
        f"| cbop / raw | {r['ratio']:.2f}x | <= 1.2x: {goal_word(r['ratio'] <= 1.2)} |",
        *_peer_rows(r),
        f"| kube-apiserver CPU s / machine busy: raw | {cpu_cell(raw)} | |",
        f"| kube-apiserver CPU s / machine busy: source change | {cpu_cell(change)} | |",
        f"| CPU s of cbop / of the bench's own client: raw | - / {_cpu(raw, 'bench')} | |",
        f"| CPU s of cbop / of the bench's own client: source change "
        f"| {_cpu(change, 'cbop')} / {_cpu(change, 'bench')} | |",
        f"| source change: ConfigMap GETs (apiserver_request_total) "
        f"| {change['configmap_gets']:.0f} | 0: {goal_word(change['configmap_gets'] == 0)} |",
        f"| source change: ConfigMap writes by answer | {code_cells(change, 'configmaps')} "
        "| one per bundle |",
        f"| source change: cbop's status writes | {change.get('status_writes', 0):.0f} | |",
        f"| source change: ConfigMaps with exactly one MODIFIED event | {ones} "
        f"| all: {goal_word(ones == r['bundles'])} |",
        f"| cbop: {r['bundles']:,} bundles created to all ConfigMaps matching, s "
        f"| {c['converge']['seconds']:.2f} | |",
        f"| idle {c['idle']['seconds']:.0f} s: writes | {c['idle']['writes']:.0f} "
        f"| 0: {goal_word(c['idle']['writes'] == 0)} |",
        f"| steady RSS converged / with {c['unlabelled']:,} unlabelled ConfigMaps, MiB "
        f"| {c['rss_mib']:.1f} / {c['rss_unlabelled_mib']:.1f} | flat |",
    ]
    return "\n".join(lines) + "\n"
