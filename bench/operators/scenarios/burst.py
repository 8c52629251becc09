"""S1 burst, S5 API cost (from S1's requests) and S4 memory (on S1's largest N).

- **S1**: N bundles created by the loader threads into a fresh namespace; seconds from
  the first create to the last bundle done, per-bundle latency from its create request
  to done, the operator's CPU seconds and peak RSS, the control plane's CPU seconds.
- **S5**: kube-apiserver's requests over the burst, by verb and resource, minus the
  bench's own; single GETs by client from the audit log (the garbage collector's
  removed).
- **S4** (with ``s4`` selected): a fresh operator on S1's largest N converged bundles,
  peak and steady RSS; again after ``unrelated`` ConfigMaps in another namespace.

The raw floor is ``workers`` threads of the bench doing exactly the writes an operator
must: one ConfigMap POST and one status PATCH per bundle, fed each bundle as its create
returns.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bench.operators import cluster, procs
from bench.operators.apiserver import Counter, keyed, subtract
from bench.operators.harness import Bench, log, percentile, run_parallel
from bench.operators.observer import Observer
from bench.operators.sampling import Sampler, cpu_seconds
from bench.operators.scenario import Needs, Run
from bench.operators.scenarios import burst_report as report
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS


@dataclass(frozen=True)
class Options:
    """S1's sizes, and S4's unrelated ConfigMaps.

    Attributes:
        sizes: N of each burst, in order (S4 runs on the last).
        unrelated: ConfigMaps created in another namespace for S4's second figure.
    """

    sizes: tuple[int, ...] = (100, 1000, 3000)
    unrelated: int = 10_000


def _nothing() -> None:
    pass


def raw_workers(
    bench: Bench, ns: str, expected: Mapping[str, cluster.Expected]
) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
    """The floor: ``workers`` threads doing only the writes an operator must do.

    Returns ``(feed, close)``: ``feed(bundle)`` hands a created bundle to the threads,
    ``close()`` lets them finish and joins them.
    """
    raw = cluster.client(bench.s.kubeconfig)
    work: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def worker() -> None:
        while (bundle := work.get()) is not None:
            name = bundle["metadata"]["name"]
            want = expected[name]
            raw.create(CONFIGMAPS, ns, cluster.configmap_body(bundle, name, want))
            raw.patch(
                CONFIGBUNDLES,
                ns,
                name,
                {"status": cluster.ready_status(bundle, name, want)},
                subresource="status",
            )

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(bench.s.workers)]
    for t in threads:
        t.start()

    def close() -> None:
        for _ in threads:
            work.put(None)
        for t in threads:
            t.join(30)
        raw.close()

    return work.put, close


def burst(bench: Bench, impl: str, n: int, *, keep: bool = False) -> dict[str, Any]:
    """S1 (and S5): create ``n`` bundles, time until all are done; return the record.

    ``keep``: leave the operator running and the namespace in place (S4, S7 follow).
    """
    ns = bench.namespace(impl, f"s1-{n}")
    expected = cluster.expectations(n)
    names = cluster.names_for(n)
    feed: Callable[[dict[str, Any]], None] | None = None
    close_raw: Callable[[], None] = _nothing
    op = None
    ready_s = 0.0
    if impl == "raw":
        feed, close_raw = raw_workers(bench, ns, expected)
    else:
        op = bench.start(impl, ns, namespace=ns)
        ready_s = time.monotonic() - op.started
    observer = Observer(bench.kube, ns, expected).start()
    sampler = Sampler(op.pid).start() if op is not None else None
    try:
        bench.canary(ns, observer, feed)
        counter = Counter(bench.kube).mark()
        if bench.audit is not None:
            bench.audit.mark()
        cpu0 = cpu_seconds(op.pid) if op else 0.0
        share = bench.cpu_share()
        sent: dict[str, float] = {}
        spy = bench.profile(op, f"{impl}-s1-{n}")
        t0 = time.monotonic()
        log(f"S1 {impl} N={n}: loading ({ns})")
        bench.create_bundles(ns, [(name, i) for i, name in enumerate(names)], sent, feed)
        loaded = time.monotonic() - t0
        complete = observer.wait_done(names, timeout=120 + 0.6 * n)
        done = observer.done_times()
        spy.stop()
        time.sleep(1.0)  # let trailing requests be counted
        cpu1 = cpu_seconds(op.pid) if op else 0.0
        shares = share.stop()
        api = counter.since()
        gets = bench.audit.gets() if bench.audit is not None else {}
        # The garbage collector GETs owners it has not seen yet; not the operator's.
        for who, count in gets.items():
            agent, _, resource = who.partition(" ")
            if agent == "kube-controller-manager":
                api = subtract(api, {("GET", resource, ""): float(count)})
    finally:
        observer.stop()
        if sampler is not None:
            sampler.stop()
        close_raw()
    finished: list[float] = []
    latencies: list[float] = []
    for x in names:
        t = done[x]
        if t is not None:
            finished.append(t)
            latencies.append(t - sent[x])
    total = (max(finished) - t0) if finished else float("nan")
    record: dict[str, Any] = {
        "impl": impl,
        "n": n,
        "namespace": ns,
        "complete": complete,
        "converged": len(finished),
        "seconds": total,
        "load_seconds": loaded,
        "p50": percentile(latencies, 0.5),
        "p99": percentile(latencies, 0.99),
        "ready_seconds": ready_s,
        "cpu_seconds": cpu1 - cpu0,
        "cpu_share": shares,
        "requests": keyed(api),
        "gets_by_client": gets,
        "events_seen": observer.events,
        "latencies": sorted(latencies),
    }
    if sampler is not None:
        record["peak_rss_mib"] = sampler.peak_mib()
    log(
        f"S1 {impl} N={n}: {len(finished)}/{n} in {total:.2f} s "
        f"(p50 {record['p50']:.3f} s, p99 {record['p99']:.3f} s)"
    )
    if not keep:
        bench.stop()
        cluster.delete_namespace(bench.kube, ns, timeout=cluster.deletion_timeout(n))
    return record


def memory(bench: Bench, impl: str, ns: str, label: str) -> dict[str, Any]:
    """S4: a fresh operator on a converged namespace; its peak and steady RSS."""
    op = bench.start(impl, f"{ns}-{label}", namespace=ns)
    try:
        steady = bench.steady(op)
    finally:
        bench.stop()
    log(
        f"S4 {impl} {label}: peak {steady['peak_mib']:.1f} MiB, steady "
        f"{steady['steady_mib']:.1f} MiB (quiet after {steady['settle_seconds']:.0f} s)"
    )
    return {"impl": impl, "label": label, **steady}


def unrelated(bench: Bench, count: int) -> str:
    """``count`` ConfigMaps (about 1 KiB) no bundle owns, in a namespace of their own."""
    ns = bench.namespace("unrelated", "cms")
    kube = bench.kube

    def one(i: int) -> None:
        body = {
            "metadata": {"name": f"other-{i:05d}", "labels": {"app": "unrelated"}},
            "data": {"config.yaml": f"id: {i}\n" + "x: y\n" * 100},
        }
        kube.create(CONFIGMAPS, ns, body)

    start = time.monotonic()
    run_parallel(one, range(count), bench.s.loader_threads)
    log(f"created {count} unrelated ConfigMaps in {ns} in {time.monotonic() - start:.1f} s")
    return ns


class Burst:
    """S1 with S5, and S4 on the largest N when ``s4`` is selected."""

    names = ("s1", "s4", "s5")
    per_implementation = True
    defaults = Options()
    quick: Mapping[str, Any] = {"sizes": (100, 300), "unrelated": 2000}
    needs = Needs()

    def accepts(self, impl: str) -> bool:
        return True

    def run(self, run: Run, options: Options, impl: str | None) -> None:
        assert impl is not None
        bench, sizes = run.bench, list(options.sizes)
        if impl in procs.VARIANTS:  # S1 only, at the sizes up to the variant's own
            upto = procs.VARIANTS[impl]
            for n in [m for m in sizes if m <= upto] or sizes[:1]:
                run.append("s1", burst(bench, impl, n))
            return
        with_s4 = "s4" in run.selected and impl != "raw"
        for n in sizes:
            keep = n == sizes[-1] and with_s4
            rec = burst(bench, impl, n, keep=keep)
            run.append("s1", rec)
            if not keep:
                continue
            run.results["s4_n"] = n
            run.results["s4_unrelated"] = options.unrelated
            bench.stop()
            ns = rec["namespace"]
            run.append("s4", memory(bench, impl, ns, "plain"))
            other = unrelated(bench, options.unrelated)
            run.append("s4", memory(bench, impl, ns, "unrelated"))
            cluster.delete_namespace(bench.kube, other)
            cluster.delete_namespace(bench.kube, ns)

    def markdown(self, results: Mapping[str, Any]) -> list[str]:
        return [*report.s1_tables(results), *report.s4_table(results), *report.s5_table(results)]

    def goals(self, results: Mapping[str, Any]) -> list[str]:
        return report.goals(results)


BURST = Burst()
