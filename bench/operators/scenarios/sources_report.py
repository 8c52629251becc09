"""S10's section of the results file, from its record (see ``sources``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.operators.tables import code_cells, cpu_cell, goal_word, histogram_ones, spread

PEER = "controller-runtime"


def _cpu(phase: Mapping[str, Any], name: str) -> str:
    value = (phase.get("cpu_share") or {}).get(name)
    return "-" if value is None else f"{value:.1f}"


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
        f"| controller-runtime change: ConfigMap GETs / writes by answer / status writes "
        f"| {change['configmap_gets']:.0f} / {code_cells(change, 'configmaps')} / "
        f"{change['status_writes']:.0f} | |",
        f"| controller-runtime change: ConfigMaps with exactly one MODIFIED event | {ones} | |",
        f"| controller-runtime: {r['bundles']:,} bundles created to all ConfigMaps matching, s "
        f"| {p['converge']['seconds']:.2f} | |",
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
        f"| source change: ConfigMap GETs (apiserver_request_total) "
        f"| {change['configmap_gets']:.0f} | 0: {goal_word(change['configmap_gets'] == 0)} |",
        f"| source change: ConfigMap writes by answer | {code_cells(change, 'configmaps')} "
        "| one per bundle |",
        f"| source change: cbop's status writes | {change.get('status_writes', 0):.0f} | |",
        f"| source change: ConfigMaps with exactly one MODIFIED event | {ones} "
        f"| all: {goal_word(ones == r['bundles'])} |",
        f"| cbop: {r['bundles']:,} bundles created to all ConfigMaps matching, s "
        f"| {c['converge']['seconds']:.2f} | |",
        f"| idle {c['idle']['seconds']:.0f} s: writes | {c['idle']['writes']:.0f} "
        f"| 0: {goal_word(c['idle']['writes'] == 0)} |",
        f"| steady RSS converged / with {c['unlabelled']:,} unlabelled ConfigMaps, MiB "
        f"| {c['rss_mib']:.1f} / {c['rss_unlabelled_mib']:.1f} | flat |",
    ]
    return [*lines, ""]
