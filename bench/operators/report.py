"""Markdown for one run: tables per scenario, ratios, and the goals' verdicts."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from bench.operators import apf

PEERS = ("raw", "controller-runtime", "kopf")


def _f(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    if not a or not b or math.isnan(a) or math.isnan(b):
        return "-"
    return f"{a / b:.2f}x"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> list[str]:
    align = align or "l" + "r" * (len(header) - 1)
    marks = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _by(records: Sequence[Mapping[str, Any]], *keys: str) -> dict[Any, Mapping[str, Any]]:
    out: dict[Any, Mapping[str, Any]] = {}
    for r in records:
        out[tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]] = r
    return out


def s1_tables(results: Mapping[str, Any]) -> list[str]:
    recs = results.get("s1") or []
    if not recs:
        return []
    sizes = sorted({r["n"] for r in recs})
    impls = [i for i in results["impls"] if any(r["impl"] == i for r in recs)]
    by = _by(recs, "impl", "n")
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
            r = by.get((impl, n))
            row.append(
                _f(r["seconds"]) + ("" if r and r["complete"] else " (incomplete)") if r else "-"
            )
        for n in sizes:
            r = by.get((impl, n))
            row.append(f"{_f(r['p50'])} / {_f(r['p99'])}" if r else "-")
        rows.append(row)
    for peer in PEERS:
        if peer in impls and "cbop" in impls:
            row = [f"cbop / {peer}"]
            for n in sizes:
                a, b = by.get(("cbop", n)), by.get((peer, n))
                row.append(_ratio(a["seconds"] if a else None, b["seconds"] if b else None))
            row += [""] * len(sizes)
            rows.append(row)
    out += _table(header, rows)
    out += ["", "Throughput (bundles/s) and operator CPU seconds during the burst:", ""]
    rows = []
    for impl in impls:
        row = [impl]
        for n in sizes:
            r = by.get((impl, n))
            row.append(
                f"{_f(n / r['seconds'], 0)} /s, {_f(r['cpu_seconds'], 1)} CPU s"
                if r and r["seconds"]
                else "-"
            )
        rows.append(row)
    out += _table(["implementation", *[f"N = {n:,}" for n in sizes]], rows)
    return [*out, ""]


def s2_table(results: Mapping[str, Any]) -> list[str]:
    recs = results.get("s2") or []
    if not recs:
        return []
    n, patches = recs[0]["n"], recs[0]["patches"]
    out = [
        f"### S2 drift heal: {patches} ConfigMaps patched at "
        f"{results['settings']['heal_rate']:g}/s, N = {n:,}",
        "",
    ]
    rows = [
        [
            r["impl"],
            f"{r['healed']}/{r['patches']}",
            _f(r["p50"], 3),
            _f(r["p99"], 3),
            _f(r["max"], 3),
        ]
        for r in recs
    ]
    by = _by(recs, "impl")
    for peer in PEERS:
        if peer in by and "cbop" in by:
            rows.append(
                [
                    f"cbop / {peer}",
                    "",
                    _ratio(by["cbop"]["p50"], by[peer]["p50"]),
                    _ratio(by["cbop"]["p99"], by[peer]["p99"]),
                    "",
                ]
            )
    return [*out, *_table(["implementation", "healed", "p50 s", "p99 s", "max s"], rows), ""]


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
            k: v for k, v in r["requests"].items() if _mine(k) and k.split("|")[0] not in _WRITES
        }
        rows.append(
            [
                r["impl"],
                _f(r["writes"], 0),
                _f(r.get("startup_writes"), 0),
                _f(r["cpu_seconds"], 2),
                f"{100 * r['cpu_seconds'] / r['seconds']:.1f} %",
                ", ".join(f"{k.replace('|', ' ').strip()} {v:g}" for k, v in sorted(reads.items()))
                or "none",
            ]
        )
    return [
        *out,
        *_table(
            [
                "implementation",
                "writes",
                "writes while starting",
                "CPU s",
                "CPU (of one core)",
                "other requests in the window",
            ],
            rows,
        ),
        "",
    ]


_WRITES = {"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"}


def s4_table(results: Mapping[str, Any]) -> list[str]:
    recs = results.get("s4") or []
    if not recs:
        return []
    by = _by(recs, "impl", "label")
    burst = _by([r for r in results.get("s1") or [] if r["n"] == results.get("s4_n")], "impl")
    impls = [i for i in results["impls"] if (i, "plain") in by]
    out = [
        f"### S4 memory (MiB): N = {results.get('s4_n', 0):,} converged bundles, "
        f"a fresh operator started on them; then again with {results['settings']['unrelated']:,} "
        "unrelated ConfigMaps in another namespace",
        "",
    ]
    rows = []
    for impl in impls:
        plain, extra = by.get((impl, "plain")), by.get((impl, "unrelated"))
        b = burst.get(impl)
        rows.append(
            [
                impl,
                _f(b.get("peak_rss_mib") if b else None, 1),
                _f(plain["peak_mib"] if plain else None, 1),
                _f(plain["steady_mib"] if plain else None, 1),
                _f(extra["peak_mib"] if extra else None, 1),
                _f(extra["steady_mib"] if extra else None, 1),
                _f(extra["steady_mib"] - plain["steady_mib"] if extra and plain else None, 1),
            ]
        )
    if "cbop" in impls and "controller-runtime" in impls:
        c, g = by[("cbop", "plain")], by[("controller-runtime", "plain")]
        cb, gb = burst.get("cbop"), burst.get("controller-runtime")
        rows.append(
            [
                "cbop / controller-runtime",
                _ratio(
                    cb.get("peak_rss_mib") if cb else None, gb.get("peak_rss_mib") if gb else None
                ),
                _ratio(c["peak_mib"], g["peak_mib"]),
                _ratio(c["steady_mib"], g["steady_mib"]),
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
    return [*out, *_table(header, rows), ""]


def _mine(key: str) -> bool:
    """Requests on the resources an operator of bundles touches (the rest is background)."""
    return key.split("|")[1] in _RESOURCES


_RESOURCES = {"configbundles", "configmaps", "events"}


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
        rows.append([label, *[_f(r["requests"].get(key, 0.0) / n, 3) for r in recs]])
    picks: tuple[tuple[str, Any], ...] = (
        ("writes", lambda k: _mine(k) and k.split("|")[0] in _WRITES),
        ("reads other than LIST/WATCH", lambda k: _mine(k) and k.split("|")[0] == "GET"),
    )
    for label, pick in picks:
        rows.append(
            [
                f"**{label}**",
                *[_f(sum(v for k, v in r["requests"].items() if pick(k)) / n, 3) for r in recs],
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
            *[_f(sum(v for k, v in r["requests"].items() if not _mine(k)), 0) for r in recs],
        ]
    )
    return [*out, *_table(["verb resource", *[r["impl"] for r in recs]], rows), ""]


def per_bundle(rec: Mapping[str, Any], verbs: set[str]) -> float:
    picked = [v for k, v in rec["requests"].items() if _mine(k) and k.split("|")[0] in verbs]
    return float(sum(picked)) / float(rec["n"])


def goals(results: Mapping[str, Any]) -> list[str]:
    """The issue's goals, each with its verdict and margin."""
    out = ["### Goals", ""]
    s1 = results.get("s1") or []
    n = max((r["n"] for r in s1), default=0)
    by = _by([r for r in s1 if r["n"] == n], "impl")

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    if "cbop" in by:
        c = by["cbop"]["seconds"]
        for peer, limit, text in (
            ("raw", 1.25, "within 1.25x of raw"),
            ("controller-runtime", 1.0, "no slower than controller-runtime"),
            ("kopf", 0.2, "at most 0.2x kopf's time"),
        ):
            if peer in by:
                ratio = c / by[peer]["seconds"]
                out.append(
                    f"- S1 at N = {n:,}, cbop {text}: {ratio:.2f}x — {verdict(ratio <= limit)}"
                )
    s2 = _by(results.get("s2") or [], "impl")
    if "cbop" in s2 and "controller-runtime" in s2:
        a, b = s2["cbop"]["p50"], s2["controller-runtime"]["p50"]
        out.append(
            f"- S2 p50 no worse than controller-runtime: {a:.3f} s vs {b:.3f} s "
            f"({a / b:.2f}x) — {verdict(a <= b)}"
        )
    s3 = _by(results.get("s3") or [], "impl")
    if "cbop" in s3:
        w = s3["cbop"]["writes"]
        out.append(f"- S3 0 writes while idle: {w:.0f} — {verdict(w == 0)}")
    s4 = _by(results.get("s4") or [], "impl", "label")
    if ("cbop", "plain") in s4 and ("controller-runtime", "plain") in s4:
        for field, name in (("steady_mib", "steady"), ("peak_mib", "peak")):
            r = s4[("cbop", "plain")][field] / s4[("controller-runtime", "plain")][field]
            out.append(
                f"- S4 {name} RSS at most 1.5x controller-runtime's: {r:.2f}x — {verdict(r <= 1.5)}"
            )
    if ("cbop", "plain") in s4 and ("cbop", "unrelated") in s4:
        d = (
            s4[("cbop", "unrelated")]["steady_mib"] - s4[("cbop", "plain")]["steady_mib"]
        ) * 1.048576
        out.append(f"- S4 unrelated ConfigMaps add under 5 MB: {d:+.1f} MB — {verdict(d < 5)}")
    if "cbop" in by:
        w = per_bundle(by["cbop"], _WRITES)
        g = per_bundle(by["cbop"], {"GET"})
        out.append(f"- S5 at most 2 writes per new bundle: {w:.2f} — {verdict(w <= 2)}")
        out.append(f"- S5 no reads outside list/watch: {g:.3f} GETs per bundle — {verdict(g == 0)}")
    out += _cpu_and_scale_goals(results, by, n, verdict)
    return [*out, ""] if len(out) > 2 else []


def _cpu_and_scale_goals(
    results: Mapping[str, Any],
    s1: Mapping[Any, Mapping[str, Any]],
    n: int,
    verdict: Any,
) -> list[str]:
    """The CPU, latency and scale goals, each a ratio to controller-runtime (or raw) in this run."""
    out: list[str] = []
    peer = "controller-runtime"

    def ratio_goal(text: str, a: float | None, b: float | None, limit: float) -> None:
        if a is None or b is None or not b:
            return
        r = a / b
        out.append(
            f"- {text}: {a:.3f} vs {b:.3f} ({r:.2f}x, goal <= {limit:g}x) — {verdict(r <= limit)}"
        )

    by_scenario = {
        "s1": s1,
        "s2": _by(results.get("s2") or [], "impl"),
        "s3": _by(results.get("s3") or [], "impl"),
    }
    for scenario, field, text, limit in (
        ("s1", "cpu_seconds", f"S1 operator CPU seconds at N = {n:,}", 1.25),
        ("s3", "cpu_seconds", "S3 idle CPU seconds", 1.0),
        ("s2", "p99", "S2 heal p99 seconds", 1.5),
    ):
        recs = by_scenario[scenario]
        if "cbop" in recs and peer in recs:
            ratio_goal(f"{text}, cbop / {peer}", recs["cbop"][field], recs[peer][field], limit)
    # What users get: each operator as it comes (cbop: 4 workers, no client-side limit;
    # controller-runtime: one concurrent reconcile, no client-side limit).
    defaults = "controller-runtime-defaults"
    if "cbop" in s1 and defaults in s1:
        ratio_goal(
            f"S1 with each operator's default settings at N = {n:,}, seconds, "
            f"cbop / {defaults} (MaxConcurrentReconciles 1)",
            s1["cbop"]["seconds"],
            s1[defaults]["seconds"],
            1.0,
        )
    scale = _by(results.get("scale") or [], "impl", "n")
    for (impl, size), rec in sorted(scale.items()):
        if impl != "cbop":
            continue
        raw, other = scale.get(("raw", size)), scale.get((peer, size))
        if raw:
            ratio_goal(
                f"S7 converge seconds at N = {size:,}, cbop / raw",
                rec["converge_seconds"],
                raw["converge_seconds"],
                1.15,
            )
        if other:
            for field, text in (
                ("steady_mib", "S7 steady RSS MiB"),
                ("restart_to_quiet_seconds", "S7 restart-to-quiet seconds"),
                ("new_bundle_ready_seconds", "S6 new bundle Ready seconds"),
            ):
                ratio_goal(
                    f"{text} at N = {size:,}, cbop / {peer}", rec.get(field), other.get(field), 1.0
                )
        ready = rec.get("new_bundle_ready_seconds")
        if ready is not None:
            out.append(
                f"- S6 new bundle Ready within 2 s at N = {size:,}: {ready:.2f} s — "
                f"{verdict(ready <= 2.0)}"
            )
    return out


def markdown(results: Mapping[str, Any], plots: Sequence[str]) -> str:
    m = results["machine"]
    s = results["settings"]
    lines = [
        f"# Operator benchmark {results['started']} on {m['host']}",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory']} RAM, kernel {m['kernel']}, "
        f"load average at start {m['load']}; Python {m['python']}, {m['go']}; "
        f"Kubernetes control plane {results.get('kubernetes', '?')}; cbop at "
        f"{', '.join(results.get('cbop_revisions') or ['?'])} (the commit each cbop process "
        "started from).",
        "",
        f"Settings: {s['workers']} workers for every operator in S1-S5 (and the raw floor; "
        "apf sets its own), loader with "
        f"{s['loader_threads']} threads, no client-side rate limit anywhere "
        f"({results.get('limits', '')}). "
        f"Wall clock of the run: {results.get('wall_seconds', 0) / 60:.1f} min.",
        "",
        *s1_tables(results),
        *s2_table(results),
        *s3_table(results),
        *s4_table(results),
        *s5_table(results),
        *apf.tables(results),
        *goals(results),
    ]
    if plots:
        lines += ["### Plots", "", *[f"![{p}]({p})" for p in plots], ""]
    return "\n".join(lines)
