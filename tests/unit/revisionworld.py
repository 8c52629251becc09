"""A fake API server and a ConfigBundle reconciler with revisions, for the unit tests.

As the other act-layer tests: the reconcile is called directly, its caches synced from
the fake server's tracker between reconciles (the watch caught up), and the recorded
API actions compared with the expected ones. The caches of what names revisions
(pinned ReplicaSets, ControllerRevisions, pods, opted-in workloads) are filled from the
tracker too, through the same index functions and transforms cbop's informers use.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from cbop.api import content_hash
from cbop.api.revisions import revision_name
from cbop.configbundle import Reconciler
from cbop.informers import CONTROLLER_UID_INDEX, index_by_controller_uid
from cbop.kube import (
    CONFIGBUNDLES,
    CONFIGMAPS,
    CONTROLLERREVISIONS,
    DEPLOYMENTS,
    PODS,
    REPLICASETS,
)
from cbop.revisions.caches import (
    HISTORY_INDEXERS,
    POD_INDEXERS,
    READS_INDEX,
    REVISION_OF_INDEX,
    History,
    index_by_reads,
    index_by_revision_of,
    strip_history,
    strip_pod,
)
from cbop.revisions.model import ANNOTATION_REVISIONS, LABEL_PINNED, format_mapping
from cbop.revisions.policy import PolicyCheck
from cbop.runtime.events import EventRecorder
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import CacheLister, FakeKube, ObjectTracker
from cbop_testing.objects import bundle, workload

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
ON = {"enabled": True}
#: Seconds of the collection grace in these tests (shorter than the bundles' policy
#: recheck, which :meth:`World.settle` does not wait for).
GRACE = 30.0

Call = tuple[str, str, str]


def writes(kube: FakeKube) -> list[Call]:
    """The writes made, Events left out: (verb[/subresource], resource, name)."""
    return [
        (f"{a.verb}/{a.subresource}" if a.subresource else a.verb, a.resource, a.name or "")
        for a in kube.actions
        if a.verb not in ("get", "list") and a.resource != "events"
    ]


def rev(data: dict[str, str], name: str = "app") -> str:
    """The revision name of ``data`` under ConfigMap ``name``."""
    return revision_name(name, content_hash(data, {}))


def _pinned_lister(*, pods: bool = False) -> CacheLister:
    return CacheLister((), indexers={**HISTORY_INDEXERS, **(POD_INDEXERS if pods else {})})


class World:
    """A fake API server and one reconciler whose caches follow it.

    Args:
        spec: the bundle's spec.
        dry_run: a dry-run reconciler.
        check_policy: look at the pin policy (on the fake server).
        history: give the reconciler the caches of what names revisions (else it runs
            as ``cbop --once``).
        rollout: whether the rollout runs.
        listed: whether the history's caches have listed their collections (default:
            always).
        **kw: the bundle's metadata (:func:`cbop_testing.objects.bundle`).
    """

    def __init__(
        self,
        spec: dict[str, Any],
        *,
        dry_run: bool = False,
        check_policy: bool = False,
        history: bool = True,
        rollout: bool = True,
        listed: Callable[[], bool] = lambda: True,
        **kw: Any,
    ) -> None:
        # The server's clock (creationTimestamp), also the grace's: stepped by changes.
        self.clock = FakeClock(1_767_225_600.0)
        self.kube = FakeKube(ObjectTracker(now=self.clock.now))
        self.policy = PolicyCheck(self.kube, clock=self.clock) if check_policy else None
        self.kube.tracker.add(CONFIGBUNDLES, bundle(spec, **kw))
        self.bundles = CacheLister(())
        self.configmaps = CacheLister(
            (),
            indexers={
                CONTROLLER_UID_INDEX: index_by_controller_uid,
                REVISION_OF_INDEX: index_by_revision_of,
            },
        )
        self.replicasets = _pinned_lister()
        self.controllerrevisions = _pinned_lister()
        self.pods = _pinned_lister(pods=True)
        self.deployments = CacheLister(
            (),
            indexers={**HISTORY_INDEXERS, READS_INDEX: index_by_reads},
        )
        self.history = (
            History(
                replicasets=self.replicasets,
                controllerrevisions=self.controllerrevisions,
                pods=self.pods,
                workloads={"Deployment": self.deployments} if rollout else {},
                synced=listed,
            )
            if history
            else None
        )
        self.recorder = EventRecorder(self.kube, clock=lambda: NOW, level="all")
        self.reconciler = Reconciler(
            client=self.kube,
            bundles=self.bundles,
            configmaps=self.configmaps,
            recorder=self.recorder,
            now=lambda: NOW,
            dry_run=dry_run,
            history=self.history,
            pin_policy=self.policy,
            rollout=rollout,
            revision_grace=GRACE,
            clock=self.clock,
        )
        self.key = f"demo/{kw.get('name', 'app')}"

    def sync(self) -> None:
        """Make every cache hold what the server stores (pinned objects through the transforms)."""
        self.bundles.sync(self.kube.tracker, CONFIGBUNDLES)
        self.configmaps.sync(self.kube.tracker, CONFIGMAPS)
        for lister, resource, strip in (
            (self.replicasets, REPLICASETS, strip_history),
            (self.controllerrevisions, CONTROLLERREVISIONS, strip_history),
            (self.pods, PODS, strip_pod),
        ):
            pinned = [
                strip(dict(o))
                for o in self.kube.tracker.objects(resource)
                if (o["metadata"].get("labels") or {}).get(LABEL_PINNED) == "true"
            ]
            lister.indexer.replace(pinned, self.kube.tracker.resource_version)
        self.deployments.sync(self.kube.tracker, DEPLOYMENTS)

    def reconcile(self) -> list[Call]:
        """Sync the caches, reconcile once, return the writes made."""
        self.sync()
        self.kube.clear_actions()
        self.result = self.reconciler.reconcile(self.key)
        self.recorder.flush()
        return writes(self.kube)

    def settle(self) -> None:
        """Reconcile until a reconcile writes nothing and waits for no grace (at most 8 times).

        A reconcile that asks to be looked at again within the grace (a revision waiting
        it out) is followed, as the controller's requeue would, once the clock has
        stepped that far.
        """
        for _ in range(8):
            if self.reconcile():
                continue
            wait = self.result.requeue_after
            if wait is None or wait > GRACE or self.result.ready != "True":
                return
            self.clock.step(wait)
        raise AssertionError("the reconcile never settled")

    def bundle(self) -> dict[str, Any]:
        name = self.key.partition("/")[2]
        return self.kube.tracker.get(CONFIGBUNDLES, "demo", name)

    def set_spec(self, spec: dict[str, Any], *, seconds: float = GRACE) -> None:
        """Change the spec ``seconds`` after the last change (the grace, by default)."""
        self.clock.step(seconds)
        b = self.bundle()
        b["spec"] = spec
        b["metadata"]["generation"] += 1
        self.kube.tracker.add(CONFIGBUNDLES, b)

    def configmap(self, name: str) -> dict[str, Any]:
        return self.kube.tracker.get(CONFIGMAPS, "demo", name)

    def configmap_names(self) -> list[str]:
        return sorted(o["metadata"]["name"] for o in self.kube.tracker.objects(CONFIGMAPS))

    def condition(self, type_: str = "Pinned") -> dict[str, Any] | None:
        """The bundle's condition of ``type_``, or None."""
        for cond in self.bundle().get("status", {}).get("conditions") or ():
            if cond["type"] == type_:
                return dict(cond)
        return None

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        """The Events written, of ``reason`` when given (the recorder's sink flushed)."""
        assert self.recorder.flush(), "the Event sink did not drain"
        return [
            dict(a.body)
            for a in self.kube.actions
            if a.resource == "events"
            and a.verb == "create"
            and (reason is None or a.body["reason"] == reason)
        ]


def pinned_template(
    mapping: dict[str, str], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod template's metadata pinned to ``mapping`` (as the rollout writes it)."""
    return {
        "labels": {"app": "web", LABEL_PINNED: "true", **(labels or {})},
        "annotations": {ANNOTATION_REVISIONS: format_mapping(mapping)},
    }


def replicaset(name: str, mapping: dict[str, str], *, owner: str = "web") -> dict[str, Any]:
    """A Deployment's ReplicaSet whose template is pinned to ``mapping``."""
    template = pinned_template(mapping)
    return {
        "metadata": {
            "name": name,
            "namespace": "demo",
            "uid": f"uid-{name}",
            "labels": template["labels"],
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": owner,
                    "uid": f"uid-{owner}",
                    "controller": True,
                }
            ],
        },
        "spec": {"template": {"metadata": template, "spec": {"containers": [{"name": "app"}]}}},
    }


def pod(name: str, replicaset_name: str, mapping: dict[str, str], reads: str) -> dict[str, Any]:
    """A pod of ReplicaSet ``replicaset_name`` pinned to ``mapping``; its volume reads ``reads``."""
    template = pinned_template(mapping)
    return {
        "metadata": {
            "name": name,
            "namespace": "demo",
            "uid": f"uid-{name}",
            "labels": template["labels"],
            "annotations": template["annotations"],
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": replicaset_name,
                    "uid": f"uid-{replicaset_name}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {"name": "app", "image": "x", "env": [{"name": "A", "value": "secret"}]}
            ],
            "volumes": [{"name": "conf", "configMap": {"name": reads}}],
        },
    }


def deployment(mapping: dict[str, str] | None = None, reads: str = "app") -> dict[str, Any]:
    """The opted-in Deployment ``web`` reading ConfigMap ``reads``, pinned to ``mapping``."""
    out = workload("web", volumes=[reads])
    if mapping:
        out["spec"]["template"]["metadata"] = pinned_template(mapping)
    return out
