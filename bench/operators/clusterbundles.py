"""S9 (ClusterConfigBundle): one ClusterConfigBundle over 1,000 labelled namespaces.

In one run on one control plane, against the raw floor measured in the same run:

- **RSS with 0 namespaces**: a cluster-wide cbop started before the namespaces exist;
  steady VmRSS (mean over ``steady_seconds`` once it is quiet).
- ``namespaces`` (1,000) namespaces created by the loader threads, labelled
  ``bench.cbop.dev/s9: "1"``.
- **raw**: ``workers`` threads create the ConfigMap each namespace must get (the content,
  labels and hash annotation cbop writes), one POST per namespace. Seconds from the
  first create until the watch has shown every one. The ConfigMaps are deleted after.
- **cbop**: ``python -m cbop --workers 4 --kube-api-qps 0 --no-rollout`` (no
  ``--namespace``), started and quiet; then one ClusterConfigBundle selecting the
  labelled namespaces is created. Seconds from its create until the watch has shown,
  in every namespace, the stamped ConfigBundle Ready for its generation and its
  ConfigMap matching and controlled by that stamp; the ratio to raw.
- **template change**: the template's data and labels changed; seconds until every
  namespace is done again; ConfigMap and stamp writes from kube-apiserver's
  ``apiserver_request_total`` (minus the bench's own requests), ConfigMap MODIFIED
  events per namespace from the watch (the goal: exactly one each), and the
  ClusterConfigBundle's status writes per second (the goal: at most one).
- **idle**: ``idle`` seconds (60) with nothing changing: writes on every resource cbop
  writes (the goal: zero).
- **new namespaces**: ``new`` (50) labelled namespaces created one at a time, each once
  the previous one is served; seconds from its create request until the watch shows its
  ConfigMap matching (and until its stamp is Ready); p50/p99.
- **RSS with every namespace served**: a fresh cbop on the converged cluster (what it
  writes at that restart is counted too); steady VmRSS, and MiB per namespace against
  the first figure.

The load average of the machine is taken at the start of each phase.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.operators import cluster
from bench.operators.cluster import Expected, RequestCounts
from bench.operators.procs import (
    CpuShare,
    Operator,
    Sampler,
    cbop_revision,
    cpu_seconds,
    wait_quiet,
)
from bench.operators.scenarios import Bench, log, own_requests, percentile, profiler, subtract
from cbop.api import ANNOTATION_CONTENT_HASH
from cbop.kube import (
    CLUSTERCONFIGBUNDLES,
    CONFIGBUNDLES,
    CONFIGMAPS,
    NAMESPACES,
    ApiError,
    ConnectionFailed,
    KubeClient,
    Resource,
)

SCENARIOS = frozenset({"s9"})
CRD = cluster.REPO / "manifests" / "crd" / "cbop.dev_clusterconfigbundles.yaml"
#: The ClusterConfigBundle's name, so also every stamp's and every ConfigMap's.
NAME = "s9-bundle"
SELECTOR_LABEL = "bench.cbop.dev/s9"
#: Indexes of :func:`cluster.bundle_spec` used as the template before and after the change.
FIRST, SECOND = 0, 1
#: Width (s) of the window in which at most one status write may fall: 1 s less the
#: jitter of timestamping watch events as they are decoded (tens of ms).
STATUS_WINDOW = 0.95
#: Resources whose writes count as cbop's in the idle window.
WRITTEN = frozenset({"configbundles", "configmaps", "events", "clusterconfigbundles"})


@dataclass(frozen=True)
class Sizes:
    """The sizes of one S9 run.

    Attributes:
        namespaces: labelled namespaces in place before the ClusterConfigBundle.
        new: namespaces created one at a time afterwards.
        idle: seconds of the idle window.
    """

    namespaces: int = 1000
    new: int = 50
    idle: float = 60.0


def load() -> str:
    """The 1, 5 and 15 minute load averages, e.g. ``"3.10 2.95 2.40"``."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def install_crd(kubectl: os.PathLike[str], kubeconfig: os.PathLike[str]) -> None:
    """Apply the ClusterConfigBundle CRD and wait until it is Established."""
    base = [str(kubectl), f"--kubeconfig={kubeconfig}"]
    subprocess.run([*base, "apply", "-f", str(CRD)], check=True, capture_output=True)
    subprocess.run(
        [
            *base,
            "wait",
            "--for=condition=Established",
            "crd/clusterconfigbundles.cbop.dev",
            "--timeout=60s",
        ],
        check=True,
        capture_output=True,
    )


def namespace_names(start: int, count: int) -> list[str]:
    return [f"s9-{i:05d}" for i in range(start, start + count)]


def create_namespace(kube: KubeClient, name: str) -> None:
    kube.create(NAMESPACES, None, {"metadata": {"name": name, "labels": {SELECTOR_LABEL: "1"}}})


def cluster_bundle_body(index: int) -> dict[str, Any]:
    return {
        "apiVersion": CLUSTERCONFIGBUNDLES.api_version,
        "kind": CLUSTERCONFIGBUNDLES.kind,
        "metadata": {"name": NAME},
        "spec": {
            "namespaceSelector": {"matchLabels": {SELECTOR_LABEL: "1"}},
            "template": {**cluster.bundle_spec(index), "deletionPolicy": "Delete"},
        },
    }


def raw_configmap(want: Expected, index: int) -> dict[str, Any]:
    """What the raw floor writes: the ConfigMap cbop would write, without an owner."""
    spec = cluster.bundle_spec(index)
    return {
        "metadata": {
            "name": NAME,
            "labels": dict(want.labels),
            "annotations": {**spec["annotations"], ANNOTATION_CONTENT_HASH: want.content_hash},
        },
        "data": dict(want.data),
        "binaryData": dict(want.binary_data),
    }


# ------------------------------------------------------------------------ observing


@dataclass(slots=True)
class _Namespace:
    uid: str | None = None
    ready: bool = False
    generation: int = 0
    #: The stamp's generation must exceed this to count (set by :meth:`Watcher.expect`).
    after_generation: int = -1
    cm_ok: bool = False
    cm_owner: str | None = None
    cm_seen: float | None = None
    stamp_seen: float | None = None
    done: float | None = None
    cm_modified: int = 0


class Watcher:
    """Cluster-wide watches on the ConfigBundles, ConfigMaps and ClusterConfigBundle
    named :data:`NAME`; per namespace, when its ConfigMap matched and when it was done.

    Done: the ConfigMap matches the expected content (raw: that alone; cbop: also
    controlled by the namespace's stamp, the stamp Ready for its generation). The
    ClusterConfigBundle's MODIFIED events are timestamped, to see its status writes.
    Timestamps are ``time.monotonic()`` when an event is decoded.
    """

    def __init__(self, kube: KubeClient, want: Expected, *, stamped: bool) -> None:
        self._kube = kube
        self._want = want
        self._stamped = stamped
        self._state: dict[str, _Namespace] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._streams: list[Any] = []
        self._threads: list[threading.Thread] = []
        self._synced = threading.Barrier(4)
        self.cluster_modified: list[float] = []

    def start(self) -> Watcher:
        for res in (CONFIGBUNDLES, CONFIGMAPS, CLUSTERCONFIGBUNDLES):
            t = threading.Thread(target=self._run, args=(res,), daemon=True)
            t.start()
            self._threads.append(t)
        self._synced.wait(60)
        return self

    def stop(self) -> None:
        self._stop.set()
        for stream in list(self._streams):
            with contextlib.suppress(Exception):
                stream.close()
        for t in self._threads:
            t.join(5)

    def _run(self, res: Resource) -> None:
        selector = f"metadata.name={NAME}"
        listed = self._kube.list(res, None, field_selector=selector)
        for item in listed["items"]:
            self._handle(res, "ADDED", item)
        rv = listed["metadata"]["resourceVersion"]
        self._synced.wait(60)
        while not self._stop.is_set():
            try:
                stream = self._kube.watch(
                    res,
                    None,
                    resource_version=rv,
                    field_selector=selector,
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
                        self._handle(res, event["type"], obj)
            except (ApiError, ConnectionFailed):
                if self._stop.is_set():
                    return
            finally:
                stream.close()
                with contextlib.suppress(ValueError):
                    self._streams.remove(stream)

    def _handle(self, res: Resource, kind: str, obj: Mapping[str, Any]) -> None:
        now = time.monotonic()
        meta = obj.get("metadata") or {}
        with self._lock:
            if res is CLUSTERCONFIGBUNDLES:
                if kind == "MODIFIED":
                    self.cluster_modified.append(now)
                return
            ns = str(meta.get("namespace", ""))
            st = self._state.setdefault(ns, _Namespace())
            gone = kind == "DELETED"
            if res is CONFIGBUNDLES:
                st.uid = None if gone else meta.get("uid")
                if not gone and st.stamp_seen is None:
                    st.stamp_seen = now
                st.ready = not gone and cluster.bundle_ready(obj)
                st.generation = int(meta.get("generation") or 0)
            else:
                if kind == "MODIFIED":
                    st.cm_modified += 1
                st.cm_ok = not gone and cluster.content_ok(obj, self._want)
                st.cm_owner = None if gone else cluster.controller_uid(obj)
                if st.cm_ok and st.cm_seen is None:
                    st.cm_seen = now
            if st.done is None and self._done(st):
                st.done = now
                self._changed.notify_all()

    def _done(self, st: _Namespace) -> bool:
        if not st.cm_ok:
            return False
        if not self._stamped:
            return True
        fresh = st.generation > st.after_generation
        return st.ready and fresh and st.uid is not None and st.cm_owner == st.uid

    def expect(self, want: Expected) -> None:
        """Expect new content from now on: every namespace is not done, counts reset."""
        with self._lock:
            self._want = want
            for st in self._state.values():
                st.done, st.cm_seen, st.cm_ok, st.cm_modified = None, None, False, 0
                st.after_generation = st.generation
            self.cluster_modified.clear()

    def wait_done(self, namespaces: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not all(
                (st := self._state.get(n)) is not None and st.done is not None for n in namespaces
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 1.0))
        return True

    def stamps_seen(self, namespaces: list[str]) -> list[float]:
        """When each namespace's stamp was first seen (those seen)."""
        with self._lock:
            out = [self._state.get(n, _Namespace()).stamp_seen for n in namespaces]
        return [t for t in out if t is not None]

    def times(self, namespaces: list[str]) -> dict[str, tuple[float | None, float | None]]:
        """Namespace -> (ConfigMap matching since, done since)."""
        with self._lock:
            out = {}
            for n in namespaces:
                st = self._state.get(n, _Namespace())
                out[n] = (st.cm_seen, st.done)
            return out

    def modified(self, namespaces: list[str]) -> dict[int, int]:
        """How many namespaces saw k ConfigMap MODIFIED events since :meth:`expect`: k -> count."""
        with self._lock:
            out: dict[int, int] = {}
            for n in namespaces:
                k = self._state.get(n, _Namespace()).cm_modified
                out[k] = out.get(k, 0) + 1
            return out


# -------------------------------------------------------------------------- helpers


class Counter:
    """kube-apiserver's request counts since :meth:`mark`, minus the bench's own."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self._before: RequestCounts = {}
        self._own: dict[tuple[str, str], int] = {}

    def mark(self) -> Counter:
        self._before = cluster.apiserver_requests(self._kube)
        self._own = self._kube.request_counts()
        return self

    def since(self) -> RequestCounts:
        own = own_requests(self._own, self._kube.request_counts())
        return subtract(cluster.delta(cluster.apiserver_requests(self._kube), self._before), own)


def write_codes(kube: KubeClient) -> dict[str, float]:
    """Write requests on :data:`WRITTEN` resources by ``verb|resource|subresource|code``
    (``apiserver_request_total``), to tell lost races (409) from writes that landed."""
    out: dict[str, float] = {}
    prefix = "apiserver_request_total{"
    for line in cluster.raw_get(kube, "/metrics").splitlines():
        if not line.startswith(prefix):
            continue
        labels_text, _, value = line[len(prefix) :].rpartition("} ")
        labels = dict(cluster._LABEL.findall(labels_text))
        verb, res = labels.get("verb", ""), labels.get("resource", "")
        if verb not in cluster.WRITE_VERBS or res not in WRITTEN:
            continue
        key = "|".join((verb, res, labels.get("subresource", ""), labels.get("code", "")))
        out[key] = out.get(key, 0.0) + float(value.split()[0])
    return out


def code_delta(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def writes(api: RequestCounts, resource: str, subresource: str = "") -> float:
    return sum(
        v
        for (verb, res, sub), v in api.items()
        if verb in cluster.WRITE_VERBS and res == resource and sub == subresource
    )


def _wait_quiet_writes(kube: KubeClient, quiet: float = 3.0, timeout: float = 120.0) -> float:
    """Wait until no write touches :data:`WRITTEN` for ``quiet`` s; return the seconds waited."""
    start = time.monotonic()
    last = cluster.apiserver_requests(kube)
    calm = time.monotonic()
    while time.monotonic() - start < timeout:
        time.sleep(0.5)
        now = cluster.apiserver_requests(kube)
        moved = any(
            k[0] in cluster.WRITE_VERBS and k[1] in WRITTEN for k in cluster.delta(now, last)
        )
        last = now
        if moved:
            calm = time.monotonic()
        elif time.monotonic() - calm >= quiet:
            break
    return time.monotonic() - start


def run_parallel(fn: Any, items: list[Any], threads: int) -> list[Any]:
    """``fn`` over ``items`` on ``threads`` threads; the results in ``items``' order."""
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))


def cpu_share_of(bench: Bench, /, **more: int) -> CpuShare:
    """CPU seconds of the control plane's processes, the machine, and ``more`` (name=pid)."""
    return CpuShare({**(bench.s.components() if bench.s.components else {}), **more})


def _start(bench: Bench, tag: str) -> Operator:
    op = Operator(
        "cbop",
        bench.s.kubeconfig,
        None,
        workers=bench.s.workers,
        resync=0.0,
        log_path=bench.s.logs / f"s9-{tag}.log",
    )
    bench.revisions.add(cbop_revision())
    bench.current = op
    op.wait_ready()
    return op


def _steady(bench: Bench, op: Operator) -> dict[str, float]:
    """Wait until ``op`` is quiet; its steady RSS over ``steady_seconds`` and its peak."""
    sampler = Sampler(op.pid, interval=0.25).start()
    try:
        settle = wait_quiet(op.pid, timeout=180)
        since = time.monotonic()
        time.sleep(bench.s.steady_seconds)
        steady = sampler.mean_rss_mib(since)
    finally:
        sampler.stop()
    return {"steady_mib": steady, "peak_mib": sampler.peak_mib(), "settle_seconds": settle}


# ------------------------------------------------------------------------------ run


def run(bench: Bench, sizes: Sizes) -> dict[str, Any]:
    """Run S9 once (see the module docstring); return its record."""
    kube = bench.kube
    threads = bench.s.workers
    first = cluster.expected(NAME, FIRST)
    second = cluster.expected(NAME, SECOND)
    namespaces = namespace_names(0, sizes.namespaces)
    rec: dict[str, Any] = {"namespaces": sizes.namespaces, "load": {}}

    # RSS with nothing served, before the namespaces exist.
    rec["load"]["rss0"] = load()
    op = _start(bench, "rss0")
    try:
        rec["rss0"] = _steady(bench, op)
    finally:
        bench.stop()
    log(f"S9 cbop with 0 namespaces: steady {rec['rss0']['steady_mib']:.1f} MiB")

    rec["load"]["namespaces"] = load()
    t = time.monotonic()
    run_parallel(lambda ns: create_namespace(kube, ns), namespaces, bench.s.loader_threads)
    log(f"S9: {len(namespaces)} namespaces created in {time.monotonic() - t:.1f} s")
    cluster.wait_api_quiet(kube)

    # ---- raw floor
    rec["load"]["raw"] = load()
    watcher = Watcher(kube, first, stamped=False).start()
    try:
        body = raw_configmap(first, FIRST)
        share = cpu_share_of(bench)
        t0 = time.monotonic()
        log(f"S9 raw: creating {len(namespaces)} ConfigMaps with {threads} threads")
        run_parallel(lambda ns: kube.create(CONFIGMAPS, ns, body), namespaces, threads)
        complete = watcher.wait_done(namespaces, timeout=300)
        done = [d for _, d in watcher.times(namespaces).values() if d is not None]
        shares = share.stop()
    finally:
        watcher.stop()
    rec["raw"] = {
        "cpu_share": shares,
        "complete": complete,
        "converged": len(done),
        "seconds": max(done) - t0 if done else float("nan"),
    }
    log(f"S9 raw: {len(done)}/{len(namespaces)} in {rec['raw']['seconds']:.2f} s")
    run_parallel(lambda ns: kube.delete(CONFIGMAPS, ns, NAME), namespaces, bench.s.loader_threads)
    cluster.wait_api_quiet(kube)

    # ---- cbop
    rec["load"]["cbop"] = load()
    op = _start(bench, "serve")
    try:
        wait_quiet(op.pid, timeout=120)
        watcher = Watcher(kube, first, stamped=True).start()
        try:
            rec["cbop"] = _converge(bench, op, watcher, namespaces)
            rec["template"] = _template_change(bench, op, watcher, namespaces, second)
            rec["idle"] = _idle(bench, op, sizes.idle)
            rec["new"] = _new_namespaces(bench, watcher, sizes)
            # A status write held back by the 1 s interval is this process's to make.
            _wait_quiet_writes(bench.kube)
        finally:
            watcher.stop()
    finally:
        bench.stop()
    served = sizes.namespaces + sizes.new

    # ---- RSS with everything served: a fresh process, and what its restart writes.
    cluster.wait_api_quiet(kube)
    rec["load"]["rss"] = load()
    counter = Counter(kube).mark()
    op = _start(bench, "rss")
    try:
        rec["rss"] = _steady(bench, op)
    finally:
        bench.stop()
    api = counter.since()
    rec["rss"]["restart_requests"] = {"|".join(k): v for k, v in sorted(api.items())}
    rec["rss"]["restart_writes"] = sum(
        v for k, v in api.items() if k[0] in cluster.WRITE_VERBS and k[1] in WRITTEN
    )
    rec["rss"]["served"] = served
    added = rec["rss"]["steady_mib"] - rec["rss0"]["steady_mib"]
    rec["rss"]["mib_per_namespace"] = added / served
    log(
        f"S9 cbop with {served} namespaces: steady {rec['rss']['steady_mib']:.1f} MiB "
        f"({1024 * added / served:.1f} KiB per namespace); "
        f"restart writes {rec['rss']['restart_writes']:.0f}"
    )
    raw_s = rec["raw"]["seconds"]
    rec["ratio"] = rec["cbop"]["seconds"] / raw_s if raw_s else float("nan")
    return rec


def _converge(
    bench: Bench, op: Operator, watcher: Watcher, namespaces: list[str]
) -> dict[str, Any]:
    counter = Counter(bench.kube).mark()
    codes0 = write_codes(bench.kube)
    cpu0 = cpu_seconds(op.pid)
    spy = None
    if bench.s.profile is not None:
        spy = profiler(op.pid, bench.s.profile / f"cbop-s9-converge-{op.pid}.collapsed")
    log(f"S9 cbop: one ClusterConfigBundle over {len(namespaces)} namespaces")
    share = cpu_share_of(bench)
    t0 = time.monotonic()
    bench.kube.create(CLUSTERCONFIGBUNDLES, None, cluster_bundle_body(FIRST))
    complete = watcher.wait_done(namespaces, timeout=600)
    shares = share.stop()
    times = watcher.times(namespaces)
    stamps = sorted(t - t0 for t in watcher.stamps_seen(namespaces))
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
    cpu1 = cpu_seconds(op.pid)
    done = [d for _, d in times.values() if d is not None]
    cm = [c for c, _ in times.values() if c is not None]
    time.sleep(1.0)
    api = counter.since()
    codes = code_delta(write_codes(bench.kube), codes0)
    out = {
        "complete": complete,
        "converged": len(done),
        "seconds": max(done) - t0 if done else float("nan"),
        "configmaps_seconds": max(cm) - t0 if cm else float("nan"),
        "stamps_seconds": stamps[-1] if stamps else float("nan"),
        "stamps_p50": percentile(stamps, 0.5),
        "cpu_share": shares,
        "p50": percentile([d - t0 for d in done], 0.5),
        "cpu_seconds": cpu1 - cpu0,
        "writes_by_code": codes,
        "requests": {"|".join(k): v for k, v in sorted(api.items())},
    }
    log(
        f"S9 cbop: {len(done)}/{len(namespaces)} done in {out['seconds']:.2f} s "
        f"(ConfigMaps all matching at {out['configmaps_seconds']:.2f} s), "
        f"{out['cpu_seconds']:.1f} CPU s"
    )
    return out


def _template_change(
    bench: Bench, op: Operator, watcher: Watcher, namespaces: list[str], second: Expected
) -> dict[str, Any]:
    cluster.wait_api_quiet(bench.kube)
    _wait_quiet_writes(bench.kube)
    counter = Counter(bench.kube).mark()
    codes0 = write_codes(bench.kube)
    cpu0 = cpu_seconds(op.pid)
    watcher.expect(second)
    spy = None
    if bench.s.profile is not None:
        spy = profiler(op.pid, bench.s.profile / f"cbop-s9-template-{op.pid}.collapsed")
    log("S9 cbop: template change")
    share = cpu_share_of(bench)
    t0 = time.monotonic()
    spec = cluster_bundle_body(SECOND)["spec"]
    bench.kube.patch(CLUSTERCONFIGBUNDLES, None, NAME, {"spec": {"template": spec["template"]}})
    complete = watcher.wait_done(namespaces, timeout=600)
    shares = share.stop()
    done = [d for _, d in watcher.times(namespaces).values() if d is not None]
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
    settled = _wait_quiet_writes(bench.kube)
    cpu1 = cpu_seconds(op.pid)
    api = counter.since()
    codes = code_delta(write_codes(bench.kube), codes0)
    status_times = sorted(t - t0 for t in watcher.cluster_modified)
    # The first MODIFIED event is the spec change itself; the rest are status writes.
    status_times = status_times[1:]
    gaps = [b - a for a, b in itertools.pairwise(status_times)]
    last = status_times[-1] if status_times else 0.0
    status_writes = writes(api, "clusterconfigbundles", "status")
    window = max(status_times[-1] - status_times[0], 1.0) if len(status_times) > 1 else 1.0
    per_window = _max_in_window(status_times, STATUS_WINDOW)
    out = {
        "complete": complete,
        "converged": len(done),
        "seconds": max(done) - t0 if done else float("nan"),
        "settle_seconds": settled,
        "cpu_share": shares,
        "cpu_seconds": cpu1 - cpu0,
        "configmap_writes": writes(api, "configmaps"),
        "stamp_writes": writes(api, "configbundles"),
        "stamp_status_writes": writes(api, "configbundles", "status"),
        "status_writes": status_writes,
        "status_events": len(status_times),
        "status_last_seconds": last,
        "status_per_second": (len(status_times) - 1) / window if len(status_times) > 1 else 0.0,
        "status_max_in_1s": per_window,
        "status_min_gap": min(gaps) if gaps else None,
        "modified_per_namespace": watcher.modified(namespaces),
        "writes_by_code": codes,
        "requests": {"|".join(k): v for k, v in sorted(api.items())},
    }
    log(
        f"S9 template change: done in {out['seconds']:.2f} s; ConfigMap writes "
        f"{out['configmap_writes']:.0f}, per namespace {out['modified_per_namespace']}; "
        f"status writes {status_writes:.0f} (at most {per_window} in any 1 s)"
    )
    return out


def _max_in_window(times: list[float], width: float) -> int:
    """The most of ``times`` (sorted) within any half-open window of ``width`` seconds."""
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] >= width:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def _idle(bench: Bench, op: Operator, seconds: float) -> dict[str, Any]:
    _wait_quiet_writes(bench.kube)
    load_at = load()
    counter = Counter(bench.kube).mark()
    cpu0 = cpu_seconds(op.pid)
    log(f"S9 idle {seconds:.0f} s")
    time.sleep(seconds)
    api = counter.since()
    idle_writes = {
        "|".join(k): v for k, v in api.items() if k[0] in cluster.WRITE_VERBS and k[1] in WRITTEN
    }
    out = {
        "seconds": seconds,
        "load": load_at,
        "writes": sum(idle_writes.values()),
        "by_kind": idle_writes,
        "cpu_seconds": cpu_seconds(op.pid) - cpu0,
    }
    log(f"S9 idle: {out['writes']:.0f} writes, {out['cpu_seconds']:.2f} CPU s")
    return out


def _new_namespaces(bench: Bench, watcher: Watcher, sizes: Sizes) -> dict[str, Any]:
    fresh = namespace_names(sizes.namespaces, sizes.new)
    load_at = load()
    log(f"S9 new namespaces: {len(fresh)} one at a time, {sizes.namespaces} in place")
    to_cm: list[float] = []
    to_ready: list[float] = []
    for ns in fresh:
        sent = time.monotonic()
        create_namespace(bench.kube, ns)
        watcher.wait_done([ns], timeout=60)
        cm, done = watcher.times([ns])[ns]
        if cm is not None:
            to_cm.append(cm - sent)
        if done is not None:
            to_ready.append(done - sent)
        time.sleep(0.2)
    out = {
        "count": len(fresh),
        "served": len(to_cm),
        "load": load_at,
        "p50": percentile(to_cm, 0.5),
        "p99": percentile(to_cm, 0.99),
        "max": max(to_cm, default=float("nan")),
        "ready_p50": percentile(to_ready, 0.5),
        "ready_p99": percentile(to_ready, 0.99),
        "latencies": sorted(to_cm),
    }
    log(
        f"S9 new namespaces: {len(to_cm)}/{len(fresh)} served, ConfigMap p50 {out['p50']:.3f} s, "
        f"p99 {out['p99']:.3f} s (stamp Ready p99 {out['ready_p99']:.3f} s)"
    )
    return out


# ------------------------------------------------------------------------- report


def goal_word(ok: bool) -> str:
    return "met" if ok else "missed"


def markdown(results: dict[str, Any]) -> str:
    """The S9 section of the results file ("" when it did not run)."""
    r = results.get("s9")
    if not r:
        return ""
    t, idle, new, rss = r["template"], r["idle"], r["new"], r["rss"]
    per_ns = t["modified_per_namespace"]
    exactly_one = per_ns.get(1, per_ns.get("1", 0)) == r["namespaces"]
    lines = [
        "",
        f"### S9 ClusterConfigBundle over {r['namespaces']:,} labelled namespaces",
        "",
        "Load average at the start of each phase: "
        + "; ".join(f"{k} {v}" for k, v in r["load"].items())
        + ".",
        "",
        "| measure | value | goal |",
        "|---|---:|---|",
        f"| raw: {r['namespaces']:,} ConfigMaps created, {results['settings']['workers']} threads, "
        f"s | {r['raw']['seconds']:.2f} | floor |",
        f"| cbop: ClusterConfigBundle create to all Ready and matching, s "
        f"| {r['cbop']['seconds']:.2f} | |",
        f"| cbop / raw | {r['ratio']:.2f}x | <= 1.2x: {goal_word(r['ratio'] <= 1.2)} |",
        f"| cbop: all ConfigMaps matching (stamps not yet all Ready), s "
        f"| {r['cbop']['configmaps_seconds']:.2f} | |",
        f"| cbop: last stamped ConfigBundle seen (p50), s "
        f"| {r['cbop'].get('stamps_seconds', float('nan')):.2f} "
        f"({r['cbop'].get('stamps_p50', float('nan')):.2f}) | |",
        f"| cbop CPU s during the converge | {r['cbop']['cpu_seconds']:.1f} | |",
        f"| kube-apiserver CPU s / machine busy: raw | {cpu_cell(r['raw'])} | |",
        f"| kube-apiserver CPU s / machine busy: cbop converge | {cpu_cell(r['cbop'])} | |",
        f"| kube-apiserver CPU s / machine busy: template change | {cpu_cell(t)} | |",
        f"| template change: all done again, s | {t['seconds']:.2f} | |",
        f"| template change: ConfigMap writes (apiserver_request_total) "
        f"| {t['configmap_writes']:.0f} | {r['namespaces']:,} |",
        f"| template change: namespaces with exactly one ConfigMap MODIFIED event "
        f"| {per_ns.get(1, per_ns.get('1', 0))} | all: {goal_word(exactly_one)} |",
        f"| template change: ConfigMap writes by answer | {code_cells(t, 'configmaps')} | |",
        f"| template change: stamp writes / stamp status writes "
        f"| {t['stamp_writes']:.0f} / {t['stamp_status_writes']:.0f} | |",
        f"| template change: ClusterConfigBundle status writes, over s "
        f"| {t['status_writes']:.0f} over {t['status_last_seconds']:.1f} | |",
        f"| template change: most status writes within {STATUS_WINDOW} s (min gap s) "
        f"| {t['status_max_in_1s']} ({_gap(t['status_min_gap'])}) "
        f"| <= 1/s: {goal_word(t['status_max_in_1s'] <= 1)} |",
        f"| idle {idle['seconds']:.0f} s: writes (CPU s) | {idle['writes']:.0f} "
        f"({idle['cpu_seconds']:.2f}) | 0: {goal_word(idle['writes'] == 0)} |",
        f"| new namespace to its ConfigMap, p50 / p99 / max s ({new['served']}/{new['count']}) "
        f"| {new['p50']:.3f} / {new['p99']:.3f} / {new['max']:.3f} "
        f"| p99 <= 1 s: {goal_word(new['p99'] <= 1.0)} |",
        f"| new namespace to its stamp Ready, p50 / p99 s "
        f"| {new['ready_p50']:.3f} / {new['ready_p99']:.3f} | |",
        f"| steady RSS, 0 namespaces / {rss['served']:,} served, MiB "
        f"| {r['rss0']['steady_mib']:.1f} / {rss['steady_mib']:.1f} | |",
        f"| steady RSS per namespace served, KiB | {1024 * rss['mib_per_namespace']:.1f} "
        "| report |",
        f"| writes at a restart on the converged cluster | {rss['restart_writes']:.0f} | 0 |",
    ]
    return "\n".join(lines) + "\n"


def _gap(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def cpu_cell(phase: Mapping[str, Any]) -> str:
    share = phase.get("cpu_share") or {}
    total = share.get("machine total")
    if not total:
        return "-"
    busy = 100 * share.get("machine busy", 0.0) / total
    return f"{share.get('kube-apiserver', float('nan')):.1f} / {busy:.0f} %"


def code_cells(phase: Mapping[str, Any], resource: str) -> str:
    """``PUT 200: 1000, PUT 409: 9`` from a phase's ``writes_by_code``."""
    cells = []
    for key, value in sorted((phase.get("writes_by_code") or {}).items()):
        verb, res, sub, code = key.split("|")
        if res == resource and not sub:
            cells.append(f"{verb} {code}: {value:.0f}")
    return ", ".join(cells) or "-"
