"""The managed-ConfigMap cache holding S11's revisions: memory with and without their content.

Builds S11's end state in one process, without a cluster: ``--bundles`` (1,000) plain
ConfigMaps and ``--revisions`` (4) revisions of each (``keep: 2`` with
``revisionHistoryLimit: 3``), each as the API server serves it (compact JSON, with the
``managedFields`` entry of cbop's create), the content S11's bundles have. Each variant
fills a fresh cbop :class:`~cbop.informers.Indexer` with the managed-ConfigMap
informer's index functions through that informer's transform, in a new process:

- **listed**: one LIST body decoded by :func:`cbop.kube.jsonstream.decode_list`, the
  transform as its item hook (what the reflector does on a relist or at start);
- **watched**: one ``ADDED`` event per object, each decoded by ``orjson.loads`` and
  transformed (how revisions made after the start reach the cache).

Transforms: ``whole`` is the default (:func:`cbop.informers.strip_managed_fields`),
``stripped`` the managed-ConfigMap informer's
(:func:`cbop.revisions.objects.strip_revision_content`). Reported: the Python heap the
cache holds (``tracemalloc``, after a full collection, the body and events freed) and
the growth of the process's RSS from before the build, in MiB.

    PYTHONPATH=src .venv/bin/python -m bench.revisioncache
    PYTHONPATH=src .venv/bin/python -m bench.revisioncache --bundles 100 --revisions 4
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from cbop.api import ANNOTATION_CONTENT_HASH, content_hash
from cbop.api.revisions import revision_name
from cbop.informers import CONTROLLER_UID_INDEX, Indexer, index_by_controller_uid
from cbop.informers.reflector import Transform, strip_managed_fields
from cbop.kube.jsonstream import decode_list
from cbop.revisions.caches import REVISION_OF_INDEX, index_by_revision_of
from cbop.revisions.objects import revision_body, strip_revision_content

REPO = Path(__file__).resolve().parents[1]
TRANSFORMS: dict[str, Transform] = {
    "whole": strip_managed_fields,
    "stripped": strip_revision_content,
}
MODES = ("listed", "watched")
_CHUNK = 2048
#: S11's bundle content (bench/operators/scenarios/revisions.py), without importing it.
_FILLER = "".join(f"setting-{i:02d}=value-{i:02d}\n" for i in range(20))
_NAMESPACES = 10


@dataclass(frozen=True)
class _Desired:
    """The content of one bundle round (the :class:`cbop.revisions.objects.Content` shape)."""

    namespace: str
    name: str
    data: dict[str, str]
    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)
    binary_data: dict[str, bytes] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        return content_hash(self.data, {})


def _managed_fields(revision: bool) -> list[dict[str, Any]]:
    fields: dict[str, Any] = {
        "f:data": {".": {}, "f:app.conf": {}},
        "f:metadata": {
            "f:annotations": {".": {}, f"f:{ANNOTATION_CONTENT_HASH}": {}},
            "f:labels": {
                ".": {},
                "f:app.kubernetes.io/managed-by": {},
                "f:cbop.dev/bundle": {},
                **({"f:cbop.dev/revision-of": {}} if revision else {}),
            },
            "f:ownerReferences": {".": {}, 'k:{"uid":"..."}': {}},
        },
    }
    if revision:
        fields["f:immutable"] = {}
    return [
        {
            "manager": "cbop",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-12-07T10:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }
    ]


def served(bundles: int, revisions: int) -> Iterator[dict[str, Any]]:
    """S11's managed ConfigMaps as the API server serves them: plain ones and revisions."""
    serial = 0
    for b in range(bundles):
        namespace = f"s11-on-{b % _NAMESPACES:02d}"
        name = f"d{b // 10:03d}-b{b % 10}"
        uid = f"00000000-0000-4000-8000-{b:012d}"
        bundle = {"metadata": {"name": name, "namespace": namespace, "uid": uid}}
        labels = {"app.kubernetes.io/managed-by": "cbop", "cbop.dev/bundle": name}
        for r in range(revisions + 1):
            serial += 1
            desired = _Desired(
                namespace,
                name,
                {"app.conf": f"bundle={name}\nround={r}\n{_FILLER}"},
                labels,
                {ANNOTATION_CONTENT_HASH: ""},
            )
            hash_ = desired.content_hash
            desired.annotations[ANNOTATION_CONTENT_HASH] = hash_
            if r < revisions:
                obj = revision_body(bundle, desired, revision_name(name, hash_), name)
            else:  # the plain ConfigMap, controlled by its bundle
                ref = {
                    **revision_body(bundle, desired, name, name)["metadata"]["ownerReferences"][0]
                }
                ref.update(controller=True, blockOwnerDeletion=True)
                obj = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": name,
                        "namespace": namespace,
                        "labels": dict(labels),
                        "annotations": {ANNOTATION_CONTENT_HASH: hash_},
                        "ownerReferences": [ref],
                    },
                    "data": dict(desired.data),
                }
            meta = obj["metadata"]
            meta["uid"] = f"10000000-0000-4000-8000-{serial:012d}"
            meta["resourceVersion"] = str(100_000 + serial)
            meta["creationTimestamp"] = "2026-12-07T10:00:00Z"
            meta["managedFields"] = _managed_fields(r < revisions)
            obj.pop("apiVersion", None)
            obj.pop("kind", None)
            yield obj


def _indexer() -> Indexer:
    return Indexer(
        {CONTROLLER_UID_INDEX: index_by_controller_uid, REVISION_OF_INDEX: index_by_revision_of},
        detect_mutations=False,
    )


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def child(mode: str, transform_name: str, bundles: int, revisions: int) -> dict[str, Any]:
    """Build the cache in this process; return its heap and RSS growth, bytes."""
    transform = TRANSFORMS[transform_name]
    objects = list(served(bundles, revisions))
    if mode == "listed":
        payloads: list[bytes] = [
            json.dumps({"kind": "ConfigMapList", "items": objects}, separators=(",", ":")).encode()
        ]
    else:
        payloads = [
            orjson.dumps({"type": "ADDED", "object": {"kind": "ConfigMap", **o}}) for o in objects
        ]
    del objects
    gc.collect()
    rss0 = _rss_kib()
    tracemalloc.start()
    indexer = _indexer()
    prepare: Callable[[dict[str, Any]], dict[str, Any]] = transform
    if mode == "listed":
        body = payloads.pop()
        chunks = (body[i : i + _CHUNK] for i in range(0, len(body), _CHUNK))
        listed = decode_list(chunks, prepare)
        del body
        indexer.replace(listed["items"], "1")
        count = len(listed["items"])
        del listed
    else:
        count = 0
        while payloads:
            event = orjson.loads(payloads.pop())
            indexer.update(prepare(event["object"]))
            count += 1
    del payloads
    gc.collect()
    heap, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    gc.collect()
    rss = (_rss_kib() - rss0) * 1024
    with_data = sum(1 for o in indexer.list() if "data" in o)
    return {"objects": count, "with_data": with_data, "heap": heap, "rss": rss}


def run_child(mode: str, transform: str, bundles: int, revisions: int) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.revisioncache",
            "--child",
            mode,
            transform,
            "--bundles",
            str(bundles),
            "--revisions",
            str(revisions),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def mib(n: float) -> str:
    return f"{n / (1 << 20):.1f}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bundles", type=int, default=1000, help="plain ConfigMaps")
    parser.add_argument("--revisions", type=int, default=4, help="revisions of each")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "TRANSFORM"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.bundles, args.revisions)))
        return
    print(
        f"{args.bundles:,} plain ConfigMaps and {args.bundles * args.revisions:,} revisions "
        "(S11's end state), one fresh process per cell\n"
    )
    print("| cache filled | transform | objects | with data | heap MiB | RSS growth MiB |")
    print("|---|---|---:|---:|---:|---:|")
    for mode in MODES:
        for name in TRANSFORMS:
            r = run_child(mode, name, args.bundles, args.revisions)
            print(
                f"| {mode} | {name} | {r['objects']:,} | {r['with_data']:,} "
                f"| {mib(r['heap'])} | {mib(r['rss'])} |"
            )


if __name__ == "__main__":
    main()
