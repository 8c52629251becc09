"""What cbop's caches hold at S11's end state with revisions on and off, per component.

Builds, in one process and without a cluster, the caches that differ between S11's
``on`` and ``off`` variants (1,000 bundles, 100 Deployments reading 10 bundles each,
``revisionHistoryLimit: 3``, ``replicas: 0``, ``keep: 2``), each object shaped as the
API server serves it and put into a cbop :class:`~cbop.informers.Indexer` one watch
event at a time, through the transform and with the index functions its informer has:

- **configmaps**: the managed-ConfigMap cache (:mod:`bench.revisioncache`'s objects:
  1,000 plain ConfigMaps and, ``on``, 4 revisions of each);
- **deployments**: the 100 opted-in Deployments (both variants; ``on``, their template
  carries the mapping annotation and the pinned label), with the rollout's and the
  history's index functions;
- **replicasets**: ``on``, the 4 pinned ReplicaSets of each Deployment, as
  kube-controller-manager writes them (the whole template, ``pod-template-hash``, the
  controller owner reference, status), through
  :func:`cbop.revisions.caches.strip_history`;
- **needed**: the keys of the collection's "last needed" record, one per revision.

The workload and history components are reported in three parts: the objects alone,
the parsed mappings of their templates (:func:`cbop.revisions.model.parse_mapping`'s
cache, which the index functions fill) and the index tables filed for them. Heap by
``tracemalloc`` after a full collection, MiB (counts that do not depend on the
machine's load); one fresh process per variant.

    PYTHONPATH=src .venv/bin/python -m bench.historycache
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import cachetools
import orjson

from bench.revisioncache import REPO, _indexer, mib, served
from cbop.api import content_hash
from cbop.api.revisions import revision_name
from cbop.informers import Indexer
from cbop.informers.reflector import strip_managed_fields
from cbop.revisions.caches import (
    HISTORY_INDEXERS,
    READS_INDEX,
    index_by_reads,
    strip_history,
)
from cbop.revisions.model import ANNOTATION_REVISIONS, LABEL_PINNED, format_mapping, mapping_of
from cbop.revisions.objects import strip_revision_content
from cbop.rollout import INDEXERS, LABEL_CONFIG_BASELINE, LABEL_ROLLOUT

VARIANTS = ("off", "on")
_NAMESPACES = 10
_PER_DEPLOYMENT = 10
_FILLER = "".join(f"setting-{i:02d}=value-{i:02d}\n" for i in range(20))
_TIME = "2026-12-07T10:00:00Z"


def _bundle(d: int, k: int) -> str:
    return f"d{d:03d}-b{k}"


def _revision(d: int, k: int, round_: int) -> str:
    name = _bundle(d, k)
    return revision_name(
        name, content_hash({"app.conf": f"bundle={name}\nround={round_}\n{_FILLER}"}, {})
    )


def _template(d: int, on: bool, round_: int) -> dict[str, Any]:
    labels = {"app": f"d{d:03d}"}
    annotations = {"cbop.dev/config-hash": f"{d:08x}{round_:056x}"}
    if on:
        labels[LABEL_PINNED] = "true"
        mapping = {_bundle(d, k): _revision(d, k, round_) for k in range(_PER_DEPLOYMENT)}
        annotations[ANNOTATION_REVISIONS] = format_mapping(mapping)
    return {
        "metadata": {"creationTimestamp": None, "labels": labels, "annotations": annotations},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.invalid/app:1",
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                    "volumeMounts": [
                        {"name": f"c{k}", "mountPath": f"/etc/app/{k}"}
                        for k in range(_PER_DEPLOYMENT)
                    ],
                }
            ],
            "volumes": [
                {"name": f"c{k}", "configMap": {"name": _bundle(d, k), "defaultMode": 420}}
                for k in range(_PER_DEPLOYMENT)
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "securityContext": {},
            "schedulerName": "default-scheduler",
        },
    }


def _meta(name: str, namespace: str, serial: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "uid": f"20000000-0000-4000-8000-{serial:012d}",
        "resourceVersion": str(500_000 + serial),
        "generation": 1,
        "creationTimestamp": _TIME,
        "managedFields": [
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "apps/v1",
                "time": _TIME,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:observedGeneration": {}, "f:replicas": {}}},
            }
        ],
        **extra,
    }


def deployments(on: bool, count: int, rounds: int) -> Iterator[dict[str, Any]]:
    """S11's Deployments as served at the end (their template at round ``rounds - 1``)."""
    for d in range(count):
        namespace = f"s11-on-{d % _NAMESPACES:02d}"
        labels = {LABEL_ROLLOUT: "true", LABEL_CONFIG_BASELINE: f"{d:040x}"}
        yield {
            "metadata": _meta(
                f"d{d:03d}",
                namespace,
                d,
                labels=labels,
                annotations={"deployment.kubernetes.io/revision": str(rounds)},
            ),
            "spec": {
                "replicas": 0,
                "revisionHistoryLimit": 3,
                "selector": {"matchLabels": {"app": f"d{d:03d}"}},
                "template": _template(d, on, rounds - 1),
                "strategy": {"type": "RollingUpdate"},
                "progressDeadlineSeconds": 600,
            },
            "status": {"observedGeneration": rounds, "conditions": []},
        }


def replicasets(count: int, rounds: int, history: int) -> Iterator[dict[str, Any]]:
    """The pinned ReplicaSets of S11's Deployments, as the replicaset controller writes them."""
    serial = 10_000
    for d in range(count):
        namespace = f"s11-on-{d % _NAMESPACES:02d}"
        for round_ in range(rounds - history - 1, rounds):
            serial += 1
            template = _template(d, True, round_)
            hash_ = f"{serial:010x}"[-10:]
            template["metadata"]["labels"]["pod-template-hash"] = hash_
            owner = {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": f"d{d:03d}",
                "uid": f"20000000-0000-4000-8000-{d:012d}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
            yield {
                "metadata": _meta(
                    f"d{d:03d}-{hash_}",
                    namespace,
                    serial,
                    labels=dict(template["metadata"]["labels"]),
                    annotations={
                        "deployment.kubernetes.io/desired-replicas": "0",
                        "deployment.kubernetes.io/max-replicas": "0",
                        "deployment.kubernetes.io/revision": str(round_ + 1),
                    },
                    ownerReferences=[owner],
                ),
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": dict(template["metadata"]["labels"])},
                    "template": template,
                },
                "status": {"replicas": 0, "observedGeneration": 1},
            }


def _events(objs: Iterator[dict[str, Any]], kind: str) -> list[bytes]:
    return [orjson.dumps({"type": "ADDED", "object": {"kind": kind, **o}}) for o in objs]


def _heap() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def _fill(
    payloads: list[bytes],
    transform: Callable[[dict[str, Any]], dict[str, Any]],
    indexers: Mapping[str, Callable[[Mapping[str, Any]], list[str]]],
) -> tuple[Indexer, int, int, int]:
    """Fill an indexer from watch events.

    Returns:
        The indexer, and the heap of the objects, of the parsed mappings their templates
        carry (:func:`cbop.revisions.model.parse_mapping`'s cache, which the index
        functions fill) and of the index tables, bytes.
    """
    start = _heap()
    objs = [transform(orjson.loads(p)["object"]) for p in payloads]
    payloads.clear()
    held = _heap() - start
    for obj in objs:
        mapping_of(obj)
    parsed = _heap() - start - held
    indexer = Indexer(dict(indexers), detect_mutations=False)
    for obj in objs:
        indexer.update(obj)
    del objs
    return indexer, held, parsed, _heap() - start - held - parsed


def child(variant: str, bundles: int, rounds: int) -> dict[str, Any]:
    """Build the caches of ``variant`` in this process; return heap bytes per component."""
    on = variant == "on"
    count = bundles // _PER_DEPLOYMENT
    inputs = {
        "configmaps": [orjson.dumps(o) for o in served(bundles, 4 if on else 0)],
        "deployments": _events(deployments(on, count, rounds), "Deployment"),
        "replicasets": _events(replicasets(count, rounds, 3), "ReplicaSet") if on else [],
    }
    gc.collect()
    tracemalloc.start()
    kept: list[object] = []
    out: dict[str, Any] = {}
    cm_indexer = _indexer()
    start = _heap()
    for p in inputs.pop("configmaps"):
        cm_indexer.update(strip_revision_content(orjson.loads(p)))
    out["configmaps"] = {"objects": len(cm_indexer.list()), "heap": _heap() - start}
    kept.append(cm_indexer)
    workload_indexers = {**INDEXERS, **HISTORY_INDEXERS, READS_INDEX: index_by_reads}
    for name, transform, indexers in (
        ("deployments", strip_managed_fields, workload_indexers),
        ("replicasets", strip_history, HISTORY_INDEXERS),
    ):
        payloads = inputs.pop(name)
        n = len(payloads)
        indexer, held, parsed, indexes = _fill(payloads, transform, indexers)
        kept.append(indexer)
        out[name] = {"objects": n, "heap": held, "parses": parsed, "indexes": indexes}
    start = _heap()
    needed: cachetools.LRUCache[str, float] = cachetools.LRUCache(100_000)
    now = time.monotonic()
    for cm in cm_indexer.list():
        meta = cm["metadata"]
        if "cbop.dev/revision-of" in (meta.get("labels") or {}):
            needed[f"{meta['namespace']}/{meta['name']}"] = now
    out["needed"] = {"objects": len(needed), "heap": _heap() - start}
    kept.append(needed)
    out["total"] = _heap()
    tracemalloc.stop()
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bundles", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=16, help="rollouts of each Deployment")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.bundles, args.rounds)))
        return
    results = {}
    for variant in VARIANTS:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.historycache",
                "--child",
                variant,
                "--bundles",
                str(args.bundles),
                "--rounds",
                str(args.rounds),
            ],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
        )
        results[variant] = json.loads(run.stdout.strip().splitlines()[-1])
    print(
        "| component | off: objects | off: heap MiB | on: objects | on: heap MiB | on - off MiB |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name in ("configmaps", "deployments", "replicasets", "needed"):
        for part in ("heap", "parses", "indexes"):
            off, on = results["off"].get(name, {}), results["on"].get(name, {})
            if part not in on:
                continue
            label = {"heap": name, "parses": f"{name}: parsed mappings"}.get(
                part, f"{name}: index tables"
            )
            print(
                f"| {label} | {off.get('objects', 0):,} | {mib(off.get(part, 0))} "
                f"| {on['objects']:,} | {mib(on[part])} | {mib(on[part] - off.get(part, 0))} |"
            )
    off_total, on_total = results["off"]["total"], results["on"]["total"]
    print(f"| total | | {mib(off_total)} | | {mib(on_total)} | {mib(on_total - off_total)} |")


if __name__ == "__main__":
    main()
