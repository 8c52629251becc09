"""Draw the benchmark's PNGs from a results JSON (run with the bench virtualenv's python).

Usage: ``plot.py RESULTS.json OUT_PREFIX``; prints the paths written.
"""

# matplotlib lives only in the bench's virtualenv, not in the one mypy runs in.
# mypy: disable-error-code="import-not-found,unused-ignore"

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

STYLE = {
    "raw": ("black", "o"),
    "cbop": ("tab:blue", "s"),
    "cbop-qps20": ("tab:cyan", "s"),
    "controller-runtime": ("tab:green", "^"),
    "controller-runtime-defaults": ("tab:olive", "^"),
    "kopf": ("tab:red", "v"),
    "kopf-wl4": ("tab:orange", "v"),
}


def convergence(results: dict[str, Any], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    by_impl: dict[str, list[tuple[int, float]]] = {}
    for rec in results["s1"]:
        by_impl.setdefault(rec["impl"], []).append((rec["n"], rec["seconds"]))
    for impl, points in by_impl.items():
        points.sort()
        color, marker = STYLE.get(impl, ("gray", "x"))
        ax.plot(
            [p[0] for p in points], [p[1] for p in points], marker=marker, color=color, label=impl
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bundles created (N)")
    ax.set_ylabel("seconds until all converged")
    ax.set_title("S1 burst: convergence time")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out.with_name(out.name + "-s1-convergence.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def cdf(records: list[dict[str, Any]], title: str, xlabel: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for rec in records:
        values = rec["latencies"]
        if not values:
            continue
        color, _ = STYLE.get(rec["impl"], ("gray", "x"))
        ys = [(i + 1) / len(values) for i in range(len(values))]
        ax.step(values, ys, where="post", color=color, label=rec["impl"])
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of bundles")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    results = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    paths = []
    if results.get("s1"):
        paths.append(convergence(results, out))
        largest = max(r["n"] for r in results["s1"])
        paths.append(
            cdf(
                [r for r in results["s1"] if r["n"] == largest],
                f"S1 burst: per-bundle latency, N = {largest}",
                "seconds from create to Ready and ConfigMap matching",
                out.with_name(out.name + "-s1-latency-cdf.png"),
            )
        )
    if results.get("s2"):
        paths.append(
            cdf(
                results["s2"],
                "S2 drift heal: latency CDF",
                "seconds from patch to restored ConfigMap (watch)",
                out.with_name(out.name + "-s2-heal-cdf.png"),
            )
        )
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
