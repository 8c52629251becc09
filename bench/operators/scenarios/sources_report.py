"""S10's section of the results file, from its record (see ``sources``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.operators.tables import code_cells, cpu_cell, goal_word, histogram_ones, spread

PEER = "controller-runtime"


def _cpu(phase: Mapping[str, Any], name: str) -> str:
    value = (phase.get("cpu_share") or {}).get(name)
    return "-" if value is None else f"{value:.1f}"


def _status_cells(change: Mapping[str, Any]) -> str:
    """``seconds to the last status / the operator's CPU s to the last ConfigMap / to the
    last status`` of a change."""
    seconds = change.get("status_seconds")
    if seconds is None:
        return "-"
    return (
        f"{seconds:.2f} / {change.get('cpu_seconds', float('nan')):.2f} / "
        f"{change.get('cpu_seconds_status', float('nan')):.2f}"
    )


_VARIANTS = {
    "on": "merging common.yaml with a setting of each bundle's own",
    "control": "a setting of each bundle's own as a key of its own, no merge",
}


def merge_cost(r: Mapping[str, Any]) -> tuple[str, float] | None:
    """What the merge adds to cbop's CPU over a source change, to the last status: the
    ``on`` variant's CPU over the ``control`` variant's, minus one (over the first
    change's when no control ran); with what it was measured against. None when no
    ``on`` variant ran."""
    merges = (r.get("cbop") or {}).get("merge") or {}
    if "on" not in merges:
        return None
    base, against = (
        (merges["control"]["change"], "control")
        if "control" in merges
        else (r["cbop"]["change"], "first change")
    )
    plain, merged = base.get("cpu_seconds_status"), merges["on"]["change"].get("cpu_seconds_status")
    return against, (merged / plain - 1 if plain and merged is not None else float("nan"))


def _merge_rows(r: Mapping[str, Any]) -> list[str]:
    """The rows of cbop's further changes (``s10.merge``; none when none ran)."""
    merges = (r.get("cbop") or {}).get("merge") or {}
    rows = []
    for variant, m in merges.items():
        change = m["change"]
        ones = histogram_ones(change["modified_per_configmap"])
        rows += [
            f"| {variant}: bundles updated to {_VARIANTS.get(variant, variant)}, s "
            f"| {m['update']['seconds']:.2f} | |",
            f"| {variant}: source change to all ConfigMaps changed, s (load {change['load']}) "
            f"| {change['seconds']:.2f} | |",
            f"| {variant}: last status s / cbop CPU s to the last ConfigMap / to the last "
            f"status | {_status_cells(change)} | |",
            f"| {variant}: ConfigMap GETs / writes by answer / status writes "
            f"| {change['configmap_gets']:.0f} / {code_cells(change, 'configmaps')} / "
            f"{change['status_writes']:.0f} | |",
            f"| {variant}: ConfigMaps with exactly one MODIFIED event | {ones} | |",
        ]
    cost = merge_cost(r)
    if cost is not None:
        against, extra = cost
        rows.append(
            f"| the merge: cbop CPU to the last status, on over {against} "
            f"| {100 * extra:+.0f} % | <= 10 %: {goal_word(extra <= 0.10)} |"
        )
    return rows


def _peer_rows(r: Mapping[str, Any]) -> list[str]:
    """The Go peer's rows of the S10 table (none when it did not run)."""
    p = r.get("peer")
    if not p:
        return []
    change = p["change"]
    ones = histogram_ones(change["modified_per_configmap"])
    return [
        f"| controller-runtime: source change to all {r['bundles']:,} ConfigMaps changed, s "
        f"(load {change['load']}) | {change['seconds']:.2f} | |",
        f"| first / median / last ConfigMap changed, s: controller-runtime | {spread(change)} | |",
        f"| controller-runtime / raw | {r['peer_ratio']:.2f}x | |",
        f"| cbop / controller-runtime | {r['cbop_peer_ratio']:.2f}x | |",
        f"| kube-apiserver CPU s / machine busy: controller-runtime change "
        f"| {cpu_cell(change)} | |",
        f"| CPU s of controller-runtime / of the bench's own client: change "
        f"| {_cpu(change, PEER)} / {_cpu(change, 'bench')} | |",
        f"| controller-runtime: last status s / CPU s to the last ConfigMap / to the last "
        f"status | {_status_cells(change)} | |",
        f"| controller-runtime change: ConfigMap GETs / writes by answer / status writes "
        f"| {change['configmap_gets']:.0f} / {code_cells(change, 'configmaps')} / "
        f"{change['status_writes']:.0f} | |",
        f"| controller-runtime change: ConfigMaps with exactly one MODIFIED event | {ones} | |",
        f"| controller-runtime: {r['bundles']:,} bundles created to all ConfigMaps matching, s "
        f"| {p['converge']['seconds']:.2f} | |",
    ]


def _cpu_ratio(r: Mapping[str, Any]) -> list[str]:
    """cbop's CPU over the change against the Go peer's, to the last status (none without
    the peer)."""
    p = r.get("peer")
    if not p:
        return []
    ours, theirs = (
        r["cbop"]["change"].get("cpu_seconds_status"),
        p["change"].get("cpu_seconds_status"),
    )
    if not ours or not theirs:
        return []
    return [
        f"| operator CPU s to the last status, cbop / controller-runtime | {ours / theirs:.2f}x "
        f"| <= 1.1x: {goal_word(ours / theirs <= 1.1)} |"
    ]


def markdown(results: Mapping[str, Any]) -> list[str]:
    """The S10 section of the results file (none when it did not run)."""
    r = results.get("s10")
    if not r:
        return []
    raw, c = r["raw"], r["cbop"]
    change = c["change"]
    ones = histogram_ones(change["modified_per_configmap"])
    lines = [
        f"### S10 one source read by {r['bundles']:,} ConfigBundles",
        "",
        f"Load average: raw {raw['load']}; cbop converge {c['load_converge']}; "
        f"source change {c['load_change']}.",
        "",
        "| measure | value | goal |",
        "|---|---:|---|",
        f"| raw: {r['bundles']:,} ConfigMaps updated, {results['settings']['workers']} "
        f"threads, s | {raw['seconds']:.2f} | floor |",
        f"| cbop: source change to all {r['bundles']:,} ConfigMaps changed, s "
        f"| {change['seconds']:.2f} | |",
        f"| first / median / last ConfigMap changed, s: raw | {spread(raw)} | |",
        f"| first / median / last ConfigMap changed, s: source change | {spread(change)} | |",
        f"| cbop / raw | {r['ratio']:.2f}x | <= 1.2x: {goal_word(r['ratio'] <= 1.2)} |",
        *_peer_rows(r),
        f"| kube-apiserver CPU s / machine busy: raw | {cpu_cell(raw)} | |",
        f"| kube-apiserver CPU s / machine busy: source change | {cpu_cell(change)} | |",
        f"| CPU s of cbop / of the bench's own client: raw | - / {_cpu(raw, 'bench')} | |",
        f"| CPU s of cbop / of the bench's own client: source change "
        f"| {_cpu(change, 'cbop')} / {_cpu(change, 'bench')} | |",
        f"| cbop: last status s / CPU s to the last ConfigMap / to the last status "
        f"| {_status_cells(change)} | |",
        *_cpu_ratio(r),
        f"| source change: ConfigMap GETs (apiserver_request_total) "
        f"| {change['configmap_gets']:.0f} | 0: {goal_word(change['configmap_gets'] == 0)} |",
        f"| source change: ConfigMap writes by answer | {code_cells(change, 'configmaps')} "
        "| one per bundle |",
        f"| source change: cbop's status writes | {change.get('status_writes', 0):.0f} | |",
        f"| source change: ConfigMaps with exactly one MODIFIED event | {ones} "
        f"| all: {goal_word(ones == r['bundles'])} |",
        f"| cbop: {r['bundles']:,} bundles created to all ConfigMaps matching, s "
        f"| {c['converge']['seconds']:.2f} | |",
        *_merge_rows(r),
        f"| idle {c['idle']['seconds']:.0f} s: writes | {c['idle']['writes']:.0f} "
        f"| 0: {goal_word(c['idle']['writes'] == 0)} |",
        f"| steady RSS converged / with {c['unlabelled']:,} unlabelled ConfigMaps, MiB "
        f"| {c['rss_mib']:.1f} / {c['rss_unlabelled_mib']:.1f} | |",
        f"| steady RSS after the changes / with {c['unlabelled']:,} unlabelled ConfigMaps, MiB "
        f"| {c.get('rss_before_unlabelled_mib', c['rss_mib']):.1f} / "
        f"{c['rss_unlabelled_mib']:.1f} | flat |",
    ]
    return [*lines, ""]
