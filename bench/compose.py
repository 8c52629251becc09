"""CPU of one source change read by many bundles, through ``cbop.api.compose.compose``.

A labelled source ConfigMap holds ``app.yaml``, a generated YAML document of ``--kib``
KiB (services with images, numbers with trailing zeros, quoted strings, flow lists, block
lists and comments), merged as YAML by ``--readers`` bundles. Each bundle's own
``spec.data`` overrides one service (``--same``: the same override for all, as the stamps
of one ClusterConfigBundle template; default: each its own, as separate ConfigBundles).
All readers are composed once on the source's first version (the converged state, not
measured); then, ``--runs`` times, the source gets a new resourceVersion with one value
changed and every reader is composed once more: the CPU seconds of that (process time)
are one run's figure, with the source texts parsed (``cbop.api.structured.DOCUMENTS``)
and the process's RSS.

``--s10`` instead composes 1,000 bundles reading S10's source (``bench/operators/
sources.py``: 40 settings, about 1 KiB) with its ``common.yaml`` merged under a key of
each bundle's own: what a merge adds to each reconcile of S10's source change.

It runs on whatever ``cbop`` is importable, so the same script measures an older tree:

    PYTHONPATH=src .venv/bin/python -m bench.compose                 # 900 KiB, 300 readers
    PYTHONPATH=/tmp/main/src .venv/bin/python -m bench.compose --readers 20
    PYTHONPATH=src .venv/bin/python -m bench.compose --s10
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cbop.api import parse_spec
from cbop.api.compose import compose

NS = "bench"


def document(kib: int) -> str:
    """A YAML document of about ``kib`` KiB that YAML 1.1 would rewrite in many places."""
    parts = ["# generated services; the platform team owns this file\n"]
    size, i = 0, 0
    while size < kib * 1024:
        part = (
            f"svc-{i:05d}:\n"
            f"  image: registry.example/app-{i}:1.{i % 20}.0\n"
            f"  replicas: {i % 7}\n"
            f"  ratio: 0.{i % 10}0\n"
            "  enabled: yes\n"
            f"  tags: [a, b, 'c-{i}']\n"
            "  env:\n"
            "    - name: MODE\n"
            '      value: "prod"  # quoted\n'
            "    - name: WINDOW\n"
            "      value: 12:30\n"
        )
        parts.append(part)
        size += len(part)
        i += 1
    return "".join(parts)


def source(text: str, version: int, key: str = "app.yaml") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "base",
            "namespace": NS,
            "uid": "u-base",
            "resourceVersion": str(version),
            "labels": {"cbop.dev/source": "true"},
        },
        "data": {key: text},
    }


def reader(i: int, override: str, key: str = "app.yaml") -> Any:
    return parse_spec(
        {
            "metadata": {"name": f"r{i:04d}", "namespace": NS, "uid": f"u-{i}"},
            "spec": {
                "sources": [{"configMap": {"name": "base"}}],
                "data": {key: override},
                "merge": [{"key": key, "format": "yaml"}],
            },
        }
    )


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def parses() -> int | None:
    """Texts parsed so far by this tree's shared documents (None: a tree without them)."""
    try:
        from cbop.api.structured import DOCUMENTS  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return int(DOCUMENTS.parses)


def compose_all(
    specs: Sequence[Any], lookup: Callable[[str, str], Mapping[str, Any] | None]
) -> int:
    size = 0
    for spec in specs:
        size += compose(spec, NS, lookup).size
    return size


def change(base: str, readers: int, same: bool, runs: int) -> list[dict[str, float]]:
    """Compose every reader on version 1, then ``runs`` source changes; figures per change."""
    specs = [
        reader(i, "svc-00001:\n  replicas: 9\n" if same else f"svc-{i:05d}:\n  replicas: 9\n")
        for i in range(readers)
    ]
    current = {"cm": source(base, 1)}

    def lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
        return current["cm"] if (namespace, name) == (NS, "base") else None

    compose_all(specs, lookup)
    out = []
    for run in range(runs):
        text = base.replace("replicas: 3\n", f"replicas: {run + 10}\n", 1)
        current["cm"] = source(text, run + 2)
        before, parsed = time.process_time(), parses()
        size = compose_all(specs, lookup)
        out.append(
            {
                "cpu_s": time.process_time() - before,
                "parses": float("nan") if parsed is None else float((parses() or 0) - parsed),
                "rss_mib": rss_mib(),
                "bytes": float(size),
            }
        )
    return out


def s10(bundles: int, runs: int) -> list[dict[str, float]]:
    """S10's source with ``common.yaml`` merged by ``bundles`` bundles: CPU per change."""
    common = "".join(f"setting-{i:03d}: value-{i:03d}\n" for i in range(40))
    specs = [reader(i, f"bundle: r{i:04d}\n", "common.yaml") for i in range(bundles)]
    current = {"cm": source(common, 1, "common.yaml")}

    def lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
        return current["cm"] if (namespace, name) == (NS, "base") else None

    compose_all(specs, lookup)
    out = []
    for run in range(runs):
        text = common.replace("value-000", f"value-{run}", 1)
        current["cm"] = source(text, run + 2, "common.yaml")
        before = time.process_time()
        compose_all(specs, lookup)
        out.append({"cpu_s": time.process_time() - before, "per_bundle_ms": 0.0})
        out[-1]["per_bundle_ms"] = 1000 * out[-1]["cpu_s"] / bundles
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.compose", description=__doc__)
    parser.add_argument("--kib", type=int, default=900, help="size of the source's value")
    parser.add_argument("--readers", type=int, default=300, help="bundles reading it")
    parser.add_argument("--same", action="store_true", help="one override for all readers")
    parser.add_argument("--runs", type=int, default=3, help="source changes measured")
    parser.add_argument("--s10", action="store_true", help="S10's source merged, 1,000 bundles")
    args = parser.parse_args(argv)
    import cbop.api.compose as composing

    print(f"cbop from {os.path.dirname(composing.__file__)}, Python {sys.version.split()[0]}")
    print(f"load average {os.getloadavg()[0]:.2f}, RSS at start {rss_mib():.1f} MiB")
    if args.s10:
        figures = s10(1000, args.runs)
        print("\n| run | CPU s, 1,000 readers | ms per reader |\n|---:|---:|---:|")
        for n, f in enumerate(figures, 1):
            print(f"| {n} | {f['cpu_s']:.3f} | {f['per_bundle_ms']:.3f} |")
        return
    base = document(args.kib)
    shape = "the same override" if args.same else "an override each"
    print(f"source value {len(base) / 1024:.0f} KiB, {args.readers} readers, {shape}")
    figures = change(base, args.readers, args.same, args.runs)
    print("\n| run | CPU s | per reader, ms | texts parsed | RSS MiB |\n|---:|---:|---:|---:|---:|")
    for n, f in enumerate(figures, 1):
        each = 1000 * f["cpu_s"] / args.readers
        print(f"| {n} | {f['cpu_s']:.2f} | {each:.1f} | {f['parses']:.0f} | {f['rss_mib']:.0f} |")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
