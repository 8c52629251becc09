"""Counts and pooled timings of several runs' results, side by side.

Used by ``python -m bench.operators --runs N`` (one side: N runs of this harness) and by
``bench.operators.compare`` (two sides: before and after). A results document is
flattened into leaves (a record in a list is keyed by its identity fields, e.g.
``s1[impl=cbop,n=3000].requests.POST|configmaps|``); :data:`COUNTS` are the leaves that do
not depend on the machine's load, :data:`TIMINGS` the ones that do.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from bench.operators.harness import percentile
from bench.operators.tables import table

Doc = Mapping[str, Any]

#: Fields that identify a record in a list of records.
_IDENTITY = ("setup", "impl", "label", "n", "round", "workers")
_MINE = r"(configbundles|configmaps|events|clusterconfigbundles|secrets)"
#: Leaves that are counts, by path (a record in a list is ``key[identity]``).
COUNTS = [
    re.compile(p)
    for p in (
        rf"^s1\[.*\]\.(complete|converged|requests\.(?!WATCH)\w+\|{_MINE}\|.*|gets_by_client\..*)$",
        r"^s2\[.*\]\.(healed|patches|n)$",
        rf"^s3\[.*\]\.(writes|startup_writes|n|requests\.(?!WATCH)\w+\|{_MINE}\|.*)$",
        r"^scale\[.*\]\.complete$",
        r"^s8\[.*\]\.(complete|converged|namespaces|per_replica\.\d+\.(shards|bundles|configmaps))$",
        rf"^s9\.(namespaces|raw\.(complete|converged)|(cbop|template|peer\.\w+)\.(complete|converged"
        rf"|configmap_writes|stamp_writes|stamp_status_writes|status_writes|writes_by_code\..*"
        rf"|modified_per_namespace\..*|requests\.(?!WATCH)\w+\|{_MINE}\|.*)"
        r"|idle\.(writes|by_kind\..*)|new\.(count|served)|rss\.(restart_writes|served))$",
        rf"^s10\.(bundles|raw\.complete|(peer|cbop|cbop\.merge\.\w+)\.(converge\.complete|change\.(complete"
        rf"|reported|configmap_gets|configmap_writes|status_writes|writes_by_code\..*"
        rf"|modified_per_configmap\..*|requests\.(?!WATCH)\w+\|{_MINE}\|.*))"
        r"|cbop\.(idle\.(writes|by_kind\..*)|unlabelled|merge\.\w+\.update\.complete))$",
        rf"^s13\.(bundles|raw\.(complete|writes_by_code\..*)|(peer|cbop)\.(converge\.complete"
        rf"|change\.(complete|secret_gets|operator_gets|gets_by_client\..*|secret_writes"
        rf"|status_writes|writes_by_code\..*"
        rf"|modified_per_secret\..*|requests\.(?!WATCH)\w+\|{_MINE}\|.*))"
        r"|cbop\.(idle\.(writes|by_kind\..*)|unlabelled))$",
        r"^s11\.variants\.\w+\.(rounds\.\d+\.(complete|cbop\..*)|rollouts|census(_single)?\..*"
        r"|idle_\w+\.cbop\..*|fresh\.writes\..*|singles\.\d+\.(cbop|kcm)\..*|converge\.complete"
        r"|converge\.deployments_(cbop|kcm)\..*|after_rounds\.cbop\..*|kcm_all\..*)$",
        r"^s12\.variants\.\w+\.(setup\.(complete|cbop\..*|kcm\..*)|rounds\.\d+\.(complete"
        r"|cbop\..*|kcm\..*)|after_rounds\.(cbop|kcm)\..*|idle_\w+\.cbop\..*|census\..*"
        r"|audit\..*|pods_marked_ready)$",
        r"^apf\[.*\]\.(bundles|patches|complete|converged)$",
    )
]
#: Leaves that are timings or sizes, pooled over the runs.
TIMINGS = [
    re.compile(p)
    for p in (
        r"^s1\[.*\]\.(seconds|p50|p99|cpu_seconds|peak_rss_mib)$",
        r"^s2\[.*\]\.(p50|p99)$",
        r"^s3\[.*\]\.cpu_seconds$",
        r"^s4\[.*\]\.(steady_mib|peak_mib)$",
        r"^scale\[.*\]\.(converge_seconds|new_bundle_ready_seconds|restart_to_quiet_seconds"
        r"|steady_mib)$",
        r"^s8\[.*\]\.(converge_seconds|cpu_seconds_total)$",
        r"^s9\.((raw|raw_template|cbop|template|peer\.\w+)\.(seconds|cpu_seconds)|new\.(p50|p99)"
        r"|rss\.steady_mib)$",
        r"^s10\.((raw|(peer|cbop)\.converge|cbop\.merge\.\w+\.update)\.seconds"
        r"|(peer|cbop|cbop\.merge\.\w+)\.change\.(seconds|status_seconds|cpu_seconds|cpu_seconds_status)"
        r"|cbop\.(rss_mib|rss_before_unlabelled_mib|rss_unlabelled_mib))$",
        r"^s13\.((raw|(peer|cbop)\.change|(peer|cbop)\.converge)\.seconds"
        r"|(peer|cbop)\.change\.cpu_seconds|cbop\.rss(_converged|_unlabelled)?_mib)$",
        r"^s11\.variants\.\w+\.(rounds\.\d+\.ready_seconds|(rss|fresh)\.steady_mib)$",
        r"^s12\.variants\.\w+\.(rounds\.\d+\.(converge|complete|bundle)_seconds"
        r"|setup\.seconds|rss\.steady_mib)$",
        r"^apf\[.*\]\.(seconds|apf\.rejected)$",
    )
]


def flatten(value: Any, path: str = "", *, lists: bool = False) -> Iterator[tuple[str, Any]]:
    """``(path, leaf)`` of a results document; records in a list are ``key[identity]``
    (their :data:`_IDENTITY` fields), other records ``key.<index>``; lists of values are
    leaves only with ``lists``."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from flatten(v, f"{path}.{k}" if path else str(k), lists=lists)
    elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        for i, v in enumerate(value):
            ident = [f"{k}={v[k]}" for k in _IDENTITY if k in v]
            at = f"{path}[{','.join(ident)}]" if ident else f"{path}.{i}"
            yield from flatten(v, at, lists=lists)
    elif lists or not isinstance(value, list):
        yield path, value


def _pick(doc: Doc, patterns: Sequence[re.Pattern[str]]) -> dict[str, Any]:
    return {p: v for p, v in flatten(doc) if any(r.match(p) for r in patterns)}


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if value == int(value) else f"{value:,.3f}"
    return str(value)


def counts_table(sides: Mapping[str, Sequence[Doc]]) -> list[str]:
    """Every count of any side, each run's value per side; ``same`` when every run of
    every side agrees."""
    picked = {label: [_pick(d, COUNTS) for d in docs] for label, docs in sides.items()}
    keys = sorted({k for runs in picked.values() for run in runs for k in run})
    rows = []
    for key in keys:
        cells = [[_cell(run.get(key, "-")) for run in runs] for runs in picked.values()]
        verdict = "same" if len({c for side in cells for c in side}) == 1 else "differs"
        rows.append([key, *(" / ".join(side) for side in cells), verdict])
    header = ["count", *(f"{label} (each run)" for label in sides), ""]
    return table(header, rows, "l" + "l" * len(sides) + "c")


def _pooled(key: str, docs: Sequence[Doc], values: list[Any]) -> float | None:
    nums = [float(v) for v in values if isinstance(v, int | float) and not math.isnan(v)]
    if not nums:
        return None
    if key.endswith(("p50", "p99")) and key.startswith(("s1[", "s2[")):
        latencies = [x for d in docs for x in _latencies(d, key)]
        if latencies:
            return percentile(latencies, 0.5 if key.endswith("p50") else 0.99)
    if "seconds" in key.rsplit(".", 1)[-1]:
        return sum(nums)
    return sum(nums) / len(nums)


def _latencies(doc: Doc, key: str) -> list[float]:
    """The latencies recorded beside the quantile ``key``."""
    want = key.rsplit(".", 1)[0] + ".latencies"
    return [float(x) for path, value in flatten(doc, lists=True) if path == want for x in value]


def timings_table(sides: Mapping[str, Sequence[Doc]]) -> list[str]:
    """Every timing pooled over each side's runs; with two sides, the second / the first."""
    picked = {label: [_pick(d, TIMINGS) for d in docs] for label, docs in sides.items()}
    keys = sorted({k for runs in picked.values() for run in runs for k in run})
    labels = list(sides)
    rows = []
    for key in keys:
        pooled = [
            _pooled(key, sides[label], [run.get(key) for run in picked[label]]) for label in labels
        ]
        row = [key, *(_cell(p) if p is not None else "-" for p in pooled)]
        if len(pooled) == 2:
            first, second = pooled
            row.append(f"{second / first:.2f}x" if second is not None and first else "-")
        rows.append(row)
    header = ["timing (sums of seconds; pooled quantiles; means)", *labels]
    if len(labels) == 2:
        header.append(f"{labels[1]} / {labels[0]}")
    return table(header, rows)


def pooled(docs: Sequence[Doc]) -> str:
    """The counts of every run and the timings pooled over them, as markdown."""
    return "\n".join([*counts_table({"runs": docs}), "", *timings_table({"pooled": docs}), ""])
