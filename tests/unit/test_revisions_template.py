"""The rollout's share of revisions: the mapping in the same apply, and when to pin once.

The rollout reconciler against the fake API server and CacheListers (as
tests/unit/test_rollout_reconcile.py): the managed-ConfigMap cache holds the plain
ConfigMap and the revisions of its contents, as the ConfigBundle controller makes them.
"""

from __future__ import annotations

import copy
from typing import Any

from cbop.api import content_hash
from cbop.api.revisions import LABEL_REVISION_OF, revision_name
from cbop.kube import DEPLOYMENTS, NAMESPACES
from cbop.revisions.legacy import PARAMS_NAME, pins_key
from cbop.revisions.model import (
    ANNOTATION_REVISIONS,
    LABEL_PINNED,
    LABEL_PINNED_BASELINE,
    mapping_of,
)
from cbop.rollout import (
    ANNOTATION_CONFIG_HASH,
    CONFIGMAP_INDEX,
    LABEL_CONFIG_BASELINE,
    Action,
    RolloutReconciler,
    config_digest,
    index_by_configmap,
)
from cbop.rollout.decision import ManagedObject
from cbop_testing.fakekube import CacheLister, FakeKube, FakeRecorder, ObjectTracker
from cbop_testing.objects import configmap, workload

V1, V2 = {"k": "1"}, {"k": "2"}


def revision(data: dict[str, str], plain: str = "web-conf") -> dict[str, Any]:
    """The revision of ``data`` as the ConfigBundle controller makes it."""
    name = revision_name(plain, content_hash(data, {}))
    return {
        "metadata": {
            "name": name,
            "namespace": "demo",
            "labels": {"app.kubernetes.io/managed-by": "cbop", LABEL_REVISION_OF: plain},
        },
        "data": data,
        "immutable": True,
    }


def digest(data: dict[str, str]) -> str:
    return config_digest([ManagedObject("web-conf", "web", content_hash(data, {}))])


class World:
    """The fake server, the caches, and the Deployment rollout reconciler."""

    def __init__(self, data: dict[str, str], *, revisions: bool = True) -> None:
        self.kube = FakeKube(ObjectTracker(write_managed_fields=True, namespace_lifecycle=True))
        self.kube.tracker.add(NAMESPACES, {"metadata": {"name": "demo"}})
        self.workloads = CacheLister(indexers={CONFIGMAP_INDEX: index_by_configmap})
        self.configmaps = CacheLister()
        self.recorder = FakeRecorder()
        self.reconciler = RolloutReconciler(
            resource=DEPLOYMENTS,
            client=self.kube,
            workloads=self.workloads,
            configmaps=self.configmaps,
            recorder=self.recorder,
        )
        self.content(data, revisions=revisions)

    def content(self, data: dict[str, str], *, revisions: bool = True) -> None:
        """The bundle's ConfigMap now holds ``data`` (and its revision, with revisions on)."""
        self.configmaps.add(configmap("web-conf", data, bundle="web"))
        if revisions:
            self.configmaps.add(revision(data))

    def seed(self, obj: dict[str, Any]) -> None:
        self.kube.tracker.add(DEPLOYMENTS, obj)
        self.sync()

    def sync(self) -> None:
        self.workloads.sync(self.kube.tracker, DEPLOYMENTS)

    def stored(self) -> dict[str, Any]:
        return self.kube.tracker.get(DEPLOYMENTS, "demo", "web")

    def reconcile(self) -> Action | None:
        self.kube.clear_actions()
        self.recorder.recorded.clear()
        result = self.reconciler.reconcile("demo/web")
        self.sync()
        return result.action

    def patches(self) -> list[Any]:
        return [a.body for a in self.kube.write_actions() if a.verb == "patch"]

    def events(self) -> list[tuple[str, str]]:
        return [(e.type, e.reason) for e in self.recorder.recorded]

    def replace(self, image: str = "app:1") -> None:
        """``kubectl replace`` of a manifest without cbop's keys: labels and template anew."""
        fresh = workload("web", volumes=["web-conf"])
        fresh["spec"]["template"]["spec"]["containers"][0]["image"] = image
        current = self.stored()
        fresh["metadata"] = {**current["metadata"], "labels": {"cbop.dev/rollout": "true"}}
        fresh["metadata"].pop("managedFields", None)
        self.kube.tracker.put(DEPLOYMENTS, fresh)
        self.sync()


def test_a_roll_writes_the_mapping_in_the_same_apply() -> None:
    w = World(V1)
    w.seed(workload("web", volumes=["web-conf"]))
    assert w.reconcile() is Action.APPLY  # first seen, revisions on: pinned once
    w.content(V2)
    assert w.reconcile() is Action.APPLY
    (body,) = w.patches()  # one request: the annotation, the mapping, the labels
    template = body["spec"]["template"]["metadata"]
    assert template["annotations"] == {
        ANNOTATION_CONFIG_HASH: digest(V2),
        ANNOTATION_REVISIONS: f"web-conf={revision(V2)['metadata']['name']}",
    }
    assert template["labels"] == {LABEL_PINNED: "true"}
    assert body["metadata"]["labels"] == {
        LABEL_CONFIG_BASELINE: digest(V2)[7:47],
        LABEL_PINNED_BASELINE: digest(V2)[7:47],
    }
    stored = w.stored()
    assert mapping_of(stored) == {"web-conf": revision(V2)["metadata"]["name"]}
    assert stored["spec"]["template"]["metadata"]["labels"] == {"app": "web", LABEL_PINNED: "true"}
    assert w.events() == [("Normal", "ConfigChanged")]


def test_opting_in_to_a_bundle_with_revisions_rolls_once_and_without_them_not_at_all() -> None:
    w = World(V1)
    w.seed(workload("web", volumes=["web-conf"]))
    assert w.reconcile() is Action.APPLY
    assert w.events() == [("Normal", "RevisionsPinned")]
    assert mapping_of(w.stored()) == {"web-conf": revision(V1)["metadata"]["name"]}
    assert w.reconcile() is Action.NONE  # once
    assert w.patches() == []
    # Without revisions, opting in is no change (case 17): the baseline alone.
    off = World(V1, revisions=False)
    off.seed(workload("web", volumes=["web-conf"]))
    assert off.reconcile() is Action.RECORD
    (body,) = off.patches()
    assert "spec" not in body


def test_revisions_turned_on_after_the_last_rollout_pin_the_template_once() -> None:
    w = World(V1, revisions=False)
    w.seed(workload("web", volumes=["web-conf"]))
    w.reconcile()
    w.content(V2, revisions=False)
    assert w.reconcile() is Action.APPLY  # rolled without revisions
    assert mapping_of(w.stored()) == {}
    w.content(V2)  # the bundle turns revisions on: the revision of V2 appears
    assert w.reconcile() is Action.APPLY
    assert w.events() == [("Normal", "RevisionsPinned")]
    stored = w.stored()
    template = stored["spec"]["template"]["metadata"]
    assert template["annotations"][ANNOTATION_CONFIG_HASH] == digest(V2)  # same content
    assert mapping_of(stored) == {"web-conf": revision(V2)["metadata"]["name"]}
    assert w.reconcile() is Action.NONE


def test_an_undo_to_a_template_without_the_mapping_is_not_rolled_forward() -> None:
    w = World(V1, revisions=False)
    w.seed(workload("web", volumes=["web-conf"]))
    w.reconcile()
    unpinned = copy.deepcopy(w.stored()["spec"]["template"])  # never rolled, no digest
    w.content(V2)
    w.reconcile()  # rolled to V2 with the mapping
    assert mapping_of(w.stored()) != {}
    # kubectl rollout undo: the old template back, the workload's labels untouched.
    undone = w.stored()
    undone["spec"]["template"] = unpinned
    w.kube.tracker.put(DEPLOYMENTS, undone)
    w.sync()
    assert w.reconcile() is Action.NONE
    assert w.patches() == []
    # And to a template rolled for older content (its own digest): left alone too.
    older = w.stored()
    older["spec"]["template"]["metadata"]["annotations"] = {ANNOTATION_CONFIG_HASH: digest(V1)}
    w.kube.tracker.put(DEPLOYMENTS, older)
    w.sync()
    assert w.reconcile() is Action.NONE
    assert w.patches() == []


def test_a_replaced_template_is_pinned_once_and_a_loop_is_reported_not_fought() -> None:
    w = World(V1)
    w.seed(workload("web", volumes=["web-conf"]))
    w.reconcile()
    w.content(V2)
    w.reconcile()
    # kubectl replace (or Replace=true, helm --force) without cbop's keys, a new image.
    w.replace("app:2")
    assert w.reconcile() is Action.APPLY
    assert w.events() == [("Normal", "RevisionsPinned")]
    assert mapping_of(w.stored()) == {"web-conf": revision(V2)["metadata"]["name"]}
    # The same manifest replaced again (a tool that replaces on every sync): not rolled
    # again; a Warning, once.
    w.replace("app:2")
    assert w.reconcile() is Action.RECORD  # the baseline label alone
    assert w.events() == [("Warning", "RevisionsNotPinned")]
    assert mapping_of(w.stored()) == {}
    (body,) = w.patches()
    assert "spec" not in body
    assert w.reconcile() is Action.NONE
    assert w.events() == []
    # A new manifest (another image): pinned again, once.
    w.replace("app:3")
    assert w.reconcile() is Action.APPLY
    assert mapping_of(w.stored()) == {"web-conf": revision(V2)["metadata"]["name"]}


def test_a_revision_that_does_not_exist_leaves_its_configmap_unpinned_and_rolls_anyway() -> None:
    w = World(V1)
    w.seed(workload("web", volumes=["web-conf", "other"]))
    w.configmaps.add(configmap("other", {"o": "1"}, bundle="other"))  # no revisions
    w.reconcile()
    w.content(V2, revisions=False)  # the revision of V2 was not made (a quota)
    assert w.reconcile() is Action.APPLY
    (body,) = w.patches()
    annotations = body["spec"]["template"]["metadata"]["annotations"]
    assert ANNOTATION_REVISIONS not in annotations  # the apply drops the mapping it owned
    stored = w.stored()
    assert mapping_of(stored) == {}
    assert LABEL_PINNED not in stored["spec"]["template"]["metadata"]["labels"]
    assert LABEL_PINNED_BASELINE not in stored["metadata"]["labels"]


def test_a_template_0_2_0_pinned_is_not_rolled_at_the_upgrade() -> None:
    w = World(V2)
    rolled = workload("web", volumes=["web-conf"], annotation=digest(V2), baseline=digest(V2)[7:47])
    w.configmaps.add(
        {
            "metadata": {"name": PARAMS_NAME, "namespace": "demo"},
            "data": {pins_key(digest(V2)): f"web-conf={revision(V2)['metadata']['name']}\n"},
        }
    )
    w.seed(rolled)
    assert w.reconcile() is Action.NONE
    assert w.patches() == []
    # A 0.2.0 workload never rolled (its pods pinned by Deployment.web): not rolled either.
    never = workload("web", volumes=["web-conf"], baseline=digest(V2)[7:47])
    w.configmaps.add(
        {
            "metadata": {"name": PARAMS_NAME, "namespace": "demo"},
            "data": {"Deployment.web": f"web-conf={revision(V2)['metadata']['name']}\n"},
        }
    )
    w.kube.tracker.put(
        DEPLOYMENTS,
        {**never, "metadata": {**w.stored()["metadata"], "labels": never["metadata"]["labels"]}},
    )
    w.sync()
    assert w.reconcile() is Action.NONE
    assert w.patches() == []


def test_a_paused_deployment_is_pinned_once_resumed() -> None:
    w = World(V1)
    w.seed(workload("web", volumes=["web-conf"], paused=True, baseline=digest(V1)[7:47]))
    assert w.reconcile() is Action.SKIP
    assert w.patches() == []
    assert w.events() == [("Normal", "RolloutPaused")]
