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
from bench.operators.apiserver import (
    WRITE_VERBS,
    Counter,
    keyed,
    subtract,
)
from bench.operators.harness import Bench, log, percentile, run_parallel
from bench.operators.observer import Observer
from bench.operators.sampling import Sampler, cpu_seconds
from bench.operators.scenario import Needs, Run
from bench.operators.tables import by, num, ratio, ratio_goal, table, verdict
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS

#: The implementations S1 compares cbop with, in its ratio rows.
PEERS = ("raw", "controller-runtime", "kopf")
#: Resources an operator of bundles touches; the rest of S5's window is background.
MINE = frozenset({"configbundles", "configmaps", "events"})


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
        return [*s1_tables(results), *s4_table(results), *s5_table(results)]

    def goals(self, results: Mapping[str, Any]) -> list[str]:
        return goals(results)


BURST = Burst()


# ------------------------------------------------------------------------------ report


def s1_tables(results: Mapping[str, Any]) -> list[str]:
    recs = results.get("s1") or []
    if not recs:
        return []
    sizes = sorted({r["n"] for r in recs})
    impls = [i for i in results["impls"] if any(r["impl"] == i for r in recs)]
    runs = by(recs, "impl", "n")
    out = ["### S1 burst: seconds until every ConfigMap matches and every bundle is Ready", ""]
    header = [
        "implementation",
        *[f"N = {n:,}" for n in sizes],
        *[f"p50 / p99 at {n:,}" for n in sizes],
    ]
    rows = []
    for impl in impls:
        row = [impl]
        for n in sizes:
            r = runs.get((impl, n))
            row.append(
                num(r["seconds"]) + ("" if r and r["complete"] else " (incomplete)") if r else "-"
            )
        for n in sizes:
            r = runs.get((impl, n))
            row.append(f"{num(r['p50'])} / {num(r['p99'])}" if r else "-")
        rows.append(row)
    for peer in PEERS:
        if peer in impls and "cbop" in impls:
            row = [f"cbop / {peer}"]
            for n in sizes:
                a, b = runs.get(("cbop", n)), runs.get((peer, n))
                row.append(ratio(a["seconds"] if a else None, b["seconds"] if b else None))
            row += [""] * len(sizes)
            rows.append(row)
    out += table(header, rows)
    out += ["", "Throughput (bundles/s) and operator CPU seconds during the burst:", ""]
    rows = []
    for impl in impls:
        row = [impl]
        for n in sizes:
            r = runs.get((impl, n))
            row.append(
                f"{num(n / r['seconds'], 0)} /s, {num(r['cpu_seconds'], 1)} CPU s"
                if r and r["seconds"]
                else "-"
            )
        rows.append(row)
    out += table(["implementation", *[f"N = {n:,}" for n in sizes]], rows)
    return [*out, ""]


def s4_table(results: Mapping[str, Any]) -> list[str]:
    recs = results.get("s4") or []
    if not recs:
        return []
    runs = by(recs, "impl", "label")
    burst_of = by([r for r in results.get("s1") or [] if r["n"] == results.get("s4_n")], "impl")
    impls = [i for i in results["impls"] if (i, "plain") in runs]
    count = results.get("s4_unrelated", 0)
    out = [
        f"### S4 memory (MiB): N = {results.get('s4_n', 0):,} converged bundles, "
        f"a fresh operator started on them; then again with {count:,} "
        "unrelated ConfigMaps in another namespace",
        "",
    ]
    rows = []
    for impl in impls:
        plain, extra = runs.get((impl, "plain")), runs.get((impl, "unrelated"))
        b = burst_of.get(impl)
        rows.append(
            [
                impl,
                num(b.get("peak_rss_mib") if b else None, 1),
                num(plain["peak_mib"] if plain else None, 1),
                num(plain["steady_mib"] if plain else None, 1),
                num(extra["peak_mib"] if extra else None, 1),
                num(extra["steady_mib"] if extra else None, 1),
                num(extra["steady_mib"] - plain["steady_mib"] if extra and plain else None, 1),
            ]
        )
    if "cbop" in impls and "controller-runtime" in impls:
        c, g = runs[("cbop", "plain")], runs[("controller-runtime", "plain")]
        cb, gb = burst_of.get("cbop"), burst_of.get("controller-runtime")
        rows.append(
            [
                "cbop / controller-runtime",
                ratio(
                    cb.get("peak_rss_mib") if cb else None, gb.get("peak_rss_mib") if gb else None
                ),
                ratio(c["peak_mib"], g["peak_mib"]),
                ratio(c["steady_mib"], g["steady_mib"]),
                "",
                "",
                "",
            ]
        )
    header = [
        "implementation",
        "peak during S1 burst",
        "peak (restart)",
        "steady",
        "peak, +unrelated",
        "steady, +unrelated",
        "unrelated adds",
    ]
    return [*out, *table(header, rows), ""]


def _mine(key: str) -> bool:
    """Requests on the resources an operator of bundles touches (the rest is background)."""
    return key.split("|")[1] in MINE


def s5_table(results: Mapping[str, Any]) -> list[str]:
    n = max((r["n"] for r in results.get("s1") or []), default=0)
    recs = [r for r in results.get("s1") or [] if r["n"] == n]
    if not recs:
        return []
    keys = sorted({k for r in recs for k in r["requests"] if _mine(k)})
    out = [
        f"### S5 API cost: requests per new bundle during S1 at N = {n:,}",
        "",
        "From kube-apiserver's `apiserver_request_total` (deltas over the burst, the "
        "loader's and watcher's own requests removed). Only ConfigBundles, ConfigMaps and "
        "Events are attributed. Single-object GETs are also taken from the API server's "
        "audit log by client; those of kube-controller-manager (its garbage collector "
        "checking owners it has not seen yet) are removed from the operator's column. The "
        "last row is everything else in the window (the API server's own lease and "
        "endpoint upkeep, discovery), in total, not per bundle.",
        "",
    ]
    rows = []
    for key in keys:
        verb, res, sub = key.split("|")
        label = f"{verb} {res}{'/' + sub if sub else ''}"
        rows.append([label, *[num(r["requests"].get(key, 0.0) / n, 3) for r in recs]])
    picks: tuple[tuple[str, Any], ...] = (
        ("writes", lambda k: _mine(k) and k.split("|")[0] in WRITE_VERBS),
        ("reads other than LIST/WATCH", lambda k: _mine(k) and k.split("|")[0] == "GET"),
    )
    for label, pick in picks:
        rows.append(
            [
                f"**{label}**",
                *[num(sum(v for k, v in r["requests"].items() if pick(k)) / n, 3) for r in recs],
            ]
        )
    rows.append(
        [
            "single GETs by client (audit log, total)",
            *[
                ", ".join(f"{k} {v}" for k, v in sorted(r.get("gets_by_client", {}).items()))
                or "none"
                for r in recs
            ],
        ]
    )
    rows.append(
        [
            "other requests in the window (total)",
            *[num(sum(v for k, v in r["requests"].items() if not _mine(k)), 0) for r in recs],
        ]
    )
    return [*out, *table(["verb resource", *[r["impl"] for r in recs]], rows), ""]


def per_bundle(rec: Mapping[str, Any], verbs: frozenset[str]) -> float:
    picked = [v for k, v in rec["requests"].items() if _mine(k) and k.split("|")[0] in verbs]
    return float(sum(picked)) / float(rec["n"])


def goals(results: Mapping[str, Any]) -> list[str]:
    """S1's, S4's and S5's goals, each with its verdict and margin."""
    out: list[str] = []
    s1 = results.get("s1") or []
    n = max((r["n"] for r in s1), default=0)
    largest = by([r for r in s1 if r["n"] == n], "impl")
    if "cbop" in largest:
        c = largest["cbop"]["seconds"]
        for peer, limit, text in (
            ("raw", 1.25, "within 1.25x of raw"),
            ("controller-runtime", 1.0, "no slower than controller-runtime"),
            ("kopf", 0.2, "at most 0.2x kopf's time"),
        ):
            if peer in largest:
                r = c / largest[peer]["seconds"]
                out.append(f"- S1 at N = {n:,}, cbop {text}: {r:.2f}x — {verdict(r <= limit)}")
    s4 = by(results.get("s4") or [], "impl", "label")
    if ("cbop", "plain") in s4 and ("controller-runtime", "plain") in s4:
        for field, label in (("steady_mib", "steady"), ("peak_mib", "peak")):
            r = s4[("cbop", "plain")][field] / s4[("controller-runtime", "plain")][field]
            out.append(
                f"- S4 {label} RSS at most 1.5x controller-runtime's: {r:.2f}x — "
                f"{verdict(r <= 1.5)}"
            )
    if ("cbop", "plain") in s4 and ("cbop", "unrelated") in s4:
        d = (
            s4[("cbop", "unrelated")]["steady_mib"] - s4[("cbop", "plain")]["steady_mib"]
        ) * 1.048576
        out.append(f"- S4 unrelated ConfigMaps add under 5 MB: {d:+.1f} MB — {verdict(d < 5)}")
    if "cbop" in largest:
        w = per_bundle(largest["cbop"], WRITE_VERBS)
        g = per_bundle(largest["cbop"], frozenset({"GET"}))
        out.append(f"- S5 at most 2 writes per new bundle: {w:.2f} — {verdict(w <= 2)}")
        out.append(f"- S5 no reads outside list/watch: {g:.3f} GETs per bundle — {verdict(g == 0)}")
    peer = "controller-runtime"
    if "cbop" in largest and peer in largest:
        out += ratio_goal(
            f"S1 operator CPU seconds at N = {n:,}, cbop / {peer}",
            largest["cbop"]["cpu_seconds"],
            largest[peer]["cpu_seconds"],
            1.25,
        )
    # What users get: each operator as it comes (cbop: 4 workers, no client-side limit;
    # controller-runtime: one concurrent reconcile, no client-side limit).
    defaults = "controller-runtime-defaults"
    if "cbop" in largest and defaults in largest:
        out += ratio_goal(
            f"S1 with each operator's default settings at N = {n:,}, seconds, "
            f"cbop / {defaults} (MaxConcurrentReconciles 1)",
            largest["cbop"]["seconds"],
            largest[defaults]["seconds"],
            1.0,
        )
    return out
