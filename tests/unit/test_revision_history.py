"""The pins and the history's owner references on revisions, on the fake API server.

docs/revisions.md: the rollout writes the pins (template digest -> revisions) before
the template annotation; each ReplicaSet or ControllerRevision whose template carries a
digest with pins becomes a non-controller owner of those revisions.
"""

from __future__ import annotations

from typing import Any

from cbop.api import content_hash
from cbop.api.revisions import (
    LABEL_REVISION_OF,
    PARAMS_NAME,
    parse_pins,
    pins_key,
    pins_value,
    revision_name,
)
from cbop.kube import CONFIGMAPS, CONTROLLERREVISIONS, DEPLOYMENTS, NAMESPACES, REPLICASETS
from cbop.rollout import (
    ANNOTATION_CONFIG_HASH,
    CONFIGMAP_INDEX,
    RolloutReconciler,
    index_by_configmap,
)
from cbop.rollout.decision import ManagedConfigMap
from cbop.rollout.history import (
    DIGEST_INDEX,
    HistoryReconciler,
    index_by_digest,
    pins_mapper,
    template_digest,
)
from cbop.rollout.pins import pins_for, write_pins
from cbop_testing.fakekube import CacheLister, FakeKube, ObjectTracker
from cbop_testing.objects import configmap, workload

DIGEST = "sha256:" + "ab" * 32


def revision(plain: str, data: dict[str, str], *, bundle: str = "app") -> dict[str, Any]:
    """A revision ConfigMap as the ConfigBundle controller writes it (owned by the bundle,
    not as its controller)."""
    digest = content_hash(data, {})
    cm = configmap(revision_name(plain, digest), data, bundle=bundle)
    cm["metadata"]["labels"][LABEL_REVISION_OF] = bundle
    cm["metadata"]["ownerReferences"][0]["controller"] = False
    cm["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = False
    cm["immutable"] = True
    return cm


def replicaset(name: str, digest: str, *, uid: str | None = None) -> dict[str, Any]:
    template = {"metadata": {"annotations": {ANNOTATION_CONFIG_HASH: digest}}, "spec": {}}
    return {
        "metadata": {"name": name, "namespace": "demo", "uid": uid or f"uid-{name}"},
        "spec": {"template": template},
    }


def controller_revision(name: str, digest: str) -> dict[str, Any]:
    template = {"metadata": {"annotations": {ANNOTATION_CONFIG_HASH: digest}}, "$patch": "replace"}
    return {
        "metadata": {"name": name, "namespace": "demo", "uid": f"uid-{name}"},
        "data": {"spec": {"template": template}},
        "revision": 1,
    }


class Fixture:
    def __init__(self) -> None:
        self.kube = FakeKube(ObjectTracker())
        self.kube.tracker.add(NAMESPACES, {"metadata": {"name": "demo"}})
        self.configmaps = CacheLister()
        self.history = CacheLister(indexers={DIGEST_INDEX: index_by_digest})

    def add_cm(self, cm: dict[str, Any]) -> dict[str, Any]:
        stored = self.kube.tracker.add(CONFIGMAPS, cm)
        self.sync()
        return stored

    def sync(self) -> None:
        self.configmaps.sync(self.kube.tracker, CONFIGMAPS)

    def pins(self, digest: str, pins: dict[str, str]) -> None:
        self.add_cm(
            {
                "metadata": {"name": PARAMS_NAME, "namespace": "demo"},
                "data": {pins_key(digest): pins_value(pins)},
            }
        )

    def reconciler(self, resource: Any = REPLICASETS) -> HistoryReconciler:
        return HistoryReconciler(
            resource=resource, client=self.kube, history=self.history, configmaps=self.configmaps
        )

    def owners(self, name: str) -> list[dict[str, Any]]:
        cm = self.kube.tracker.get(CONFIGMAPS, "demo", name)
        return list(cm["metadata"].get("ownerReferences") or [])


def test_pins_key_and_value_round_trip() -> None:
    assert pins_key(DIGEST) == "ab" * 20
    assert pins_key("md5:abc") == ""
    assert pins_key("sha256:xyz") == ""
    value = pins_value({"b": "b-2", "a": "a-1"})
    assert value == "a=a-1\nb=b-2\n"
    assert parse_pins(value) == {"a": "a-1", "b": "b-2"}
    assert parse_pins("junk\n=x\nc=\nd=d-1") == {"d": "d-1"}


def test_template_digest_of_replicaset_and_controller_revision() -> None:
    assert template_digest(replicaset("web-1", DIGEST)) == DIGEST
    assert template_digest(controller_revision("db-1", DIGEST)) == DIGEST
    assert template_digest({"metadata": {"name": "x"}, "spec": {}}) == ""
    assert index_by_digest(replicaset("web-1", DIGEST)) == ["demo/" + "ab" * 20]
    assert index_by_digest(replicaset("web-1", "")) == []


def test_replicaset_becomes_a_non_controller_owner_once() -> None:
    f = Fixture()
    rev = f.add_cm(revision("web-conf", {"k": "1"}))
    name = rev["metadata"]["name"]
    f.pins(DIGEST, {"web-conf": name})
    rs = replicaset("web-7d9", DIGEST)
    f.history.add(rs)
    f.kube.clear_actions()

    result = f.reconciler().reconcile("demo/web-7d9")

    assert result.owned == (name,)
    writes = f.kube.write_actions()
    assert [(a.verb, a.resource, a.name) for a in writes] == [("update", "configmaps", name)]
    owners = f.owners(name)
    assert owners[0]["kind"] == "ConfigBundle"  # the bundle's reference stays
    assert owners[1] == {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "web-7d9",
        "uid": "uid-web-7d9",
        "controller": False,
        "blockOwnerDeletion": False,
    }
    # Steady state: the cache shows the reference, nothing more is written.
    f.sync()
    f.kube.clear_actions()
    assert f.reconciler().reconcile("demo/web-7d9").owned == ()
    assert f.kube.write_actions() == []


def test_controller_revision_owns_too() -> None:
    f = Fixture()
    rev = f.add_cm(revision("db-conf", {"k": "1"}))
    name = rev["metadata"]["name"]
    f.pins(DIGEST, {"db-conf": name})
    f.history.add(controller_revision("db-5c4", DIGEST))

    f.reconciler(CONTROLLERREVISIONS).reconcile("demo/db-5c4")

    assert [o["kind"] for o in f.owners(name)] == ["ConfigBundle", "ControllerRevision"]


def test_no_pins_or_no_digest_or_not_a_revision_writes_nothing() -> None:
    f = Fixture()
    f.history.add(replicaset("web-1", DIGEST), replicaset("plain-1", ""))
    f.kube.clear_actions()
    assert f.reconciler().reconcile("demo/web-1").owned == ()  # no pins ConfigMap
    plain = f.add_cm(configmap("web-conf", {"k": "1"}, bundle="app"))
    # Pins naming a ConfigMap that is not a revision, and a revision that does not exist.
    f.pins(DIGEST, {"web-conf": plain["metadata"]["name"], "gone": "gone-0123456789"})
    f.kube.clear_actions()
    assert f.reconciler().reconcile("demo/web-1").owned == ()
    assert f.reconciler().reconcile("demo/plain-1").owned == ()
    assert f.reconciler().reconcile("demo/missing").owned == ()
    assert f.kube.write_actions() == []


def test_pins_mapper_wakes_the_entries_of_its_digests() -> None:
    f = Fixture()
    other = "sha256:" + "cd" * 32
    f.history.add(replicaset("web-1", DIGEST), replicaset("web-2", other), replicaset("x", ""))
    mapper = pins_mapper(f.history)
    pins = {"metadata": {"name": PARAMS_NAME, "namespace": "demo"}, "data": {pins_key(DIGEST): ""}}
    assert mapper(pins) == ["demo/web-1"]
    assert mapper({"metadata": {"name": "web-conf", "namespace": "demo"}, "data": {}}) == []
    elsewhere = {**pins, "metadata": {"name": PARAMS_NAME, "namespace": "prod"}}
    assert mapper(elsewhere) == []


def test_rollout_writes_the_pins_before_the_annotation() -> None:
    """A change of a bundle with revisions: the pins entry, then the apply; a bundle
    without revisions: the apply alone."""
    kube = FakeKube(ObjectTracker(write_managed_fields=True, namespace_lifecycle=True))
    kube.tracker.add(NAMESPACES, {"metadata": {"name": "demo"}})
    plain = configmap("web-conf", {"k": "2"}, bundle="app")
    rev = revision("web-conf", {"k": "2"})
    kube.tracker.add(CONFIGMAPS, plain)
    kube.tracker.add(CONFIGMAPS, rev)
    configmaps = CacheLister().sync(kube.tracker, CONFIGMAPS)
    workloads = CacheLister(indexers={CONFIGMAP_INDEX: index_by_configmap})
    kube.tracker.add(
        DEPLOYMENTS,
        workload("web", volumes=["web-conf"], annotation=DIGEST, baseline=DIGEST[7:47]),
    )
    workloads.sync(kube.tracker, DEPLOYMENTS)
    reconciler = RolloutReconciler(
        resource=DEPLOYMENTS, client=kube, workloads=workloads, configmaps=configmaps
    )
    kube.clear_actions()

    result = reconciler.reconcile("demo/web")

    assert result.written
    writes = [(a.verb, a.resource, a.name) for a in kube.write_actions()]
    assert writes == [("create", "configmaps", PARAMS_NAME), ("patch", "deployments", "web")]
    pins = kube.tracker.get(CONFIGMAPS, "demo", PARAMS_NAME)
    assert pins["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "cbop"}
    assert parse_pins(pins["data"][pins_key(result.digest)]) == {
        "web-conf": rev["metadata"]["name"]
    }
    # The same entry again (a RECORD, a retry) writes no pins once the cache has them.
    configmaps.sync(kube.tracker, CONFIGMAPS)
    managed = [ManagedConfigMap("web-conf", "app", content_hash({"k": "2"}, {}))]
    again = pins_for(configmaps, "demo", managed)
    assert again == {"web-conf": rev["metadata"]["name"]}
    assert write_pins(kube, configmaps, "demo", result.digest, again) is False
    # Another digest: a merge patch of its entry alone.
    kube.clear_actions()
    assert write_pins(kube, configmaps, "demo", "sha256:" + "ef" * 32, again) is True
    assert [(a.verb, a.body) for a in kube.write_actions()] == [
        ("patch", {"data": {"ef" * 20: pins_value(again)}})
    ]
    assert pins_key(result.digest) in kube.tracker.get(CONFIGMAPS, "demo", PARAMS_NAME)["data"]


def test_rollout_without_revisions_writes_no_pins() -> None:
    kube = FakeKube(ObjectTracker(write_managed_fields=True, namespace_lifecycle=True))
    kube.tracker.add(NAMESPACES, {"metadata": {"name": "demo"}})
    kube.tracker.add(CONFIGMAPS, configmap("web-conf", {"k": "2"}, bundle="app"))
    configmaps = CacheLister().sync(kube.tracker, CONFIGMAPS)
    workloads = CacheLister(indexers={CONFIGMAP_INDEX: index_by_configmap})
    kube.tracker.add(
        DEPLOYMENTS,
        workload("web", volumes=["web-conf"], annotation=DIGEST, baseline=DIGEST[7:47]),
    )
    workloads.sync(kube.tracker, DEPLOYMENTS)
    reconciler = RolloutReconciler(
        resource=DEPLOYMENTS, client=kube, workloads=workloads, configmaps=configmaps
    )
    kube.clear_actions()
    assert reconciler.reconcile("demo/web").written
    assert [a.resource for a in kube.write_actions()] == ["deployments"]


def test_reconcile_before_the_cache_shows_its_own_update_writes_nothing() -> None:
    """The watch event of the owner-reference update reaches the cache after the
    update's answer; a reconcile of the same entry in between (the ReplicaSet's status
    changed, the pins woke it) must not send the update again (it would be refused
    with 409, as the cached resourceVersion is the one before the update, and retried)."""
    f = Fixture()
    rev = f.add_cm(revision("web-conf", {"k": "1"}))
    name = rev["metadata"]["name"]
    f.pins(DIGEST, {"web-conf": name})
    f.history.add(replicaset("web-7d9", DIGEST))
    reconciler = f.reconciler()
    assert reconciler.reconcile("demo/web-7d9").owned == (name,)
    f.kube.clear_actions()

    # The cache still holds the revision as it was before the update.
    assert reconciler.reconcile("demo/web-7d9").owned == ()
    assert f.kube.write_actions() == []

    # Once the cache shows the update, still nothing; a second ReplicaSet of the same
    # template (a rollback's) then adds its own reference on top of the first.
    f.sync()
    assert reconciler.reconcile("demo/web-7d9").owned == ()
    f.history.add(replicaset("web-8e0", DIGEST))
    assert reconciler.reconcile("demo/web-8e0").owned == (name,)
    assert [o["kind"] for o in f.owners(name)] == ["ConfigBundle", "ReplicaSet", "ReplicaSet"]


def test_a_second_entry_before_the_cache_shows_the_first_keeps_both_references() -> None:
    """Two ReplicaSets reading one revision, reconciled before the cache shows the
    first one's update: the second update starts from what the first one wrote, so
    it is not refused and neither reference is lost."""
    f = Fixture()
    rev = f.add_cm(revision("web-conf", {"k": "1"}))
    name = rev["metadata"]["name"]
    f.pins(DIGEST, {"web-conf": name})
    f.history.add(replicaset("web-7d9", DIGEST), replicaset("web-8e0", DIGEST))
    reconciler = f.reconciler()
    assert reconciler.reconcile("demo/web-7d9").owned == (name,)
    f.kube.clear_actions()

    assert reconciler.reconcile("demo/web-8e0").owned == (name,)

    writes = f.kube.write_actions()
    assert [(a.verb, a.name) for a in writes] == [("update", name)]
    owners = [(o["kind"], o["name"]) for o in f.owners(name)]
    assert owners == [("ConfigBundle", "app"), ("ReplicaSet", "web-7d9"), ("ReplicaSet", "web-8e0")]
