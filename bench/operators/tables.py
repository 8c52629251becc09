"""Markdown cells and tables of the results files, shared by every scenario's report."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def num(x: float | None, digits: int = 2) -> str:
    """``x`` with thousands separators and ``digits`` decimals; ``-`` for None or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


def ratio(a: float | None, b: float | None) -> str:
    """``a / b`` as ``1.23x``; ``-`` when either is missing, zero or NaN."""
    if not a or not b or math.isnan(a) or math.isnan(b):
        return "-"
    return f"{a / b:.2f}x"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> list[str]:
    """A markdown table; ``align`` has one ``l`` or ``r`` per column (default: the first
    column left, the rest right)."""
    align = align or "l" + "r" * (len(header) - 1)
    marks = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def by(records: Sequence[Mapping[str, Any]], *keys: str) -> dict[Any, Mapping[str, Any]]:
    """Records by the value of ``keys`` (a tuple when there are several)."""
    out: dict[Any, Mapping[str, Any]] = {}
    for r in records:
        out[tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]] = r
    return out


def goal_word(ok: bool) -> str:
    return "met" if ok else "missed"


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def cpu_cell(phase: Mapping[str, Any]) -> str:
    """``kube-apiserver CPU s / machine busy %`` of a phase's ``cpu_share``."""
    share = phase.get("cpu_share") or {}
    total = share.get("machine total")
    if not total:
        return "-"
    busy = 100 * share.get("machine busy", 0.0) / total
    return f"{share.get('kube-apiserver', float('nan')):.1f} / {busy:.0f} %"


def busy(share: Mapping[str, float]) -> str:
    """The machine's busy share of its CPU, e.g. ``"97 %"`` (``-`` unknown)."""
    total = share.get("machine total")
    if not total:
        return "-"
    return f"{100 * share.get('machine busy', 0.0) / total:.0f} %"


def code_cells(phase: Mapping[str, Any], resource: str) -> str:
    """``PUT 200: 1000, PUT 409: 9`` from a phase's ``writes_by_code``."""
    cells = []
    for key, value in sorted((phase.get("writes_by_code") or {}).items()):
        verb, res, sub, code = key.split("|")
        if res == resource and not sub:
            cells.append(f"{verb} {code}: {value:.0f}")
    return ", ".join(cells) or "-"


def spread(phase: Mapping[str, Any]) -> str:
    """``first / median / last`` seconds of a phase's ``spread``."""
    return " / ".join(f"{t:.2f}" for t in phase.get("spread") or ()) or "-"


def histogram_ones(histogram: Mapping[Any, int]) -> int:
    """How many saw exactly one event, from a ``k -> count`` histogram (JSON keys are
    strings)."""
    return int(histogram.get(1, histogram.get("1", 0)))


def ratio_goal(text: str, a: float | None, b: float | None, limit: float) -> list[str]:
    """A goal line ``a / b <= limit`` with both figures and its verdict (none when ``a``
    or ``b`` is missing or ``b`` is zero)."""
    if a is None or b is None or not b:
        return []
    r = a / b
    return [f"- {text}: {a:.3f} vs {b:.3f} ({r:.2f}x, goal <= {limit:g}x) — {verdict(r <= limit)}"]
