"""The no-op reconcile of a bundle with revisions and a long pinned history, in process.

S12's shape for one namespace (``bench/operators``, S12): ``--bundles`` (10)
ConfigBundles with ``spec.revisions`` on, read by ``--workloads`` (100) opted-in
Deployments whose templates read every bundle's ConfigMap. The first bundle has
``--revisions`` (11) revisions; each Deployment has one pinned ReplicaSet per revision
of it (1,100 at the defaults: 10 of history and the current one), each naming the
current revisions of the other bundles, and one pinned pod of its current template.
Caches are filled through the index functions and transforms cbop's informers use
(``cbop_testing.fakekube.CacheLister``), the bundles converged on the fake API server
(``cbop_testing.fakekube``), then the first bundle is reconciled ``--passes`` times, as
the events of a rollout's ReplicaSets and pods wake it: each such reconcile finds
nothing to do (checked: no request).

Reported: process CPU milliseconds per reconcile (``time.process_time``, best of
``--repeat``), and per reconcile the calls of
:func:`cbop.revisions.model.mapping_of` (a holder's mapping read) made by the
revision checks. ``--profile FILE`` writes a cProfile of one series.

    PYTHONPATH=src .venv/bin/python -m bench.revisioncheck
    PYTHONPATH=src .venv/bin/python -m bench.revisioncheck --profile /tmp/r.prof
    PYTHONPATH=/tmp/old/src .venv/bin/python -m bench.revisioncheck  # an older tree
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import pstats
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from bench.quietlog import quiet_operator_logging
from cbop.api import content_hash
from cbop.api.revisions import revision_name
from cbop.configbundle import Reconciler
from cbop.informers import CONTROLLER_UID_INDEX, index_by_controller_uid
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS
from cbop.revisions import bundle as bundle_module
from cbop.revisions import caches, model, verify
from cbop.revisions.caches import (
    READS_INDEX,
    REVISION_OF_INDEX,
    History,
    strip_history,
    strip_pod,
)
from cbop.revisions.model import ANNOTATION_REVISIONS, LABEL_PINNED, format_mapping
from cbop.runtime.events import EventRecorder
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import CacheLister, FakeKube, ObjectTracker
from cbop_testing.objects import bundle, workload

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
NS = "s12"


#: The history caches' indexes (a tree before HISTORY_INDEXERS: the two it had), so
#: that the same script runs on an older ``src`` (``PYTHONPATH``).
_INDEXERS: Mapping[str, Callable[[Mapping[str, Any]], list[str]]] = getattr(
    caches,
    "HISTORY_INDEXERS",
    {caches.REVISION_INDEX: caches.index_by_revision, caches.PLAIN_INDEX: caches.index_by_plain},
)
_POD_INDEXERS: Mapping[str, Callable[[Mapping[str, Any]], list[str]]] = getattr(
    caches, "POD_INDEXERS", {}
)


def _pinned_lister(**extra: Callable[[Mapping[str, Any]], list[str]]) -> CacheLister:
    return CacheLister((), indexers={**_INDEXERS, **extra})


def _template(mapping: dict[str, str]) -> dict[str, Any]:
    return {
        "labels": {"app": "web", LABEL_PINNED: "true"},
        "annotations": {ANNOTATION_REVISIONS: format_mapping(mapping)},
    }


def _owned(name: str, owner_kind: str, owner: str, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "resourceVersion": "1",
        "labels": template["labels"],
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": owner_kind,
                "name": owner,
                "uid": f"uid-{owner}",
                "controller": True,
            }
        ],
    }


class S12World:
    """The fake API server, the caches and the reconciler of the scenario."""

    def __init__(self, bundles: int, workloads: int, revisions: int) -> None:
        self.clock = FakeClock(1_767_225_600.0)
        self.kube = FakeKube(ObjectTracker(now=self.clock.now))
        self.names = [f"conf-{i}" for i in range(bundles)]
        for i, name in enumerate(self.names):
            obj = bundle({"data": {"v": "0"}, "revisions": {"enabled": True}}, name=name)
            obj["metadata"]["namespace"] = NS
            obj["metadata"]["uid"] = f"uid-bundle-{i}"
            self.kube.tracker.add(CONFIGBUNDLES, obj)
        self.bundles = CacheLister(())
        self.configmaps = CacheLister(
            (),
            indexers={
                CONTROLLER_UID_INDEX: index_by_controller_uid,
                REVISION_OF_INDEX: caches.index_by_revision_of,
            },
        )
        self.replicasets = _pinned_lister()
        self.controllerrevisions = _pinned_lister()
        self.pods = _pinned_lister(**_POD_INDEXERS)
        self.deployments = CacheLister(
            (), indexers={**_INDEXERS, READS_INDEX: caches.index_by_reads}
        )
        history = History(
            replicasets=self.replicasets,
            controllerrevisions=self.controllerrevisions,
            pods=self.pods,
            workloads={"Deployment": self.deployments},
        )
        self.recorder = EventRecorder(self.kube, clock=lambda: NOW, level="all")
        self.reconciler = Reconciler(
            client=self.kube,
            bundles=self.bundles,
            configmaps=self.configmaps,
            recorder=self.recorder,
            now=lambda: NOW,
            history=history,
            rollout=True,
            clock=self.clock,
        )
        self._settle_all()
        # The first bundle's revisions: ``revisions`` contents, none collected (the
        # clock never passes the grace).
        first = self.names[0]
        self.revisions = [revision_name(first, content_hash({"v": "0"}, {}))]
        for v in range(1, revisions):
            obj = self.kube.tracker.get(CONFIGBUNDLES, NS, first)
            obj["spec"] = {"data": {"v": str(v)}, "revisions": {"enabled": True}}
            obj["metadata"]["generation"] += 1
            self.kube.tracker.add(CONFIGBUNDLES, obj)
            self._settle(first)
            self.revisions.append(revision_name(first, content_hash({"v": str(v)}, {})))
        current = {n: revision_name(n, content_hash({"v": "0"}, {})) for n in self.names}
        for d in range(workloads):
            dep = f"web-{d}"
            mapping = {**current, first: self.revisions[-1]}
            deployment = workload(dep, volumes=self.names, namespace=NS)
            deployment["spec"]["template"]["metadata"] = _template(mapping)
            self.deployments.add(deployment)
            for j, revision in enumerate(self.revisions):
                template = _template({**current, first: revision})
                self.replicasets.add(
                    strip_history(
                        {
                            "metadata": _owned(f"{dep}-{j}", "Deployment", dep, template),
                            "spec": {"template": {"metadata": template}},
                        }
                    )
                )
            template = _template(mapping)
            pod_meta = _owned(
                f"{dep}-pod", "ReplicaSet", f"{dep}-{len(self.revisions) - 1}", template
            )
            pod_meta["annotations"] = template["annotations"]
            volumes = [{"name": n, "configMap": {"name": r}} for n, r in mapping.items()]
            self.pods.add(
                strip_pod({"metadata": pod_meta, "spec": {"containers": [], "volumes": volumes}})
            )
        self._settle_all()

    def _sync(self) -> None:
        self.bundles.sync(self.kube.tracker, CONFIGBUNDLES)
        self.configmaps.sync(self.kube.tracker, CONFIGMAPS)

    def _settle(self, name: str) -> None:
        for _ in range(8):
            self._sync()
            self.kube.clear_actions()
            self.reconciler.reconcile(f"{NS}/{name}")
            self.recorder.flush()
            if not [a for a in self.kube.actions if a.verb not in ("get", "list")]:
                return
        raise AssertionError(f"bundle {name} never settled")

    def _settle_all(self) -> None:
        for name in self.names:
            self._settle(name)

    def holders(self) -> int:
        return len(self.replicasets) + len(self.pods) + len(self.deployments)


def _series(world: S12World, passes: int) -> float:
    key = f"{NS}/{world.names[0]}"
    world.kube.clear_actions()
    start = time.process_time()
    for _ in range(passes):
        world.reconciler.reconcile(key)
    spent = time.process_time() - start
    if world.kube.actions:
        raise AssertionError(f"a no-op reconcile made requests: {world.kube.actions[:3]}")
    return spent


def _count_mapping_reads(world: S12World) -> int:
    calls = [0]
    real = model.mapping_of

    def counted(obj: Mapping[str, Any]) -> dict[str, str]:
        calls[0] += 1
        return real(obj)

    patched = [m for m in (bundle_module, verify, caches) if hasattr(m, "mapping_of")]
    for module in patched:
        setattr(module, "mapping_of", counted)  # noqa: B010 - the bench's counter
    try:
        _series(world, 1)
    finally:
        for module in patched:
            setattr(module, "mapping_of", real)  # noqa: B010
    return calls[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundles", type=int, default=10)
    parser.add_argument("--workloads", type=int, default=100)
    parser.add_argument("--revisions", type=int, default=11)
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", metavar="FILE")
    args = parser.parse_args(argv)
    quiet_operator_logging()
    world = S12World(args.bundles, args.workloads, args.revisions)
    print(
        f"{args.bundles} bundles, {args.workloads} Deployments, {world.holders()} holders "
        f"({len(world.replicasets)} ReplicaSets, {len(world.pods)} pods) naming "
        f"{world.names[0]}, {len(world.revisions)} revisions of it"
    )
    best = min(_series(world, args.passes) for _ in range(args.repeat))
    print(f"CPU per no-op reconcile: {best / args.passes * 1000:.3f} ms")
    print(f"mapping_of calls per reconcile: {_count_mapping_reads(world)}")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(_series, world, args.passes)
        profiler.dump_stats(args.profile)
        pstats.Stats(args.profile, stream=sys.stdout).sort_stats("cumulative").print_stats(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
