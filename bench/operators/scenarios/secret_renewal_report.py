"""S13's section of the results file and its goals, from its record (see ``secret_renewal``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.operators.tables import code_cells, cpu_cell, goal_word, histogram_ones, spread


def _gets(change: Mapping[str, Any]) -> float:
    """The operator's own GETs (audit log), any resource or path."""
    return float(change.get("operator_gets", 0))


def _others(change: Mapping[str, Any], impl: str) -> str:
    """The other clients' GETs of the window, ``client what: n``."""
    cells = [
        f"{k.replace('controller-runtime-peer', 'peer')}: {v}"
        for k, v in sorted((change.get("gets_by_client") or {}).items())
        if not k.startswith(impl)
    ]
    return ", ".join(cells) or "-"


def _operator_rows(label: str, op: Mapping[str, Any], bundles: int) -> list[str]:
    """``label`` is the implementation's name (cbop, controller-runtime)."""
    change = op["change"]
    ones = histogram_ones(change["modified_per_secret"])
    return [
        f"| {label}: renewal to all {bundles:,} target Secrets changed, s "
        f"(load {change['load']}) | {change['seconds']:.2f} | |",
        f"| {label}: first / median / last target changed, s | {spread(change)} | |",
        f"| {label}: operator CPU s over the renewal | {change['cpu_seconds']:.2f} | |",
        f"| {label}: kube-apiserver CPU s / machine busy | {cpu_cell(change)} | |",
        f"| {label}: its GETs, any resource (audit log) / GETs of Secrets by anyone "
        f"| {_gets(change):.0f} / {change['secret_gets']:.0f} | 0 |",
        f"| {label}: other clients' GETs in the window | {_others(change, label)} | |",
        f"| {label}: Secret writes by answer (the bench's PATCH included); per target "
        f"| {code_cells(change, 'secrets')}; "
        f"{change['writes_per_target']:.3f} | 1 |",
        f"| {label}: status writes | {change['status_writes']:.0f} | |",
        f"| {label}: targets with exactly one MODIFIED event | {ones} | all |",
        f"| {label}: {bundles:,} bundles created to all targets matching, s "
        f"(load {op['converge']['load']}) | {op['converge']['seconds']:.2f} | |",
    ]


def markdown(results: Mapping[str, Any]) -> list[str]:
    """The S13 section of the results file (none when it did not run)."""
    r = results.get("s13")
    if not r:
        return []
    raw, c = r["raw"], r["cbop"]
    n = r["bundles"]
    lines = [
        f"### S13 one source Secret renewed, reaching {n:,} target Secrets",
        "",
        "| measure | value | goal |",
        "|---|---:|---|",
        f"| raw: {n:,} Secrets updated, {results['settings']['workers']} threads, s "
        f"(load {raw['load']}) | {raw['seconds']:.2f} | floor |",
        f"| raw: first / median / last Secret changed, s | {spread(raw)} | |",
        f"| raw: kube-apiserver CPU s / machine busy | {cpu_cell(raw)} | |",
    ]
    if r.get("peer"):
        lines += _operator_rows("controller-runtime", r["peer"], n)
        lines += [
            f"| controller-runtime / raw | {r['peer_ratio']:.2f}x | |",
        ]
    lines += _operator_rows("cbop", c, n)
    lines += [f"| cbop / raw | {r['ratio']:.2f}x | |"]
    if r.get("peer"):
        lines += [
            f"| cbop / controller-runtime: time | {r['cbop_peer_ratio']:.2f}x | <= 1.0x |",
            f"| cbop / controller-runtime: operator CPU | {r['cbop_peer_cpu_ratio']:.2f}x "
            "| <= 1.2x |",
        ]
    lines += [
        f"| cbop idle {c['idle']['seconds']:.0f} s: writes | {c['idle']['writes']:.0f} | 0 |",
        f"| cbop steady RSS converged, before the renewal, MiB | {c['rss_converged_mib']:.1f} | |",
        f"| cbop steady RSS after the idle window / then with {c['unlabelled']:,} unlabelled "
        f"Secrets, MiB | {c['rss_mib']:.1f} / {c['rss_unlabelled_mib']:.1f} | no higher |",
    ]
    return [*lines, ""]


def goals(results: Mapping[str, Any]) -> list[str]:
    """S13's lines of the Goals section, each with its verdict (none when it did not run)."""
    r = results.get("s13")
    if not r:
        return []
    c = r["cbop"]
    change = c["change"]
    n = r["bundles"]
    ones = histogram_ones(change["modified_per_secret"])
    # RSS is compared at the 0.1 MiB the results show (a steady mean moves by KiB).
    out = [
        f"- S13 cbop GETs over the renewal: {_gets(change):.0f} (0): "
        f"{goal_word(_gets(change) == 0)}",
        f"- S13 cbop Secret writes per target: {change['writes_per_target']:.3f}, "
        f"{ones:,} of {n:,} with one MODIFIED (one): "
        f"{goal_word(change['secret_writes'] == n and ones == n)}",
        f"- S13 cbop RSS with {c['unlabelled']:,} unlabelled Secrets: "
        f"{c['rss_unlabelled_mib']:.1f} against {c['rss_mib']:.1f} MiB (no higher): "
        f"{goal_word(round(c['rss_unlabelled_mib'], 1) <= round(c['rss_mib'], 1))}",
    ]
    if r.get("peer"):
        out += [
            f"- S13 cbop / controller-runtime renewal time: {r['cbop_peer_ratio']:.2f}x "
            f"(<= 1.0x): {goal_word(r['cbop_peer_ratio'] <= 1.0)}",
            f"- S13 cbop / controller-runtime operator CPU: {r['cbop_peer_cpu_ratio']:.2f}x "
            f"(<= 1.2x): {goal_word(r['cbop_peer_cpu_ratio'] <= 1.2)}",
        ]
    return out
