"""S9 (ClusterConfigBundle): one ClusterConfigBundle over 1,000 labelled namespaces.

In one run on one control plane, against the raw floor measured in the same run:

- **RSS with 0 namespaces**: a cluster-wide cbop started before the namespaces exist;
  steady VmRSS (mean over ``steady_seconds`` once it is quiet).
- ``namespaces`` (1,000) namespaces created by the loader threads, labelled
  ``bench.cbop.dev/s9: "1"``.
- **raw**: ``workers`` threads create the ConfigMap each namespace must get (the content,
  labels and hash annotation cbop writes), one POST per namespace. Seconds from the
  first create until the watch has shown every one. Then each is updated to the
  changed template's content (one PUT per namespace), timed the same way (the floor of
  the template change). The ConfigMaps are deleted after.
- **controller-runtime** (with ``controller-runtime`` among the impls): the Go peer
  (``bench/peers/controller-runtime --cluster-bundles``), cluster-wide, 4 workers,
  writing each selected namespace's ConfigMap directly (no stamped ConfigBundle): the
  same ClusterConfigBundle created, then the same template change, each namespace done
  when its ConfigMap matches; time, writes by answer code, requests, CPU of the peer
  and of kube-apiserver. The ClusterConfigBundle and the ConfigMaps are deleted after,
  and the peer stopped, before cbop starts.
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
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.operators import cluster
from bench.operators.apiserver import (
    WRITE_VERBS,
    Counter,
    keyed,
    wait_api_quiet,
    writes,
)
from bench.operators.cluster import Expected
from bench.operators.harness import Bench, log, percentile, run_parallel
from bench.operators.procs import Operator
from bench.operators.sampling import cpu_seconds, load_average, wait_cpu_quiet
from bench.operators.scenario import Defaults, Run
from bench.operators.scenarios import clusterbundles_report as report
from bench.operators.scenarios.clusterbundles_watch import Watcher
from cbop.api import ANNOTATION_CONTENT_HASH
from cbop.kube import (
    CLUSTERCONFIGBUNDLES,
    CONFIGMAPS,
    ApiError,
    KubeClient,
)

CRD = cluster.CRDS / "cbop.dev_clusterconfigbundles.yaml"
#: The Go peer measured against the same floor when it is among the impls.
PEER = "controller-runtime"
#: The ClusterConfigBundle's name, so also every stamp's and every ConfigMap's.
NAME = "s9-bundle"
SELECTOR_LABEL = "bench.cbop.dev/s9"
#: Indexes of :func:`cluster.bundle_spec` used as the template before and after the change.
FIRST, SECOND = 0, 1
#: Resources whose writes count as cbop's in the idle window.
WRITTEN = frozenset({"configbundles", "configmaps", "events", "clusterconfigbundles"})


@dataclass(frozen=True)
class Options:
    """The sizes of one S9 run.

    Attributes:
        namespaces: labelled namespaces in place before the ClusterConfigBundle.
        new: namespaces created one at a time afterwards.
        idle: seconds of the idle window.
    """

    namespaces: int = 1000
    new: int = 50
    idle: float = 60.0


def namespace_names(start: int, count: int) -> list[str]:
    return [f"s9-{i:05d}" for i in range(start, start + count)]


def create_namespace(kube: KubeClient, name: str) -> None:
    cluster.create_namespace(kube, name, labels={SELECTOR_LABEL: "1"})


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


# ------------------------------------------------------------------------------ run


def wait_writes_quiet(kube: KubeClient) -> float:
    """Wait until no write touches :data:`WRITTEN` for 3 s (at most 120 s)."""
    return wait_api_quiet(kube, resources=WRITTEN, verbs=WRITE_VERBS, quiet=3.0, timeout=120.0)


def _start(bench: Bench, tag: str) -> Operator:
    return bench.start("cbop", f"s9-{tag}")


def run(bench: Bench, sizes: Options, impls: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Run S9 once (see the module docstring); return its record.

    ``impls``: with :data:`PEER` in it, the Go peer is measured too (after raw, before
    cbop).
    """
    kube = bench.kube
    first = cluster.expected(NAME, FIRST)
    second = cluster.expected(NAME, SECOND)
    namespaces = namespace_names(0, sizes.namespaces)
    rec: dict[str, Any] = {"namespaces": sizes.namespaces, "load": {}}

    # RSS with nothing served, before the namespaces exist.
    rec["load"]["rss0"] = load_average()
    op = _start(bench, "rss0")
    try:
        rec["rss0"] = bench.steady(op)
    finally:
        bench.stop()
    log(f"S9 cbop with 0 namespaces: steady {rec['rss0']['steady_mib']:.1f} MiB")

    rec["load"]["namespaces"] = load_average()
    t = time.monotonic()
    run_parallel(lambda ns: create_namespace(kube, ns), namespaces, bench.s.loader_threads)
    log(f"S9: {len(namespaces)} namespaces created in {time.monotonic() - t:.1f} s")
    wait_api_quiet(kube)

    rec["load"]["raw"] = load_average()
    rec["raw"], rec["raw_template"] = _raw(bench, namespaces, first, second)
    if PEER in impls:
        rec["load"]["peer"] = load_average()
        rec["peer"] = _peer(bench, namespaces, first, second)

    # ---- cbop
    rec["load"]["cbop"] = load_average()
    op = _start(bench, "serve")
    try:
        wait_cpu_quiet(op.pid, timeout=120)
        watcher = Watcher(kube, NAME, first, stamped=True).start()
        try:
            rec["cbop"] = _converge(bench, op, watcher, namespaces)
            rec["template"] = _template_change(bench, op, watcher, namespaces, second)
            rec["idle"] = _idle(bench, op, sizes.idle)
            rec["new"] = _new_namespaces(bench, watcher, sizes)
            # A status write held back by the 1 s interval is this process's to make.
            wait_writes_quiet(bench.kube)
        finally:
            watcher.stop()
    finally:
        bench.stop()
    served = sizes.namespaces + sizes.new

    # ---- RSS with everything served: a fresh process, and what its restart writes.
    wait_api_quiet(kube)
    rec["load"]["rss"] = load_average()
    counter = Counter(kube).mark()
    op = _start(bench, "rss")
    try:
        rec["rss"] = bench.steady(op)
    finally:
        bench.stop()
    api = counter.since()
    rec["rss"]["restart_requests"] = keyed(api)
    rec["rss"]["restart_writes"] = sum(
        v for k, v in api.items() if k[0] in WRITE_VERBS and k[1] in WRITTEN
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


def _raw(
    bench: Bench, namespaces: list[str], first: Expected, second: Expected
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The floor: ``workers`` threads create each namespace's ConfigMap, then update each
    to the second template's (a PUT with the resourceVersion the create returned); both
    timed until the watch has shown every one. The ConfigMaps are deleted after."""
    kube, threads = bench.kube, bench.s.workers
    watcher = Watcher(kube, NAME, first, stamped=False).start()
    try:
        body = raw_configmap(first, FIRST)
        counter = Counter(kube).mark()
        share = bench.cpu_share()
        t0 = time.monotonic()
        log(f"S9 raw: creating {len(namespaces)} ConfigMaps with {threads} threads")
        created = run_parallel(lambda ns: kube.create(CONFIGMAPS, ns, body), namespaces, threads)
        complete = watcher.wait_done(namespaces, timeout=300)
        done = [d for _, d in watcher.times(namespaces).values() if d is not None]
        converge = {
            "cpu_share": share.stop(),
            "complete": complete,
            "converged": len(done),
            "seconds": max(done) - t0 if done else float("nan"),
            "bench_requests": keyed(counter.own()),
        }
        log(f"S9 raw: {len(done)}/{len(namespaces)} in {converge['seconds']:.2f} s")
        wait_api_quiet(kube)
        watcher.expect(second)

        def update(obj: dict[str, Any]) -> None:
            meta = obj["metadata"]
            changed = raw_configmap(second, SECOND)
            changed["metadata"]["resourceVersion"] = meta["resourceVersion"]
            kube.update(CONFIGMAPS, meta["namespace"], NAME, changed)

        counter = Counter(kube).mark()
        share = bench.cpu_share()
        t0 = time.monotonic()
        run_parallel(update, created, threads)
        complete = watcher.wait_done(namespaces, timeout=300)
        done = [d for _, d in watcher.times(namespaces).values() if d is not None]
        template = {
            "cpu_share": share.stop(),
            "complete": complete,
            "converged": len(done),
            "seconds": max(done) - t0 if done else float("nan"),
            "bench_requests": keyed(counter.own()),
            "modified_per_namespace": watcher.modified(namespaces),
        }
        log(f"S9 raw: {len(done)}/{len(namespaces)} updated in {template['seconds']:.2f} s")
    finally:
        watcher.stop()
    run_parallel(lambda ns: kube.delete(CONFIGMAPS, ns, NAME), namespaces, bench.s.loader_threads)
    wait_api_quiet(kube)
    return converge, template


def _peer(bench: Bench, namespaces: list[str], first: Expected, second: Expected) -> dict[str, Any]:
    """The Go peer (``--cluster-bundles``): the same ClusterConfigBundle, create and
    template change, each namespace done when its ConfigMap matches. Then the
    ClusterConfigBundle and the ConfigMaps are deleted and the peer stopped."""
    kube = bench.kube
    rec: dict[str, Any] = {}
    try:
        op = bench.start(PEER, "s9-controller-runtime", extra_args=["--cluster-bundles"])
        wait_cpu_quiet(op.pid, timeout=120)
        watcher = Watcher(kube, NAME, first, stamped=False).start()
        try:
            rec["converge"] = _converge(bench, op, watcher, namespaces)
            rec["template"] = _template_change(bench, op, watcher, namespaces, second)
        finally:
            watcher.stop()
        kube.delete(CLUSTERCONFIGBUNDLES, None, NAME)
    finally:
        bench.stop()

    def gone(ns: str) -> None:
        with contextlib.suppress(ApiError):  # the garbage collector may be first
            kube.delete(CONFIGMAPS, ns, NAME)

    run_parallel(gone, namespaces, bench.s.loader_threads)
    deadline = time.monotonic() + 300
    named = f"metadata.name={NAME}"
    while kube.list(CONFIGMAPS, None, field_selector=named)["items"]:
        if time.monotonic() > deadline:
            raise TimeoutError("S9: the peer's ConfigMaps are still there after 300 s")
        time.sleep(1.0)
    wait_api_quiet(kube)
    return rec


def _converge(
    bench: Bench, op: Operator, watcher: Watcher, namespaces: list[str]
) -> dict[str, Any]:
    impl = op.impl
    counter = Counter(bench.kube, codes=WRITTEN).mark()
    cpu0 = cpu_seconds(op.pid)
    spy = bench.profile(op, f"{impl}-s9-converge-{op.pid}")
    log(f"S9 {impl}: one ClusterConfigBundle over {len(namespaces)} namespaces")
    share = bench.cpu_share()
    t0 = time.monotonic()
    bench.kube.create(CLUSTERCONFIGBUNDLES, None, cluster_bundle_body(FIRST))
    complete = watcher.wait_done(namespaces, timeout=600)
    shares = share.stop()
    times = watcher.times(namespaces)
    stamps = sorted(t - t0 for t in watcher.stamps_seen(namespaces))
    spy.stop()
    cpu1 = cpu_seconds(op.pid)
    done = [d for _, d in times.values() if d is not None]
    cm = [c for c, _ in times.values() if c is not None]
    time.sleep(1.0)
    api = counter.since()
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
        "writes_by_code": counter.codes(),
        "requests": keyed(api),
    }
    log(
        f"S9 {impl}: {len(done)}/{len(namespaces)} done in {out['seconds']:.2f} s "
        f"(ConfigMaps all matching at {out['configmaps_seconds']:.2f} s), "
        f"{out['cpu_seconds']:.1f} CPU s"
    )
    return out


def _template_change(
    bench: Bench, op: Operator, watcher: Watcher, namespaces: list[str], second: Expected
) -> dict[str, Any]:
    impl = op.impl
    wait_api_quiet(bench.kube)
    wait_writes_quiet(bench.kube)
    counter = Counter(bench.kube, codes=WRITTEN).mark()
    cpu0 = cpu_seconds(op.pid)
    watcher.expect(second)
    spy = bench.profile(op, f"{impl}-s9-template-{op.pid}")
    log(f"S9 {impl}: template change")
    share = bench.cpu_share()
    t0 = time.monotonic()
    spec = cluster_bundle_body(SECOND)["spec"]
    bench.kube.patch(CLUSTERCONFIGBUNDLES, None, NAME, {"spec": {"template": spec["template"]}})
    complete = watcher.wait_done(namespaces, timeout=600)
    shares = share.stop()
    done = [d for _, d in watcher.times(namespaces).values() if d is not None]
    spy.stop()
    settled = wait_writes_quiet(bench.kube)
    cpu1 = cpu_seconds(op.pid)
    api = counter.since()
    codes = counter.codes()
    status_times = sorted(t - t0 for t in watcher.cluster_modified)
    # The first MODIFIED event is the spec change itself; the rest are status writes.
    status_times = status_times[1:]
    gaps = [b - a for a, b in itertools.pairwise(status_times)]
    last = status_times[-1] if status_times else 0.0
    status_writes = writes(api, "clusterconfigbundles", "status")
    window = max(status_times[-1] - status_times[0], 1.0) if len(status_times) > 1 else 1.0
    per_window = max_in_window(status_times, report.STATUS_WINDOW)
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
        "requests": keyed(api),
    }
    log(
        f"S9 {impl} template change: done in {out['seconds']:.2f} s; ConfigMap writes "
        f"{out['configmap_writes']:.0f}, per namespace {out['modified_per_namespace']}; "
        f"status writes {status_writes:.0f} (at most {per_window} in any 1 s)"
    )
    return out


def max_in_window(times: list[float], width: float) -> int:
    """The most of ``times`` (sorted) within any half-open window of ``width`` seconds."""
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] >= width:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def _idle(bench: Bench, op: Operator, seconds: float) -> dict[str, Any]:
    wait_writes_quiet(bench.kube)
    load_at = load_average()
    counter = Counter(bench.kube).mark()
    cpu0 = cpu_seconds(op.pid)
    log(f"S9 idle {seconds:.0f} s")
    time.sleep(seconds)
    api = counter.since()
    idle_writes = {
        "|".join(k): v for k, v in api.items() if k[0] in WRITE_VERBS and k[1] in WRITTEN
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


def _new_namespaces(bench: Bench, watcher: Watcher, sizes: Options) -> dict[str, Any]:
    fresh = namespace_names(sizes.namespaces, sizes.new)
    load_at = load_average()
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


class ClusterBundles(Defaults):
    """S9, once for the run, when cbop is among the implementations; the Go peer too
    when it is."""

    names = ("s9",)
    defaults = Options()

    def accepts(self, impl: str) -> bool:
        return impl == "cbop"

    def run(self, run_: Run, options: Options, impl: str | None) -> None:
        log("=== S9: one ClusterConfigBundle over many namespaces, against raw (and the Go peer)")
        cluster.install_crd(run_.kubectl, run_.bench.s.kubeconfig, CRD)
        run_.results["s9"] = run(run_.bench, options, impls=frozenset(run_.impls))

    def markdown(self, results: Mapping[str, Any]) -> list[str]:
        return report.markdown(results)


CLUSTER_BUNDLES = ClusterBundles()
