"""The ClusterConfigBundle reconciler's act layer: the decision performed against a fake
client that records actions (as sample-controller's tests do), with a fake clock."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from cbop.clusterbundle.reconcile import (
    CLUSTER_BUNDLE_INDEX,
    ClusterBundleReconciler,
    index_by_cluster_bundle,
)
from cbop.kube import CLUSTERCONFIGBUNDLES, CONFIGBUNDLES, ApiError, Resource
from cbop.runtime import Requeue
from cbop_testing.clock import FakeClock

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
LABEL = {"ca": "yes"}


class FakeLister:
    """A dict-backed cache: key ``namespace/name`` (``name`` cluster-scoped)."""

    def __init__(self, objects: Sequence[dict[str, Any]] = ()) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        for obj in objects:
            self.put(obj)

    def put(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        self.objects[key] = obj

    def get(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        return self.objects.get(f"{namespace}/{name}" if namespace else name)

    def by_index(self, index_name: str, value: str) -> list[Mapping[str, Any]]:
        assert index_name == CLUSTER_BUNDLE_INDEX
        return [o for o in self.objects.values() if value in index_by_cluster_bundle(o)]

    def list(self) -> list[Mapping[str, Any]]:
        return list(self.objects.values())


class FakeClient:
    """Records every write; answers with the body and a new resourceVersion, or raises
    what ``refuse`` holds for a namespace."""

    def __init__(self) -> None:
        self.actions: list[tuple[str, str, str | None, str]] = []
        self.refuse: dict[str, ApiError] = {}
        self.status_bodies: list[Mapping[str, Any]] = []
        self.version = 100

    def _answer(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.version += 1
        meta = {"uid": f"uid-{self.version}", **body["metadata"]}
        meta["resourceVersion"] = str(self.version)
        return {**body, "metadata": meta}

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        raise AssertionError("the reconciler reads from its caches")

    def create(
        self, res: Resource, namespace: str | None, body: Mapping[str, Any], **_: Any
    ) -> dict[str, Any]:
        self.actions.append(("create", res.plural, namespace, body["metadata"]["name"]))
        if namespace in self.refuse:
            raise self.refuse[namespace]
        return self._answer(body)

    def update(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        subresource: str | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        verb = "update" if subresource is None else f"update/{subresource}"
        if subresource == "status":
            self.status_bodies.append(body)
        self.actions.append((verb, res.plural, namespace, name))
        return self._answer(body)

    def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("not used")

    def delete(self, res: Resource, namespace: str | None, name: str, **_: Any) -> dict[str, Any]:
        self.actions.append(("delete", res.plural, namespace, name))
        return {}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def event(
        self, obj: Mapping[str, Any], type_: str, reason: str, message: str, **_: Any
    ) -> None:
        self.events.append((reason, message))


def ccb(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": CLUSTERCONFIGBUNDLES.api_version,
        "kind": "ClusterConfigBundle",
        "metadata": {
            "name": "ca",
            "uid": "ccb-uid",
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"namespaceSelector": {"matchLabels": LABEL}, "template": {"data": {"a": "1"}}}
        | spec,
    }


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": LABEL if labels is None else labels}}


class World:
    def __init__(self, *namespaces: dict[str, Any]) -> None:
        self.clock = FakeClock(start=1000.0)
        self.client = FakeClient()
        self.recorder = Recorder()
        self.cluster_bundles = FakeLister([ccb()])
        self.namespaces = FakeLister(list(namespaces))
        self.bundles = FakeLister()
        self.reconciler = ClusterBundleReconciler(
            client=self.client,
            cluster_bundles=self.cluster_bundles,
            namespaces=self.namespaces,
            bundles=self.bundles,
            recorder=self.recorder,
            monotonic=self.clock.now,
            now=lambda: NOW,
        )

    def writes(self) -> list[tuple[str, str, str | None, str]]:
        out = self.client.actions
        self.client.actions = []
        return out


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
    assert sorted(world.recorder.events) == [
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
    world.client.refuse["kube-system"] = ApiError(
        403, "Forbidden", "ConfigBundles are not allowed in the protected namespace kube-system"
    )
    with pytest.raises(Requeue):
        world.reconciler.reconcile("ca")
    actions = world.writes()
    assert ("create", "configbundles", "a", "ca") in actions
    assert ("update/status", "clusterconfigbundles", None, "ca") in actions


def test_the_status_carries_the_refusal_with_the_server_message() -> None:
    world = World(namespace("kube-system"))
    world.client.refuse["kube-system"] = ApiError(422, "Invalid", "denied by policy")
    with pytest.raises(Requeue):
        world.reconciler.reconcile("ca")
    (body,) = world.client.status_bodies
    assert body["status"]["failedNamespaces"] == [
        {"namespace": "kube-system", "reason": "Refused", "message": "denied by policy"}
    ]
    assert body["status"]["namespaces"] == {"selected": 1, "ready": 0, "failed": 1}


@pytest.mark.parametrize(
    "error",
    [
        ApiError(
            403,
            "Forbidden",
            "unable to create new content in namespace a because it is being terminated",
            body={"details": {"causes": [{"reason": "NamespaceTerminating"}]}},
        ),
        ApiError(
            404, "NotFound", 'namespaces "a" not found', body={"details": {"kind": "namespaces"}}
        ),
    ],
    ids=["terminating", "gone"],
)
def test_a_namespace_going_away_is_skipped_without_retry(error: ApiError) -> None:
    world = World(namespace("a"))
    world.client.refuse["a"] = error
    done = world.reconciler.reconcile("ca")  # no Requeue
    assert done.writes == 0
    assert world.recorder.events == []


def test_a_create_that_finds_the_stamp_already_there_is_requeued_quietly() -> None:
    world = World(namespace("a"))
    world.client.refuse["a"] = ApiError(409, "AlreadyExists", "exists")
    with pytest.raises(Requeue):
        world.reconciler.reconcile("ca")


def test_status_is_written_at_most_once_a_second() -> None:
    world = World(namespace("a"))
    world.reconciler.reconcile("ca")
    world.writes()
    # The status write is in the cache; a new namespace changes the status 0.3 s later.
    cached = world.cluster_bundles.objects["ca"]
    cached["status"] = {"observedGeneration": 0}
    cached["metadata"]["resourceVersion"] = "999999"
    world.namespaces.put(namespace("b"))
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
    world.cluster_bundles.objects["ca"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
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
    world.bundles.put(stamp)
    world.reconciler.reconcile("ca")
    assert ("delete", "configbundles", "a", "ca") in world.writes()
    assert world.recorder.events == [("NamespaceReleased", "released namespace a")]


def test_a_failed_write_leaves_the_status_alone_and_the_others_are_still_attempted() -> None:
    world = World(*(namespace(f"n{i}") for i in range(6)))
    world.client.refuse["n2"] = ApiError(500, "InternalError", "etcd is down")
    with pytest.raises(ApiError):
        world.reconciler.reconcile("ca")
    actions = world.writes()
    assert sorted(str(a[2]) for a in actions if a[0] == "create") == [f"n{i}" for i in range(6)]
    assert not any(a[0] == "update/status" for a in actions)
