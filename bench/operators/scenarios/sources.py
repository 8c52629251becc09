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
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.operators import cluster
from bench.operators.apiserver import WRITE_VERBS, Counter, keyed, wait_api_quiet, writes_on
from bench.operators.harness import Bench, log, run_parallel
from bench.operators.procs import Operator
from bench.operators.sampling import load_average
from bench.operators.scenario import Defaults, Run
from bench.operators.scenarios import sources_report as report
from bench.operators.watch import Stream, Tracker
from cbop.api import ANNOTATION_SHARE_WITH, SOURCE_SELECTOR
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, KubeClient, Resource

#: The Go peer measured against the same floor when it is among the impls.
PEER = "controller-runtime"
SOURCE_NS = "s10-src"
SOURCE = "s10-source"
#: Label on every ConfigMap the watch follows (the bundles' and the raw floor's).
OUT_LABEL = "bench.cbop.dev/s10-out"
#: Resources whose writes count as cbop's in the idle window.
WRITTEN = frozenset({"configbundles", "configmaps", "events"})
#: Resources whose writes the source change counts by answer code.
WRITTEN_CODES = WRITTEN | {"clusterconfigbundles"}
#: The source's shared content besides the changing key: about 1 KiB of YAML.
COMMON = "".join(f"setting-{i:03d}: value-{i:03d}\n" for i in range(40))


@dataclass(frozen=True)
class Options:
    """The sizes of one S10 run.

    Attributes:
        bundles: bundles reading the source, half in its namespace, the rest spread
            over the other namespaces.
        namespaces: the other namespaces.
        unlabelled: ConfigMaps without the source label added for the second RSS figure.
        idle: seconds of the idle window.
    """

    bundles: int = 1000
    namespaces: int = 50
    unlabelled: int = 10_000
    idle: float = 60.0

    @property
    def local(self) -> int:
        """Bundles in the source's namespace."""
        return self.bundles // 2

    @property
    def elsewhere(self) -> int:
        """Bundles in the other namespaces."""
        return self.bundles - self.local


def other_namespaces(sizes: Options) -> list[str]:
    return [f"s10-ns-{i:03d}" for i in range(sizes.namespaces)]


def layout(sizes: Options, prefix: str) -> list[tuple[str, str]]:
    """(namespace, name) of every reader: ``local`` in the source's namespace, the rest
    spread over the other namespaces."""
    out = [(SOURCE_NS, f"{prefix}-{i:04d}") for i in range(sizes.local)]
    others = other_namespaces(sizes)
    out += [(others[i % len(others)], f"{prefix}-{i:04d}") for i in range(sizes.elsewhere)]
    return out


def source_body(sizes: Options, value: str) -> dict[str, Any]:
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


class Watcher(Tracker):
    """A cluster-wide watch on the ConfigMaps labelled :data:`OUT_LABEL`: per ConfigMap,
    its value of ``v``, when it first showed the expected value, and its MODIFIED events.

    ``resource``, ``label`` and ``key`` watch other objects the same way (S13: the
    Secrets labelled ``label``, their ``data[key]`` as the API server sends it, base64).
    """

    def __init__(
        self,
        kube: KubeClient,
        resource: Resource = CONFIGMAPS,
        label: str = OUT_LABEL,
        key: str = "v",
    ) -> None:
        super().__init__(kube, [Stream(resource, None, label_selector=f"{label}=1")])
        self._key = key
        self._want = ""
        self.value: dict[str, str | None] = {}
        self.seen: dict[str, float] = {}
        self.modified: dict[str, int] = {}

    def expect(self, value: str) -> None:
        """Expect ``v == value`` from now on; the times and MODIFIED counts start again."""
        with self._lock:
            self._want = value
            self.seen = {k: time.monotonic() for k, v in self.value.items() if v == value}
            self.modified = {}

    def handle(self, res: Resource, kind: str, obj: Mapping[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if kind == "DELETED":
            self.value.pop(key, None)
            return
        value = (obj.get("data") or {}).get(self._key)
        self.value[key] = value
        if kind == "MODIFIED":
            self.modified[key] = self.modified.get(key, 0) + 1
        if value == self._want and key not in self.seen:
            self.seen[key] = now
            self.changed()

    def wait_all(self, keys: list[str], timeout: float) -> bool:
        return self.wait_until(lambda: all(k in self.seen for k in keys), timeout)

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


def _keys(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{ns}/{name}" for ns, name in pairs]


# ------------------------------------------------------------------------------ run


def run(bench: Bench, sizes: Options, impls: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Run S10 once (see the module docstring); return its record.

    ``impls``: with :data:`PEER` in it, the Go peer is measured too (before cbop).
    """
    kube = bench.kube
    threads = bench.s.workers
    rec: dict[str, Any] = {"bundles": sizes.local + sizes.elsewhere, "load": {}}
    namespaces = [SOURCE_NS, *other_namespaces(sizes)]
    run_parallel(lambda ns: cluster.create_namespace(kube, ns), namespaces, bench.s.loader_threads)
    kube.create(CONFIGMAPS, SOURCE_NS, source_body(sizes, "1"))
    wait_api_quiet(kube)
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


def _raw(bench: Bench, watcher: Watcher, sizes: Options, threads: int) -> dict[str, Any]:
    kube = bench.kube
    pairs = layout(sizes, "raw")
    keys = _keys(pairs)
    watcher.expect("1")
    created = run_parallel(
        lambda p: kube.create(CONFIGMAPS, p[0], raw_body(p[1], "1")), pairs, bench.s.loader_threads
    )
    watcher.wait_all(keys, 120)
    wait_api_quiet(kube)
    rec: dict[str, Any] = {"load": load_average()}
    watcher.expect("2")

    def update(obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        body = raw_body(meta["name"], "2")
        body["metadata"]["resourceVersion"] = meta["resourceVersion"]
        kube.update(CONFIGMAPS, meta["namespace"], meta["name"], body)

    log(f"S10 raw: updating {len(created)} ConfigMaps with {threads} threads")
    counter = Counter(kube).mark()
    share = bench.cpu_share(bench=os.getpid())
    t0 = time.monotonic()
    run_parallel(update, created, threads)
    rec["complete"] = watcher.wait_all(keys, 300)
    rec["cpu_share"] = share.stop()
    last = watcher.last_seen(keys)
    rec["seconds"] = (last - t0) if last is not None else float("nan")
    rec["spread"] = watcher.spread(keys, t0)
    rec["bench_requests"] = keyed(counter.own())
    rec["modified_per_configmap"] = watcher.modified_histogram(keys)
    log(f"S10 raw: {len(keys)} ConfigMaps updated in {rec['seconds']:.2f} s")
    run_parallel(lambda p: kube.delete(CONFIGMAPS, p[0], p[1]), pairs, bench.s.loader_threads)
    wait_api_quiet(kube)
    return rec


def _converge(
    bench: Bench, watcher: Watcher, keys: list[str], pairs: list[tuple[str, str]], name: str
) -> dict[str, Any]:
    """Create the bundles of ``pairs`` and wait until every ConfigMap shows ``v: "1"``."""
    kube = bench.kube
    watcher.expect("1")
    rec: dict[str, Any] = {"load_converge": load_average()}
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
    wait_api_quiet(kube, quiet=3.0, timeout=180)
    return rec


def _change(
    bench: Bench, watcher: Watcher, keys: list[str], name: str, op: Operator
) -> dict[str, Any]:
    """Patch the source once (``v: "2"``) and measure until every reader's ConfigMap has it.

    ``name`` names the operator ``op`` in the CPU figures. Returns the change's record
    (``load``: the load average at its start).
    """
    kube = bench.kube
    wait_api_quiet(kube)
    load_change = load_average()
    watcher.expect("2")
    counter = Counter(kube, codes=WRITTEN_CODES).mark()
    share = bench.cpu_share(**{name: op.pid}, bench=os.getpid())
    spy = bench.profile(op, f"cbop-s10-change-{op.pid}")
    if spy.active:
        time.sleep(1.0)  # py-spy attaches
    log(f"S10 {name}: the source changes; {len(keys)} readers")
    t0 = time.monotonic()
    kube.patch(CONFIGMAPS, SOURCE_NS, SOURCE, {"data": {"v": "2"}})
    complete = watcher.wait_all(keys, 600)
    shares = share.stop()
    last = watcher.last_seen(keys)
    wait_api_quiet(kube)
    spy.stop(30)
    api = counter.since()
    codes = counter.codes()
    rec: dict[str, Any] = {
        "load": load_change,
        "complete": complete,
        "seconds": (last - t0) if last is not None else float("nan"),
        "cpu_share": shares,
        "configmap_gets": api.get(("GET", "configmaps", ""), 0.0),
        "gets": {"|".join(k): v for k, v in api.items() if k[0] == "GET"},
        "configmap_writes": sum(
            v for k, v in api.items() if k[0] in WRITE_VERBS and k[1] == "configmaps"
        ),
        "status_writes": sum(
            v
            for k, v in api.items()
            if k[0] in WRITE_VERBS and k[1] == "configbundles" and k[2] == "status"
        ),
        "writes_by_code": codes,
        "modified_per_configmap": watcher.modified_histogram(keys),
        "spread": watcher.spread(keys, t0),
        "requests": keyed(api),
    }
    log(
        f"S10 {name}: all {len(keys)} ConfigMaps changed in {rec['seconds']:.2f} s; "
        f"ConfigMap GETs {rec['configmap_gets']:.0f}, writes "
        f"{rec['configmap_writes']:.0f}, status writes {rec['status_writes']:.0f}, "
        f"MODIFIED per ConfigMap {rec['modified_per_configmap']}"
    )
    return rec


def _peer(bench: Bench, watcher: Watcher, sizes: Options) -> dict[str, Any]:
    """The Go peer on the same cluster: converge, one source change; then cleaned up."""
    kube = bench.kube
    pairs = layout(sizes, "p")
    keys = _keys(pairs)
    try:
        op = bench.start(PEER, "s10-controller-runtime", extra_args=["--sources"])
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
        bench.stop()

    def gone(p: tuple[str, str]) -> None:
        with contextlib.suppress(ApiError):  # the garbage collector may be first
            kube.delete(CONFIGMAPS, p[0], p[1])

    run_parallel(gone, pairs, bench.s.loader_threads)
    wait_api_quiet(kube)
    return rec


def _cbop(bench: Bench, watcher: Watcher, sizes: Options) -> dict[str, Any]:
    kube = bench.kube
    pairs = layout(sizes, "b")
    keys = _keys(pairs)
    # Only ConfigBundles here (no ClusterConfigBundle CRD is installed).
    op = bench.start("cbop", "s10-cbop", extra_args=["--no-cluster-bundles"])
    rec: dict[str, Any] = _converge(bench, watcher, keys, pairs, "cbop")
    rec["rss_mib"] = bench.steady(op)["steady_mib"]
    rec["change"] = _change(bench, watcher, keys, "cbop", op)
    rec["load_change"] = rec["change"]["load"]

    # Idle.
    wait_api_quiet(kube)
    counter = Counter(kube).mark()
    log(f"S10 idle {sizes.idle:.0f} s")
    time.sleep(sizes.idle)
    idle = writes_on(counter.since(), WRITTEN)
    rec["idle"] = {"seconds": sizes.idle, "writes": sum(idle.values()), "by_kind": idle}
    log(f"S10 idle: {rec['idle']['writes']:.0f} writes")

    # RSS with 10,000 ConfigMaps that are no sources.
    other = "s10-unlabelled"
    cluster.create_namespace(kube, other)

    def unlabelled(i: int) -> None:
        body = {
            "metadata": {"name": f"plain-{i:05d}", "labels": {"app": "unrelated"}},
            "data": {"config.yaml": f"id: {i}\n" + "x: y\n" * 200},
        }
        kube.create(CONFIGMAPS, other, body)

    t = time.monotonic()
    run_parallel(unlabelled, list(range(sizes.unlabelled)), bench.s.loader_threads)
    log(f"S10: {sizes.unlabelled} unlabelled ConfigMaps in {time.monotonic() - t:.1f} s")
    wait_api_quiet(kube, quiet=3.0, timeout=180)
    rec["rss_unlabelled_mib"] = bench.steady(op)["steady_mib"]
    rec["unlabelled"] = sizes.unlabelled
    log(
        f"S10 RSS: {rec['rss_mib']:.1f} MiB converged, {rec['rss_unlabelled_mib']:.1f} MiB "
        f"with {sizes.unlabelled} unlabelled ConfigMaps"
    )
    return rec


class Sources(Defaults):
    """S10, once for the run, when cbop is among the implementations; the Go peer too
    when it is."""

    names = ("s10",)
    defaults = Options()

    def accepts(self, impl: str) -> bool:
        return impl == "cbop"

    def run(self, run_: Run, options: Options, impl: str | None) -> None:
        log("=== S10: one source read by many bundles, against raw (and the Go peer)")
        run_.results["s10"] = run(run_.bench, options, impls=frozenset(run_.impls))

    def markdown(self, results: Mapping[str, Any]) -> list[str]:
        return report.markdown(results)


SOURCES = Sources()
