"""No-op and create reconciles per CPU second: what cbop spends per bundle in Python.

No-op: builds N converged bundles and their ConfigMaps (as the API server would hold them
after cbop wrote them) in in-memory listers, then runs ``Reconciler.reconcile`` over every
key R times, as a resync does, and reports reconciles per second of process CPU time
(``time.process_time``); no such reconcile may make a request (checked).

Create: N new bundles (no status, no ConfigMap, each with its own UID so nothing is
memoised yet), each reconciled once, as the first reconcile after a create: parse, render,
hash, the ConfigMap POST and the status PATCH. The client makes no HTTP exchange but does
the transport's JSON work on each request: it encodes the body as the transport does
(:func:`cbop.kube.codec.encode_body`) and decodes it back as the response
(:func:`cbop.kube.codec.decode_body`), the API server answering with the object.

Logging is configured as the operator's (JSON at info, to /dev/null). ``--profile FILE``
writes a cProfile of one no-op pass (and FILE.create of one create pass).

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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench.quietlog import quiet_operator_logging
from cbop.api import Reason, parse_spec
from cbop.configbundle import Action, Reconciler
from cbop.configbundle.decision import decide
from cbop.configbundle.status import compute_status
from cbop.kube.codec import decode_body, encode_body
from cbop.runtime.events import EventRecorder

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


def new_bundle(i: int, namespace: str = "bench", uid_prefix: str = "0") -> dict[str, Any]:
    """Bundle ``i`` as just created: 8 data keys of 100-200 bytes, one binaryData key of
    256 bytes, two labels and one annotation (about 2 KiB of content, like the operators
    bench's); no status. ``uid_prefix`` makes the UID (and so the memo keys) distinct.
    """
    name = f"b{i:06d}"
    spec = {
        "data": {f"key{k}": f"value-{i}-{k}-" + "x" * (100 + 10 * k) for k in range(8)},
        "binaryData": {"blob": base64.b64encode(bytes(range(256))).decode()},
        "labels": {"team": "bench", "tier": str(i % 3)},
        "annotations": {"owner": "bench@example.com"},
    }
    return {
        "apiVersion": "cbop.dev/v1beta1",
        "kind": "ConfigBundle",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"{uid_prefix:0>8}-0000-0000-0000-{i:012d}",
            "generation": 1,
            "resourceVersion": str(10_000 + 2 * i),
        },
        "spec": spec,
    }


def converged(i: int, namespace: str = "bench") -> tuple[dict[str, Any], dict[str, Any]]:
    """Bundle ``i`` (:func:`new_bundle`) with a Synced status and the ConfigMap cbop wrote."""
    bundle = new_bundle(i, namespace)
    name, uid = bundle["metadata"]["name"], bundle["metadata"]["uid"]
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


class EchoClient:
    """Answers each write with its own body, after the transport's JSON work on it.

    Counts the writes by verb; any other call fails the benchmark.
    """

    def __init__(self) -> None:
        self.writes: dict[str, int] = {}

    def _echo(self, verb: str, body: Any) -> dict[str, Any]:
        self.writes[verb] = self.writes.get(verb, 0) + 1
        payload = encode_body(body)
        assert payload is not None
        answer: dict[str, Any] = decode_body(payload)
        return answer

    def create(self, res: Any, namespace: str | None, body: Any, **_: Any) -> dict[str, Any]:
        return self._echo("create", body)

    def patch(
        self, res: Any, namespace: str | None, name: str, body: Any, **_: Any
    ) -> dict[str, Any]:
        return self._echo("patch", body)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a create reconcile called client.{name}")


def _profiled(path: str, work: Callable[[], object]) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    work()
    profiler.disable()
    profiler.dump_stats(path)
    pstats.Stats(path, stream=sys.stderr).sort_stats("cumulative").print_stats(25)


def _figures(count: int, cpu_s: float) -> dict[str, float]:
    return {
        "reconciles": count,
        "cpu_s": cpu_s,
        "per_cpu_s": count / cpu_s,
        "us_each": 1e6 * cpu_s / count,
    }


def run(bundles: int, passes: int, repeat: int, profile: str | None) -> dict[str, float]:
    """Time ``passes`` no-op reconciles of every key, best of ``repeat``; return the figures."""
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
        _profiled(profile, lambda: [reconciler.reconcile(key) for key in keys])
    return _figures(passes * len(keys), best)


def run_create(bundles: int, repeat: int, profile: str | None) -> dict[str, float]:
    """Time one create reconcile of each of ``bundles`` new bundles, best of ``repeat``."""

    def one_pass(round_: int) -> float:
        objects = [new_bundle(i, uid_prefix=str(round_)) for i in range(bundles)]
        client = EchoClient()
        reconciler = Reconciler(
            client=client,
            bundles=Lister(objects),
            configmaps=Lister([]),
            recorder=EventRecorder(client, component="cbop"),
            now=lambda: NOW,
        )
        keys = [f"bench/{b['metadata']['name']}" for b in objects]
        start = time.process_time()
        for key in keys:
            reconciler.reconcile(key)
        spent = time.process_time() - start
        assert client.writes == {"create": bundles, "patch": bundles}, client.writes
        return spent

    one_pass(0)  # warm-up
    best = min(one_pass(r + 1) for r in range(repeat))
    if profile:
        _profiled(profile + ".create", lambda: one_pass(repeat + 1))
    return _figures(bundles, best)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse flags, run, print a markdown table."""
    parser = argparse.ArgumentParser(prog="python -m bench.reconcile", description=__doc__)
    parser.add_argument("--bundles", type=int, default=1000, help="converged bundles (1,000)")
    parser.add_argument("--passes", type=int, default=5, help="reconciles of every key per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best counts")
    parser.add_argument("--profile", help="write a cProfile of one pass to this file")
    args = parser.parse_args(argv)
    quiet_operator_logging()
    got = run(args.bundles, args.passes, args.repeat, args.profile)
    created = run_create(args.bundles, args.repeat, args.profile)
    print(f"Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}")
    print()
    print(
        "| reconcile | bundles | reconciles | CPU s (best) | reconciles per CPU s "
        "| us per reconcile |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for what, figures in (("no-op", got), ("create", created)):
        print(
            f"| {what} | {args.bundles:,} | {figures['reconciles']:,.0f} "
            f"| {figures['cpu_s']:.3f} | {figures['per_cpu_s']:,.0f} | {figures['us_each']:.1f} |"
        )


if __name__ == "__main__":
    main()
