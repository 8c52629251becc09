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
- **merge** (``merge``: ``control,on``): after the first change, for each variant in
  order, every bundle's spec is patched (``control``: a setting of its own under a key
  of its own; ``on``: the same setting merged into ``common.yaml``, ``spec.merge``
  YAML), converged, and the source changed once more, measured as the first change.
  The merge's cost is ``on``'s cbop CPU over ``control``'s, the same process in the same
  run (the goal: at most 10 % more).
- Every change is also timed to the last status telling of it (``status.contentHash``
  new, ``Ready=True`` for the generation), with the operator's CPU seconds to the last
  ConfigMap and to the last status; the source's ``common.yaml`` changes with ``v``.
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

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bench.operators import cluster
from bench.operators.apiserver import WRITE_VERBS, Counter, keyed, wait_api_quiet, writes_on
from bench.operators.harness import Bench, log, run_parallel
from bench.operators.procs import Operator
from bench.operators.sampling import load_average
from bench.operators.scenario import Defaults, Run
from bench.operators.scenarios import sources_report as report
from bench.operators.scenarios.sources_watch import OUT_LABEL, Watcher
from cbop.api import ANNOTATION_SHARE_WITH, SOURCE_SELECTOR
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS

#: The Go peer measured against the same floor when it is among the impls.
PEER = "controller-runtime"
SOURCE_NS = "s10-src"
SOURCE = "s10-source"
#: Resources whose writes count as cbop's in the idle window.
WRITTEN = frozenset({"configbundles", "configmaps", "events"})
#: Resources whose writes the source change counts by answer code.
WRITTEN_CODES = WRITTEN | {"clusterconfigbundles"}
#: Settings in the source's ``common.yaml``.
SETTINGS = 40
#: The variants ``s10.merge`` may list (see :class:`Options`).
MERGE_VARIANTS = ("control", "on")


def common(value: str) -> str:
    """The source's ``common.yaml`` for ``value`` of ``v``: about 1 KiB of YAML, 40
    settings, the first of which changes with ``value`` (so a merged key changes too)."""
    first = f"setting-000: value-000-{value}\n"
    return first + "".join(f"setting-{i:03d}: value-{i:03d}\n" for i in range(1, SETTINGS))


@dataclass(frozen=True)
class Options:
    """The sizes of one S10 run.

    Attributes:
        bundles: bundles reading the source, half in its namespace, the rest spread
            over the other namespaces.
        namespaces: the other namespaces.
        unlabelled: ConfigMaps without the source label added for the second RSS figure.
        idle: seconds of the idle window.
        merge: cbop's further source changes, a comma list run in order after the
            first (``off`` or empty: none). Before each, every bundle's spec is patched
            to the variant: ``on``, the bundles merge the source's ``common.yaml`` as
            YAML with one setting of their own each (``spec.merge``); ``control``, they
            hold the same setting as a key of their own and merge nothing (what such a
            change costs without the merge, in the same process and run).
    """

    bundles: int = 1000
    namespaces: int = 50
    unlabelled: int = 10_000
    idle: float = 60.0
    merge: str = "control,on"

    def __post_init__(self) -> None:
        for variant in self.variants:
            if variant not in MERGE_VARIANTS:
                raise ValueError(
                    f"merge lists {', '.join(MERGE_VARIANTS)} (or is off): {variant!r}"
                )

    @property
    def variants(self) -> list[str]:
        """The variants of :attr:`merge`, in order (none for ``off``)."""
        if self.merge.strip() in ("", "off"):
            return []
        return [v.strip() for v in self.merge.split(",")]

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
        "data": {"v": value, "common.yaml": common(value)},
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


def own_setting(index: int, name: str) -> str:
    """The one setting of ``common.yaml`` that bundle number ``index`` overrides."""
    return f"setting-{1 + index % (SETTINGS - 1):03d}: {name}\n"


def variant_spec(variant: str, index: int, name: str) -> dict[str, Any]:
    """The spec merge patch of a variant of :attr:`Options.merge`: ``on`` merges
    ``common.yaml`` with the bundle's own setting; ``control`` keeps that setting under
    a key of its own (each removes what the other adds)."""
    setting = own_setting(index, name)
    if variant == "on":
        return {
            "data": {"bundle": name, "common.yaml": setting, "own.yaml": None},
            "merge": [{"key": "common.yaml", "format": "yaml"}],
        }
    return {"data": {"bundle": name, "own.yaml": setting, "common.yaml": None}, "merge": None}


def variant_done(variant: str, index: int, name: str) -> Callable[[Mapping[str, Any]], bool]:
    """Whether a ConfigMap's data shows the spec of :func:`variant_spec`."""
    setting = own_setting(index, name)
    if variant == "on":
        return lambda data: setting.strip() in str(data.get("common.yaml", ""))
    return lambda data: data.get("own.yaml") == setting


def raw_body(name: str, value: str) -> dict[str, Any]:
    """What the raw floor writes: the content a bundle's ConfigMap holds."""
    return {
        "metadata": {"name": name, "labels": {OUT_LABEL: "1"}},
        "data": {"v": value, "common.yaml": common(value), "bundle": name},
    }


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
    rec["converge"] = _reached(watcher, keys, t0)
    log(f"S10 {name}: {len(keys)} bundles converged in {rec['converge']['seconds']:.2f} s")
    wait_api_quiet(kube, quiet=3.0, timeout=180)
    return rec


def _change(
    bench: Bench,
    watcher: Watcher,
    keys: list[str],
    name: str,
    op: Operator,
    *,
    value: str = "2",
    done: Callable[[str, Mapping[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """Patch the source once (``v: value`` and its ``common.yaml``) and measure until
    every reader's ConfigMap has it (``done``: what else it must show), then until
    every reader's status tells of it.

    ``name`` names the operator ``op`` in the CPU figures. Returns the change's record
    (``load``: the load average at its start; ``cpu_seconds``: the operator's CPU
    seconds until the last ConfigMap changed, ``cpu_seconds_status`` until the last
    status told of it).
    """
    kube = bench.kube
    wait_api_quiet(kube)
    load_change = load_average()
    watcher.expect(value, done)
    counter = Counter(kube, codes=WRITTEN_CODES).mark()
    share = bench.cpu_share(**{name: op.pid}, bench=os.getpid())
    spy = bench.profile(op, f"cbop-s10-change-{op.pid}-{value}")
    if spy.active:
        time.sleep(1.0)  # py-spy attaches
    log(f"S10 {name}: the source changes; {len(keys)} readers")
    t0 = time.monotonic()
    kube.patch(CONFIGMAPS, SOURCE_NS, SOURCE, {"data": {"v": value, "common.yaml": common(value)}})
    complete = watcher.wait_all(keys, 600)
    shares = share.stop()
    reported = watcher.wait_reported(keys, 600)
    shares_status = share.stop()
    last = watcher.last_seen(keys)
    last_status = watcher.last_reported(keys)
    wait_api_quiet(kube)
    spy.stop(30)
    api = counter.since()
    codes = counter.codes()
    rec: dict[str, Any] = {
        "load": load_change,
        "complete": complete,
        "seconds": (last - t0) if last is not None else float("nan"),
        "cpu_share": shares,
        "cpu_seconds": shares.get(name, float("nan")),
        "reported": reported,
        "status_seconds": (last_status - t0) if last_status is not None else float("nan"),
        "cpu_share_status": shares_status,
        "cpu_seconds_status": shares_status.get(name, float("nan")),
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
        f"S10 {name}: all {len(keys)} ConfigMaps changed in {rec['seconds']:.2f} s "
        f"({rec['cpu_seconds']:.2f} CPU s), statuses in {rec['status_seconds']:.2f} s "
        f"({rec['cpu_seconds_status']:.2f} CPU s); ConfigMap GETs {rec['configmap_gets']:.0f}, "
        f"writes {rec['configmap_writes']:.0f}, status writes {rec['status_writes']:.0f}, "
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
        kube.patch(CONFIGMAPS, SOURCE_NS, SOURCE, {"data": {"v": "1", "common.yaml": common("1")}})
        watcher.wait_all(keys, 300)
        bench.delete_bundles(pairs)
    finally:
        bench.stop()
    bench.delete_targets(CONFIGMAPS, pairs)
    return rec


def _reached(watcher: Watcher, keys: list[str], t0: float) -> dict[str, Any]:
    """Wait (600 s at most) until every key of ``keys`` is seen; whether all were
    (``complete``) and the seconds from ``t0`` to the last one seen (NaN: none)."""
    complete = watcher.wait_all(keys, 600)
    last = watcher.last_seen(keys)
    return {"complete": complete, "seconds": (last - t0) if last is not None else float("nan")}


def _variant(
    bench: Bench,
    watcher: Watcher,
    pairs: list[tuple[str, str]],
    variant: str,
    op: Operator,
    *,
    current: str,
    value: str,
) -> dict[str, Any]:
    """One of cbop's further changes (:attr:`Options.merge`): every bundle's spec patched
    to the variant's (:func:`variant_spec`) and converged (the source at ``current``),
    then the source changed once more (to ``value``)."""
    kube = bench.kube
    keys = _keys(pairs)
    checks = {
        key: variant_done(variant, i, name)
        for i, (key, (_, name)) in enumerate(zip(keys, pairs, strict=True))
    }

    def done(key: str, data: Mapping[str, Any]) -> bool:
        return checks[key](data)

    watcher.expect(current, done)
    rec: dict[str, Any] = {"variant": variant, "load_update": load_average()}
    t0 = time.monotonic()
    run_parallel(
        lambda item: kube.patch(
            CONFIGBUNDLES,
            item[1][0],
            item[1][1],
            {"spec": variant_spec(variant, item[0], item[1][1])},
        ),
        list(enumerate(pairs)),
        bench.s.loader_threads,
    )
    rec["update"] = _reached(watcher, keys, t0)
    log(f"S10 cbop: {len(keys)} bundles now merge={variant}: {rec['update']['seconds']:.2f} s")
    wait_api_quiet(kube, quiet=3.0, timeout=180)
    rec["change"] = _change(bench, watcher, keys, "cbop", op, value=value, done=done)
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
    if sizes.variants:
        rec["merge"] = {}
    for n, variant in enumerate(sizes.variants):
        rec["merge"][variant] = _variant(
            bench, watcher, pairs, variant, op, current=str(n + 2), value=str(n + 3)
        )

    # Idle.
    wait_api_quiet(kube)
    counter = Counter(kube).mark()
    log(f"S10 idle {sizes.idle:.0f} s")
    time.sleep(sizes.idle)
    idle = writes_on(counter.since(), WRITTEN)
    rec["idle"] = {"seconds": sizes.idle, "writes": sum(idle.values()), "by_kind": idle}
    log(f"S10 idle: {rec['idle']['writes']:.0f} writes")

    # RSS with 10,000 ConfigMaps that are no sources, against the RSS just before them
    # (the changes since the converged figure, merges among them, allocate too).
    rec["rss_before_unlabelled_mib"] = (
        bench.steady(op)["steady_mib"] if sizes.variants else rec["rss_mib"]
    )
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
        f"S10 RSS: {rec['rss_mib']:.1f} MiB converged, "
        f"{rec['rss_before_unlabelled_mib']:.1f} MiB after the changes, "
        f"{rec['rss_unlabelled_mib']:.1f} MiB with {sizes.unlabelled} unlabelled ConfigMaps"
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
