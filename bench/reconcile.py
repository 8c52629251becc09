"""No-op reconciles per CPU second: what a resync costs cbop per converged bundle.

Builds N converged bundles and their ConfigMaps (as the API server would hold them after
cbop wrote them) in in-memory listers, then runs ``Reconciler.reconcile`` over every key
R times, as a resync does, and reports reconciles per second of process CPU time
(``time.process_time``). Logging is configured as the operator's (JSON at info, to
/dev/null); no reconcile may make a request (checked). ``--profile FILE`` writes a
cProfile of one pass.

    PYTHONPATH=src .venv/bin/python -m bench.reconcile            # N = 1,000, 5 passes, best of 3
    PYTHONPATH=src .venv/bin/python -m bench.reconcile --bundles 10000 --passes 2
"""

from __future__ import annotations

import argparse
import base64
import copy
import cProfile
import datetime
import os
import pstats
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from cbop.api import Reason, parse_spec
from cbop.logconfig import configure_logging
from cbop.reconciler import Action, Reconciler
from cbop.reconciler.decision import decide
from cbop.reconciler.status import compute_status

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)


class Lister:
    """An informer cache's lister over fixed objects (``get`` and the controller-uid index)."""

    def __init__(self, objects: Sequence[dict[str, Any]]) -> None:
        self._by_key = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}
        self._by_owner: dict[str, list[dict[str, Any]]] = {}
        for o in objects:
            for ref in o["metadata"].get("ownerReferences") or ():
                if ref.get("controller"):
                    self._by_owner.setdefault(ref["uid"], []).append(o)

    def get(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        return self._by_key.get((namespace or "", name))

    def by_index(self, index_name: str, value: str) -> Sequence[Mapping[str, Any]]:
        return self._by_owner.get(value, [])


class NoClient:
    """Fails the benchmark on any request: a converged bundle's reconcile makes none."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a no-op reconcile called client.{name}")


def converged(i: int, namespace: str = "bench") -> tuple[dict[str, Any], dict[str, Any]]:
    """Bundle ``i`` with a Synced status and the ConfigMap cbop wrote for it.

    Each bundle has 8 data keys of 100-200 bytes, one binaryData key of 256 bytes, two
    labels and one annotation (about 2 KiB of content, like the operators bench's).
    """
    name = f"b{i:06d}"
    spec = {
        "data": {f"key{k}": f"value-{i}-{k}-" + "x" * (100 + 10 * k) for k in range(8)},
        "binaryData": {"blob": base64.b64encode(bytes(range(256))).decode()},
        "labels": {"team": "bench", "tier": str(i % 3)},
        "annotations": {"owner": "bench@example.com"},
    }
    uid = f"00000000-0000-0000-0000-{i:012d}"
    bundle: dict[str, Any] = {
        "apiVersion": "cbop.dev/v1alpha1",
        "kind": "ConfigBundle",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "generation": 1,
            "resourceVersion": str(10_000 + 2 * i),
        },
        "spec": spec,
    }
    parsed = parse_spec(bundle)
    decision = decide(bundle, parsed, None)
    assert decision.body is not None
    assert decision.desired is not None
    cm = copy.deepcopy(decision.body)
    cm["metadata"].update(uid=f"cm-{uid}", resourceVersion=str(10_001 + 2 * i))
    keys = len(parsed.data) + len(parsed.binary_data)
    bundle["status"] = compute_status(
        bundle,
        ready="True",
        reason=Reason.SYNCED,
        message=f"ConfigMap {name} matches the spec ({keys} keys, {decision.desired.content_hash})",
        config_map_name=name,
        content_hash=decision.desired.content_hash,
        key_count=keys,
        now=NOW,
    )
    return bundle, cm


def run(bundles: int, passes: int, repeat: int, profile: str | None) -> dict[str, float]:
    """Time ``passes`` reconciles of every key, best of ``repeat``; return the figures."""
    pairs = [converged(i) for i in range(bundles)]
    reconciler = Reconciler(
        client=NoClient(),
        bundles=Lister([b for b, _ in pairs]),
        configmaps=Lister([c for _, c in pairs]),
        now=lambda: NOW,
    )
    keys = [f"bench/{b['metadata']['name']}" for b, _ in pairs]
    for key in keys:  # warm-up; also checks that every key is a no-op
        assert reconciler.reconcile(key).action is Action.NONE, key
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(passes):
            for key in keys:
                reconciler.reconcile(key)
        best = min(best, time.process_time() - start)
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for key in keys:
            reconciler.reconcile(key)
        profiler.disable()
        profiler.dump_stats(profile)
        pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
    count = passes * len(keys)
    return {
        "reconciles": count,
        "cpu_s": best,
        "per_cpu_s": count / best,
        "us_each": 1e6 * best / count,
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Parse flags, run, print a markdown table."""
    parser = argparse.ArgumentParser(prog="python -m bench.reconcile", description=__doc__)
    parser.add_argument("--bundles", type=int, default=1000, help="converged bundles (1,000)")
    parser.add_argument("--passes", type=int, default=5, help="reconciles of every key per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best counts")
    parser.add_argument("--profile", help="write a cProfile of one pass to this file")
    args = parser.parse_args(argv)
    # The operator's logging, its handler writing to /dev/null (kept open for the run).
    stderr, sys.stderr = sys.stderr, open(os.devnull, "w")  # noqa: SIM115
    try:
        configure_logging("info", "json")
    finally:
        sys.stderr = stderr
    got = run(args.bundles, args.passes, args.repeat, args.profile)
    print(f"Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}")
    print()
    print("| bundles | no-op reconciles | CPU s (best) | reconciles per CPU s | us per reconcile |")
    print("|---:|---:|---:|---:|---:|")
    print(
        f"| {args.bundles:,} | {got['reconciles']:,.0f} | {got['cpu_s']:.3f} | "
        f"{got['per_cpu_s']:,.0f} | {got['us_each']:.1f} |"
    )


if __name__ == "__main__":
    main()
