"""A run's results files: ``<name>.json`` (every record) and ``<name>.md`` (the tables).

The markdown is the run's header (machine, versions, settings), each scenario's sections
in registry order, the goals with their verdicts, and the plots.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.operators import procs
from bench.operators.scenario import Scenario


def header(results: Mapping[str, Any]) -> list[str]:
    m = results["machine"]
    s = results["settings"]
    return [
        f"# Operator benchmark {results['started']} on {m['host']}",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory']} RAM, kernel {m['kernel']}, "
        f"load average at start {m['load']}; Python {m['python']}, {m['go']}; "
        f"Kubernetes control plane {results.get('kubernetes', '?')}; cbop at "
        f"{', '.join(results.get('cbop_revisions') or ['?'])} (the commit each cbop process "
        "started from).",
        "",
        f"Settings: {s['workers']} workers for every operator (and the raw floor; "
        "apf sets its own), loader with "
        f"{s['loader_threads']} threads, no client-side rate limit anywhere "
        f"({results.get('limits', '')}). "
        f"Wall clock of the run: {results.get('wall_seconds', 0) / 60:.1f} min.",
        "",
    ]


def markdown(
    results: Mapping[str, Any], scenarios: Sequence[Scenario], plots: Sequence[str]
) -> str:
    """The results file's markdown."""
    lines = header(results)
    for scenario in scenarios:
        lines += scenario.markdown(results)
    goals = [line for scenario in scenarios for line in scenario.goals(results)]
    if goals:
        lines += ["### Goals", "", *goals, ""]
    if plots:
        lines += ["### Plots", "", *[f"![{p}]({p})" for p in plots], ""]
    return "\n".join(lines)


def write(results: Mapping[str, Any], out: Path, scenarios: Sequence[Scenario]) -> Path:
    """Write ``<out>/<name>.json``, the PNG plots and ``<out>/<name>.md``; return the
    markdown's path. The name is ``results["name"]``, or ``DATE-HOST`` (``-quick``)."""
    out.mkdir(parents=True, exist_ok=True)
    base = results.get("name") or f"{results['started'][:10]}-{socket.gethostname()}" + (
        "-quick" if results["quick"] else ""
    )
    json_path = out / f"{base}.json"
    json_path.write_text(json.dumps(results, indent=1, sort_keys=True))
    try:
        plots = [p.name for p in procs.run_plot(json_path, out / base)] if results.get("s1") else []
    except Exception as exc:  # noqa: BLE001 - the tables matter more than the pictures
        print(f"plots failed: {exc}", file=sys.stderr)
        plots = []
    md_path = out / f"{base}.md"
    md_path.write_text(markdown(results, scenarios, plots))
    return md_path
