"""The ClusterConfigBundle reconciler's act layer: the decision performed against the fake
API server (as sample-controller's tests do), with caches the test fills and a fake clock."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from cbop.clusterbundle.reconcile import (
    CLUSTER_BUNDLE_INDEX,
    ClusterBundleReconciler,
    index_by_cluster_bundle,
)
from cbop.kube import CLUSTERCONFIGBUNDLES, CONFIGBUNDLES, NAMESPACES, ApiError
from cbop.runtime import Requeue
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import CacheLister, FakeKube, FakeRecorder, ObjectTracker, errors, fail

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
LABEL = {"ca": "yes"}


def ccb(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": CLUSTERCONFIGBUNDLES.api_version,
        "kind": "ClusterConfigBundle",
        "metadata": {
            "name": "ca",
            "uid": "ccb-uid",
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"namespaceSelector": {"matchLabels": LABEL}, "template": {"data": {"a": "1"}}}
        | spec,
    }


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": LABEL if labels is None else labels}}


class World:
    """A FakeKube holding the cluster bundle and the namespaces, the reconciler's caches
    filled from it, and a FakeRecorder for the Events."""

    def __init__(self, *namespaces: dict[str, Any]) -> None:
        self.clock = FakeClock(start=1000.0)
        self.kube = FakeKube(ObjectTracker(namespace_lifecycle=True))
        self.kube.tracker.add(CLUSTERCONFIGBUNDLES, ccb())
        for ns in namespaces:
            self.kube.tracker.add(NAMESPACES, ns)
        self.recorder = FakeRecorder()
        self.cluster_bundles = CacheLister().sync(self.kube.tracker, CLUSTERCONFIGBUNDLES)
        self.namespaces = CacheLister().sync(self.kube.tracker, NAMESPACES)
        self.bundles = CacheLister(indexers={CLUSTER_BUNDLE_INDEX: index_by_cluster_bundle}).sync(
            self.kube.tracker, CONFIGBUNDLES
        )
        self.reconciler = ClusterBundleReconciler(
            client=self.kube,
            cluster_bundles=self.cluster_bundles,
            namespaces=self.namespaces,
            bundles=self.bundles,
            recorder=self.recorder,
            monotonic=self.clock.now,
            now=lambda: NOW,
        )

    def refuse(self, namespace: str, error: ApiError) -> None:
        """Answer creates in ``namespace`` with ``error`` (an admission refusal)."""
        self.kube.prepend_reactor(
            "create", "configbundles", fail(error, when=lambda a: a.namespace == namespace)
        )

    def writes(self) -> list[tuple[str, str, str | None, str | None]]:
        """The writes sent since the last call: (verb[/subresource], plural, namespace, name)."""
        out = [
            (
                f"{a.verb}/{a.subresource}" if a.subresource else a.verb,
                a.resource,
                a.namespace,
                a.name,
            )
            for a in self.kube.write_actions()
        ]
        self.kube.clear_actions()
        return out

    def status_bodies(self) -> list[dict[str, Any]]:
        """The bodies of the status writes sent."""
        return [
            a.body for a in self.kube.actions if a.matches("update", "clusterconfigbundles/status")
        ]

    def events(self) -> list[tuple[str, str]]:
        """The Events recorded: (reason, message)."""
        return [(e.reason, e.message) for e in self.recorder.recorded]


def test_stamps_are_created_the_status_written_and_then_nothing() -> None:
    world = World(namespace("a"), namespace("b"), namespace("c", {}))
    done = world.reconciler.reconcile("ca")
    *creates, status = world.writes()  # the creates go out in parallel, then the status
    assert sorted(creates) == [
        ("create", "configbundles", "a", "ca"),
        ("create", "configbundles", "b", "ca"),
    ]
    assert status == ("update/status", "clusterconfigbundles", None, "ca")
    assert done.writes == 2
    assert done.status_written
    assert sorted(
        (b["metadata"]["namespace"], b["metadata"]["name"])
        for b in world.kube.tracker.objects(CONFIGBUNDLES)
    ) == [("a", "ca"), ("b", "ca")]
    assert sorted(world.events()) == [
        ("NamespaceServed", "serving namespace a"),
        ("NamespaceServed", "serving namespace b"),
    ]
    # Before the caches show them: the created stamps and the status are remembered, so
    # a second reconcile writes nothing.
    world.clock.step(5)
    assert world.reconciler.reconcile("ca").writes == 0
    assert world.writes() == []


def test_a_refused_stamp_is_reported_and_retried_while_the_others_are_served() -> None:
    world = World(namespace("a"), namespace("kube-system"))
    world.refuse(
        "kube-system",
        ApiError(
            403, "Forbidden", "ConfigBundles are not allowed in the protected namespace kube-system"
        ),
    )
    with pytest.raises(Requeue):
        world.reconciler.reconcile("ca")
    actions = world.writes()
    assert ("create", "configbundles", "a", "ca") in actions
    assert ("update/status", "clusterconfigbundles", None, "ca") in actions


def test_the_status_carries_the_refusal_with_the_server_message() -> None:
    world = World(namespace("kube-system"))
    world.refuse("kube-system", ApiError(422, "Invalid", "denied by policy"))
    with pytest.raises(Requeue):
        world.reconciler.reconcile("ca")
    (body,) = world.status_bodies()
    assert body["status"]["failedNamespaces"] == [
        {"namespace": "kube-system", "reason": "Refused", "message": "denied by policy"}
    ]
    assert body["status"]["namespaces"] == {"selected": 1, "ready": 0, "failed": 1}


def test_a_namespace_being_deleted_is_skipped_without_retry() -> None:
    world = World(namespace("a"))
    # The namespace is terminating on the server (its finalizer holds it); the cache
    # still shows it as it was.
    held = namespace("a")
    held["metadata"]["finalizers"] = ["kubernetes"]
    world.kube.tracker.add(NAMESPACES, held)
    world.kube.tracker.delete(NAMESPACES, None, "a")
    done = world.reconciler.reconcile("ca")  # no Requeue
    assert done.writes == 0
    assert world.events() == []
    assert world.writes()[0] == ("create", "configbundles", "a", "ca")


def test_a_namespace_gone_from_the_server_is_skipped_without_retry() -> None:
    world = World(namespace("a"))
    world.kube.tracker.remove(NAMESPACES, None, "a")  # the cache has not seen it go
    done = world.reconciler.reconcile("ca")  # no Requeue
    assert done.writes == 0
    assert world.events() == []
    assert world.writes()[0] == ("create", "configbundles", "a", "ca")


def test_a_create_that_finds_the_stamp_already_there_is_requeued_quietly() -> None:
    world = World(namespace("a"))
    # A stamp the bundle cache has not seen yet is already on the server.
    world.kube.tracker.add(CONFIGBUNDLES, {"metadata": {"name": "ca", "namespace": "a"}})
    with pytest.raises(Requeue, match="AlreadyExists"):
        world.reconciler.reconcile("ca")
    assert world.writes() == [("create", "configbundles", "a", "ca")]


def test_status_is_written_at_most_once_a_second() -> None:
    world = World(namespace("a"))
    world.reconciler.reconcile("ca")
    world.writes()
    # The status write is in the cache, and then another status (a newer version);
    # a new namespace changes the status 0.3 s later.
    other = world.kube.tracker.get(CLUSTERCONFIGBUNDLES, None, "ca")
    other["status"] = {"observedGeneration": 0}
    world.kube.tracker.update(CLUSTERCONFIGBUNDLES, None, "ca", other, "status")
    world.cluster_bundles.sync(world.kube.tracker, CLUSTERCONFIGBUNDLES)
    world.kube.tracker.add(NAMESPACES, namespace("b"))
    world.namespaces.sync(world.kube.tracker, NAMESPACES)
    world.clock.step(0.3)
    done = world.reconciler.reconcile("ca")
    assert done.requeue_after == pytest.approx(0.7)
    assert world.writes() == [("create", "configbundles", "b", "ca")]
    world.clock.step(0.7)
    done = world.reconciler.reconcile("ca")
    assert done.status_written
    assert done.requeue_after is None


def test_nothing_is_done_for_a_cluster_bundle_gone_or_being_deleted() -> None:
    world = World(namespace("a"))
    assert world.reconciler.reconcile("other").writes == 0
    held = world.kube.tracker.get(CLUSTERCONFIGBUNDLES, None, "ca")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    world.kube.tracker.put(CLUSTERCONFIGBUNDLES, held)
    world.kube.tracker.delete(CLUSTERCONFIGBUNDLES, None, "ca")
    world.cluster_bundles.sync(world.kube.tracker, CLUSTERCONFIGBUNDLES)
    deleting = world.cluster_bundles.get(None, "ca")
    assert deleting is not None
    assert deleting["metadata"]["deletionTimestamp"]
    assert world.reconciler.reconcile("ca").writes == 0
    assert world.writes() == []


def test_a_stamp_whose_namespace_left_is_deleted_with_an_event() -> None:
    world = World(namespace("a", {}))
    stamp = {
        "apiVersion": CONFIGBUNDLES.api_version,
        "kind": "ConfigBundle",
        "metadata": {
            "name": "ca",
            "namespace": "a",
            "uid": "s1",
            "labels": {"cbop.dev/cluster-bundle": "ca"},
            "ownerReferences": [
                {
                    "apiVersion": "cbop.dev/v1beta1",
                    "kind": "ClusterConfigBundle",
                    "name": "ca",
                    "uid": "ccb-uid",
                    "controller": True,
                }
            ],
        },
        "spec": {"data": {"a": "1"}, "configMapName": "ca"},
    }
    world.kube.tracker.add(CONFIGBUNDLES, stamp)
    world.bundles.sync(world.kube.tracker, CONFIGBUNDLES)
    world.reconciler.reconcile("ca")
    assert ("delete", "configbundles", "a", "ca") in world.writes()
    assert world.kube.tracker.objects(CONFIGBUNDLES) == []
    assert world.events() == [("NamespaceReleased", "released namespace a")]


def test_a_failed_write_leaves_the_status_alone_and_the_others_are_still_attempted() -> None:
    world = World(*(namespace(f"n{i}") for i in range(6)))
    world.refuse("n2", errors.internal_error("etcd is down"))
    with pytest.raises(ApiError):
        world.reconciler.reconcile("ca")
    actions = world.writes()
    assert sorted(str(a[2]) for a in actions if a[0] == "create") == [f"n{i}" for i in range(6)]
    assert not any(a[0] == "update/status" for a in actions)
