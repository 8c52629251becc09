"""Decoding a LIST body and watch events: ``orjson`` against the standard ``json`` module.

Builds a LIST body of N converged ConfigBundles as the API server sends it (compact JSON,
each item with two ``managedFields`` entries) and the matching watch events, then
measures, best of ``--repeat`` runs of CPU time:

- **list**: :func:`cbop.kube.jsonstream.decode_list` over the body in 2 KiB chunks, with
  the informer's transform (``strip_managed_fields``), its batches decoded by ``orjson``
  (what the reflector does) and, as the baseline, by ``json.loads``; and the memory the
  decoded list holds (``tracemalloc``, after a full collection);
- **watch**: one ``orjson.loads`` per event and the transform, with and without
  :func:`cbop.kube.jsonstream.intern_keys` (the reflector no longer interns: ``orjson``'s
  key cache shares most keys).

Ratios are against the baseline measured in the same run.

    PYTHONPATH=src .venv/bin/python -m bench.listdecode              # N = 10,000
    PYTHONPATH=src .venv/bin/python -m bench.listdecode --bundles 30000
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson

from bench.reconcile import converged
from cbop.informers.informer import strip_managed_fields
from cbop.kube import jsonstream
from cbop.kube.jsonstream import decode_list, intern_keys

_CHUNK = 2048


def served(i: int) -> dict[str, Any]:
    """Converged bundle ``i`` as the API server serves it (with ``managedFields``)."""
    bundle, _ = converged(i)
    bundle["metadata"]["managedFields"] = [
        {
            "manager": "kubectl",
            "operation": "Update",
            "apiVersion": "cbop.dev/v1beta1",
            "time": "2026-12-03T10:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {".": {}, "f:data": {".": {}, "f:a": {}}}},
        },
        {
            "manager": "cbop",
            "operation": "Update",
            "apiVersion": "cbop.dev/v1beta1",
            "time": "2026-12-03T10:00:01Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {".": {}, "f:conditions": {}}},
            "subresource": "status",
        },
    ]
    return bundle


def _chunks(body: bytes) -> Iterator[bytes]:
    for start in range(0, len(body), _CHUNK):
        yield body[start : start + _CHUNK]


def _best(work: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best


def _held_mib(work: Callable[[], object]) -> float:
    gc.collect()
    tracemalloc.start()
    kept = work()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return held / 2**20


def run(bundles: int, repeat: int) -> dict[str, float]:
    """Measure both decoders on ``bundles`` objects; return the figures (seconds, MiB)."""
    items = [served(i) for i in range(bundles)]
    body = orjson.dumps(
        {"kind": "ConfigBundleList", "metadata": {"resourceVersion": "1"}, "items": items}
    )
    events = [orjson.dumps({"type": "MODIFIED", "object": item}) for item in items]
    del items

    def listed() -> object:
        return decode_list(_chunks(body), strip_managed_fields)

    def watched(intern: bool) -> list[Any]:
        out = []
        for event in events:
            obj = strip_managed_fields(orjson.loads(event)["object"])
            out.append(intern_keys(obj) if intern else obj)
        return out

    figures: dict[str, float] = {"bundles": bundles, "list_mib_body": len(body) / 2**20}
    original = jsonstream._load_batch
    try:
        for name, loader in (("json", json.loads), ("orjson", orjson.loads)):
            jsonstream._load_batch = loader
            figures[f"list_{name}_s"] = _best(listed, repeat)
            figures[f"list_{name}_mib"] = _held_mib(listed)
    finally:
        jsonstream._load_batch = original
    for name, intern in (("interned", True), ("orjson_keys", False)):
        figures[f"watch_{name}_s"] = _best(functools.partial(watched, intern), repeat)
        figures[f"watch_{name}_mib"] = _held_mib(functools.partial(watched, intern))
    return figures


def report(f: dict[str, float]) -> str:
    """Markdown lines for :func:`run`'s figures."""
    n = int(f["bundles"])
    return "\n".join(
        [
            f"N = {n:,} ConfigBundles, list body {f['list_mib_body']:.1f} MiB",
            "",
            "| | baseline | now | ratio |",
            "|---|---:|---:|---:|",
            f"| list decode CPU s (json.loads batches / orjson) | {f['list_json_s']:.3f} | "
            f"{f['list_orjson_s']:.3f} | {f['list_orjson_s'] / f['list_json_s']:.2f}x |",
            f"| list held MiB | {f['list_json_mib']:.1f} | {f['list_orjson_mib']:.1f} | "
            f"{f['list_orjson_mib'] / f['list_json_mib']:.2f}x |",
            f"| watch events CPU s (keys interned / orjson's key cache) | "
            f"{f['watch_interned_s']:.3f} | {f['watch_orjson_keys_s']:.3f} | "
            f"{f['watch_orjson_keys_s'] / f['watch_interned_s']:.2f}x |",
            f"| watch objects held MiB | {f['watch_interned_mib']:.1f} | "
            f"{f['watch_orjson_keys_mib']:.1f} | "
            f"{f['watch_orjson_keys_mib'] / f['watch_interned_mib']:.2f}x |",
        ]
    )


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m bench.listdecode``: print the comparison as Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bundles", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print(report(run(args.bundles, args.repeat)))


if __name__ == "__main__":
    main()
