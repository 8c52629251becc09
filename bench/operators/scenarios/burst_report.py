"""S1's, S4's and S5's sections of the results file, from their records (see ``burst``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.operators.apiserver import WRITE_VERBS
from bench.operators.tables import by, num, ratio, ratio_goal, table, verdict

#: The implementations S1 compares cbop with, in its ratio rows.
PEERS = ("raw", "controller-runtime", "kopf")
#: Resources an operator of bundles touches; the rest of S5's window is background.
MINE = frozenset({"configbundles", "configmaps", "events"})


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
