"""S9's section of the results file, from its record (see ``clusterbundles``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.operators.apiserver import WRITE_VERBS
from bench.operators.tables import code_cells, cpu_cell, goal_word, histogram_ones, num

#: Width (s) of the window in which at most one status write may fall: 1 s less the
#: jitter of timestamping watch events as they are decoded (tens of ms).
STATUS_WINDOW = 0.95


def _gap(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


#: What a namespace's copy costs in writes: its ConfigMap, and its stamp and the stamp's
#: status where there is one (Events are counted apart).
PER_NAMESPACE = frozenset({"configmaps", "configbundles"})


def writes_per_namespace(
    requests: Mapping[str, float], namespaces: int, resources: frozenset[str] = PER_NAMESPACE
) -> float:
    """Writes on ``resources`` in ``requests`` (``verb|res|sub``), per namespace."""
    total = sum(
        v
        for k, v in requests.items()
        if k.split("|")[0] in WRITE_VERBS and k.split("|")[1] in resources
    )
    return total / namespaces if namespaces else float("nan")


def status_writes(requests: Mapping[str, float]) -> float:
    """The ClusterConfigBundle's status writes in ``requests``."""
    return sum(
        v
        for k, v in requests.items()
        if k.split("|")[0] in WRITE_VERBS and k.split("|")[1:] == ["clusterconfigbundles", "status"]
    )


def _share(phase: Mapping[str, Any] | None, name: str) -> float | None:
    return None if phase is None else (phase.get("cpu_share") or {}).get(name)


def designs(r: Mapping[str, Any]) -> list[str]:
    """raw, the Go peer and cbop side by side (none without the raw template change)."""
    if "raw_template" not in r:
        return []
    n = r["namespaces"]
    peer = r.get("peer") or {}
    phases = {
        "converge": (r["raw"], peer.get("converge"), r["cbop"]),
        "template change": (r["raw_template"], peer.get("template"), r["template"]),
    }
    rows = []
    for label, (raw, go, cbop) in phases.items():
        floor = raw["seconds"]
        cells = [num(p["seconds"]) if p else "-" for p in (raw, go, cbop)]
        rows.append(f"| {label}: until every namespace is served, s | " + " | ".join(cells) + " |")
        ratios = [num(p["seconds"] / floor) + "x" if p and floor else "-" for p in (raw, go, cbop)]
        rows.append(f"| {label}: / raw | " + " | ".join(ratios) + " |")
        cpu = [num(_share(p, "kube-apiserver"), 1) for p in (raw, go, cbop)]
        rows.append(f"| {label}: kube-apiserver CPU s | " + " | ".join(cpu) + " |")
        ops = ["-", *(num(p.get("cpu_seconds"), 1) if p else "-" for p in (go, cbop))]
        rows.append(f"| {label}: operator CPU s | " + " | ".join(ops) + " |")
        per_ns = [
            num(writes_per_namespace(raw["bench_requests"], n)),
            *(num(writes_per_namespace(p["requests"], n)) if p else "-" for p in (go, cbop)),
        ]
        rows.append(f"| {label}: writes per namespace | " + " | ".join(per_ns) + " |")
        events = [
            "-",
            *(
                num(writes_per_namespace(p["requests"], n, frozenset({"events"}))) if p else "-"
                for p in (go, cbop)
            ),
        ]
        rows.append(f"| {label}: Event writes per namespace | " + " | ".join(events) + " |")
        status = ["-", *(num(status_writes(p["requests"]), 0) if p else "-" for p in (go, cbop))]
        rows.append(f"| {label}: ClusterConfigBundle status writes | " + " | ".join(status) + " |")
    ones = [
        str(histogram_ones(p["modified_per_namespace"])) if p else "-"
        for p in phases["template change"]
    ]
    rows.append(
        "| template change: namespaces with one ConfigMap MODIFIED | " + " | ".join(ones) + " |"
    )
    return [
        "",
        f"The designs side by side ({n:,} namespaces; writes per namespace: ConfigMaps, "
        "and stamped ConfigBundles and their status, from `apiserver_request_total`; "
        "raw's are the bench's own):",
        "",
        "| measure | raw | controller-runtime (writes ConfigMaps) | cbop (stamps) |",
        "|---|---:|---:|---:|",
        *rows,
    ]


def markdown(results: Mapping[str, Any]) -> list[str]:
    """The S9 section (none when it did not run)."""
    r = results.get("s9")
    if not r:
        return []
    t, idle, new, rss = r["template"], r["idle"], r["new"], r["rss"]
    per_ns = t["modified_per_namespace"]
    ones = histogram_ones(per_ns)
    lines = [
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
        f"| {ones} | all: {goal_word(ones == r['namespaces'])} |",
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
        *designs(r),
    ]
    return [*lines, ""]
