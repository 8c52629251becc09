"""S2 drift heal, and S3 idle cost on the same converged bundles (with ``s3`` selected).

- **S2**: ``bundles`` bundles converged, then ``patches`` of their ConfigMaps (a seeded
  random choice) get a merge patch of one data value, ``rate`` per second; latency from
  sending the patch to the watch event that shows the content restored (after the
  drift event).
- **S3**: a fresh operator on the same namespace with its resync forced to ``resync``
  seconds (cbop ``--resync-period``, controller-runtime ``SyncPeriod``, kopf a timer per
  bundle); once the process is quiet, ``idle`` seconds: its writes on bundles,
  ConfigMaps and Events (``apiserver_request_total``) and its CPU seconds.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.operators import cluster, procs
from bench.operators.apiserver import (
    BUNDLE_RESOURCES,
    WRITE_VERBS,
    Counter,
    apiserver_requests,
    delta,
    keyed,
    wait_api_quiet,
)
from bench.operators.harness import Bench, log, percentile
from bench.operators.observer import Observer
from bench.operators.sampling import cpu_seconds, wait_cpu_quiet
from bench.operators.scenario import Needs, Run
from bench.operators.tables import by, num, ratio, ratio_goal, table, verdict
from cbop.kube import CONFIGMAPS

PEERS = ("raw", "controller-runtime", "kopf")
#: Resources whose requests S3's table lists (the rest is background).
MINE = frozenset({"configbundles", "configmaps", "events"})


@dataclass(frozen=True)
class Options:
    """S2's and S3's sizes.

    Attributes:
        bundles: converged bundles (S3 has the canary too).
        patches: ConfigMaps patched.
        rate: patches per second.
        idle: S3's idle seconds.
        resync: S3's resync period, seconds.
    """

    bundles: int = 1000
    patches: int = 200
    rate: float = 20.0
    idle: float = 300.0
    resync: float = 10.0


def heal(bench: Bench, impl: str, options: Options) -> tuple[dict[str, Any], str]:
    """S2 for ``impl``; return its record and the namespace (left converged)."""
    n, count = options.bundles, options.patches
    ns = bench.namespace(impl, "s2")
    expected = cluster.expectations(n)
    names = cluster.names_for(n)
    bench.start(impl, ns, namespace=ns)
    observer = Observer(bench.kube, ns, expected).start()
    try:
        bench.canary(ns, observer, None)
        log(f"S2 {impl}: converging {n} bundles ({ns})")
        bench.create_bundles(ns, [(name, i) for i, name in enumerate(names)], {})
        if not observer.wait_done(names, timeout=120 + 0.6 * n):
            raise TimeoutError(f"S2 {impl}: {n} bundles did not converge")
        victims = random.Random(bench.s.seed).sample(names, count)
        sent: dict[str, float] = {}
        t0 = time.monotonic()
        for i, name in enumerate(victims):
            pause = t0 + i / options.rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            observer.arm_drift(name)
            sent[name] = time.monotonic()
            bench.kube.patch(CONFIGMAPS, ns, name, {"data": {"index": "drifted"}})
        observer.wait_healed(victims, timeout=120)
        healed = observer.healed_times()
    finally:
        observer.stop()
        bench.stop()
    latencies = [t - sent[x] for x in victims if (t := healed.get(x)) is not None]
    record = {
        "impl": impl,
        "n": n,
        "patches": count,
        "rate": options.rate,
        "healed": len(latencies),
        "p50": percentile(latencies, 0.5),
        "p99": percentile(latencies, 0.99),
        "max": max(latencies, default=float("nan")),
        "events_seen": observer.events,
        "latencies": sorted(latencies),
    }
    log(
        f"S2 {impl}: {len(latencies)}/{count} healed, "
        f"p50 {record['p50']:.3f} s, p99 {record['p99']:.3f} s"
    )
    return record, ns


def idle(bench: Bench, impl: str, ns: str, options: Options) -> dict[str, Any]:
    """S3 for ``impl`` on the converged namespace ``ns``; return its record."""
    wait_api_quiet(bench.kube)
    at_start = apiserver_requests(bench.kube)
    op = bench.start(impl, f"{ns}-idle", namespace=ns, resync=options.resync)
    try:
        settle = wait_cpu_quiet(op.pid, timeout=120)
        counter = Counter(bench.kube).mark()
        startup = delta(counter.before, at_start)
        cpu0 = cpu_seconds(op.pid)
        spy = bench.profile(op, f"{impl}-s3-idle")
        log(f"S3 {impl}: idle {options.idle:.0f} s with resync {options.resync:g} s")
        time.sleep(options.idle)
        cpu1 = cpu_seconds(op.pid)
        spy.stop()
        api = counter.since()
    finally:
        bench.stop()
    writes = {k: v for k, v in api.items() if k[0] in WRITE_VERBS and k[1] in BUNDLE_RESOURCES}
    record = {
        "impl": impl,
        "n": options.bundles + 1,
        "seconds": options.idle,
        "resync": options.resync,
        "settle_seconds": settle,
        "cpu_seconds": cpu1 - cpu0,
        "writes": sum(writes.values()),
        "requests": keyed(api),
        "startup_writes": sum(
            v for k, v in startup.items() if k[0] in WRITE_VERBS and k[1] in BUNDLE_RESOURCES
        ),
    }
    log(f"S3 {impl}: {record['writes']:.0f} writes, {record['cpu_seconds']:.2f} CPU s")
    return record


class Heal:
    """S2, then S3 on its namespace when ``s3`` is selected."""

    names = ("s2", "s3")
    per_implementation = True
    defaults = Options()
    quick: Mapping[str, Any] = {"bundles": 300, "patches": 60, "idle": 30.0}
    needs = Needs()

    def accepts(self, impl: str) -> bool:
        return impl != "raw" and impl not in procs.VARIANTS

    def run(self, run: Run, options: Options, impl: str | None) -> None:
        assert impl is not None
        record, ns = heal(run.bench, impl, options)
        run.append("s2", record)
        if "s3" in run.selected:
            run.append("s3", idle(run.bench, impl, ns, options))
        cluster.delete_namespace(run.bench.kube, ns)

    def markdown(self, results: Mapping[str, Any]) -> list[str]:
        return [*s2_table(results), *s3_table(results)]

    def goals(self, results: Mapping[str, Any]) -> list[str]:
        out: list[str] = []
        peer = "controller-runtime"
        s2 = by(results.get("s2") or [], "impl")
        if "cbop" in s2 and peer in s2:
            a, b = s2["cbop"]["p50"], s2[peer]["p50"]
            out.append(
                f"- S2 p50 no worse than controller-runtime: {a:.3f} s vs {b:.3f} s "
                f"({a / b:.2f}x) — {verdict(a <= b)}"
            )
        s3 = by(results.get("s3") or [], "impl")
        if "cbop" in s3:
            w = s3["cbop"]["writes"]
            out.append(f"- S3 0 writes while idle: {w:.0f} — {verdict(w == 0)}")
        if "cbop" in s3 and peer in s3:
            out += ratio_goal(
                f"S3 idle CPU seconds, cbop / {peer}",
                s3["cbop"]["cpu_seconds"],
                s3[peer]["cpu_seconds"],
                1.0,
            )
        if "cbop" in s2 and peer in s2:
            out += ratio_goal(
                f"S2 heal p99 seconds, cbop / {peer}", s2["cbop"]["p99"], s2[peer]["p99"], 1.5
            )
        return out


HEAL = Heal()


def s2_table(results: Mapping[str, Any]) -> list[str]:
    recs = results.get("s2") or []
    if not recs:
        return []
    n, patches = recs[0]["n"], recs[0]["patches"]
    out = [
        f"### S2 drift heal: {patches} ConfigMaps patched at {recs[0]['rate']:g}/s, N = {n:,}",
        "",
    ]
    rows = [
        [
            r["impl"],
            f"{r['healed']}/{r['patches']}",
            num(r["p50"], 3),
            num(r["p99"], 3),
            num(r["max"], 3),
        ]
        for r in recs
    ]
    runs = by(recs, "impl")
    for peer in PEERS:
        if peer in runs and "cbop" in runs:
            rows.append(
                [
                    f"cbop / {peer}",
                    "",
                    ratio(runs["cbop"]["p50"], runs[peer]["p50"]),
                    ratio(runs["cbop"]["p99"], runs[peer]["p99"]),
                    "",
                ]
            )
    return [*out, *table(["implementation", "healed", "p50 s", "p99 s", "max s"], rows), ""]


def s3_table(results: Mapping[str, Any]) -> list[str]:
    recs = results.get("s3") or []
    if not recs:
        return []
    r0 = recs[0]
    out = [
        f"### S3 idle: {r0['seconds']:g} s with {r0['n']:,} converged bundles, "
        f"resync every {r0['resync']:g} s",
        "",
    ]
    rows = []
    for r in recs:
        reads = {
            k: v
            for k, v in r["requests"].items()
            if k.split("|")[1] in MINE and k.split("|")[0] not in WRITE_VERBS
        }
        rows.append(
            [
                r["impl"],
                num(r["writes"], 0),
                num(r.get("startup_writes"), 0),
                num(r["cpu_seconds"], 2),
                f"{100 * r['cpu_seconds'] / r['seconds']:.1f} %",
                ", ".join(f"{k.replace('|', ' ').strip()} {v:g}" for k, v in sorted(reads.items()))
                or "none",
            ]
        )
    header = [
        "implementation",
        "writes",
        "writes while starting",
        "CPU s",
        "CPU (of one core)",
        "other requests in the window",
    ]
    return [*out, *table(header, rows), ""]
