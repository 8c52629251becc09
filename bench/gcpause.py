"""Pauses of the cyclic garbage collector with large informer caches, and gc.freeze().

Builds N converged bundles and their ConfigMaps as the informer caches hold them
(decoded from JSON, keys interned), then runs no-op reconciles over every key for a
number of passes, as resyncs do, recording every collection with ``gc.callbacks``.
Each variant runs in a fresh subprocess:

- ``default``: the collector as the process starts;
- ``freeze``: :func:`cbop.gcpolicy.freeze_caches` after the caches are filled (what the
  manager does after the initial cache sync).

Reported per variant: the number of full (generation 2) collections during the passes,
their longest and total pause, one forced ``gc.collect()`` (the pause a full collection
costs whenever it comes), and the process's peak RSS.

    PYTHONPATH=src .venv/bin/python -m bench.gcpause                  # N = 10,000
    PYTHONPATH=src .venv/bin/python -m bench.gcpause --bundles 3000 --passes 3
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

VARIANTS = ("default", "freeze")


def measure(variant: str, bundles: int, passes: int) -> dict[str, Any]:
    """Run one variant in this process; return its figures."""
    from bench.reconcile import Lister, NoClient, converged
    from cbop.configbundle import Reconciler
    from cbop.gcpolicy import freeze_caches
    from cbop.kube.jsonstream import intern_keys

    pairs = []
    for i in range(bundles):
        b, cm = converged(i)
        # As the informer holds them: decoded from the API server's JSON, keys interned.
        pairs.append(
            (intern_keys(json.loads(json.dumps(b))), intern_keys(json.loads(json.dumps(cm))))
        )
    reconciler = Reconciler(
        client=NoClient(),
        bundles=Lister([b for b, _ in pairs]),
        configmaps=Lister([c for _, c in pairs]),
    )
    keys = [f"bench/{b['metadata']['name']}" for b, _ in pairs]
    del pairs
    if variant == "freeze":
        freeze_caches()
    pauses: list[float] = []
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            pauses.append(time.perf_counter() - started.pop())

    gc.callbacks.append(on_gc)
    cpu = time.process_time()
    for _ in range(passes):
        for key in keys:
            reconciler.reconcile(key)
    cpu = time.process_time() - cpu
    automatic = list(pauses)
    forced_start = time.perf_counter()
    gc.collect()
    forced = time.perf_counter() - forced_start
    gc.callbacks.remove(on_gc)
    return {
        "variant": variant,
        "tracked": len(gc.get_objects()),
        "frozen": gc.get_freeze_count(),
        "full_collections": len(automatic),
        "max_ms": 1000 * max(automatic, default=0.0),
        "total_ms": 1000 * sum(automatic),
        "forced_ms": 1000 * forced,
        "cpu_s": cpu,
        "reconciles": passes * len(keys),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Run every variant in a subprocess and print a markdown table."""
    parser = argparse.ArgumentParser(prog="python -m bench.gcpause", description=__doc__)
    parser.add_argument("--bundles", type=int, default=10_000, help="bundles (and ConfigMaps)")
    parser.add_argument("--passes", type=int, default=5, help="no-op reconciles of every key")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.variant:
        print(json.dumps(measure(args.variant, args.bundles, args.passes)))
        return
    rows = []
    for variant in VARIANTS:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.gcpause",
                "--variant",
                variant,
                "--bundles",
                str(args.bundles),
                "--passes",
                str(args.passes),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print(f"Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}, ", end="")
    print(f"{args.bundles:,} bundles + {args.bundles:,} ConfigMaps, {args.passes} passes")
    print()
    print(
        "| variant | tracked objects | frozen | full collections | longest pause ms "
        "| total ms | forced gc.collect() ms | reconcile CPU s | peak RSS MiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['variant']} | {r['tracked']:,} | {r['frozen']:,} | {r['full_collections']} "
            f"| {r['max_ms']:.1f} | {r['total_ms']:.1f} | {r['forced_ms']:.1f} "
            f"| {r['cpu_s']:.2f} | {r['peak_rss_mib']:.0f} |"
        )


if __name__ == "__main__":
    main()
