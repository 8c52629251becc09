"""The ClusterConfigBundle reconciler's act layer: the decision performed against the fake
API server (as sample-controller's tests do), with caches the test fills and a fake clock."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from cbop.clusterbundle.reconcile import (
    CLUSTER_BUNDLE_INDEX,
    Outcomes,
    StampReconciler,
    StatusReconciler,
    index_by_cluster_bundle,
)
from cbop.kube import CLUSTERCONFIGBUNDLES, CONFIGBUNDLES, NAMESPACES, ApiError
from cbop.runtime import Requeue, TerminalError
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
    """A FakeKube holding the cluster bundle and the namespaces, both reconcilers' caches
    filled from it, the refusals table they share, and a FakeRecorder for the Events."""

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
        self.woken: list[str] = []  # the status keys the refusals table enqueued
        self.outcomes = Outcomes(self.woken.append)
        self.stamps = StampReconciler(
            client=self.kube,
            cluster_bundles=self.cluster_bundles,
            namespaces=self.namespaces,
            bundles=self.bundles,
            outcomes=self.outcomes,
            recorder=self.recorder,
            monotonic=self.clock.now,
        )
        self.status = StatusReconciler(
            client=self.kube,
            cluster_bundles=self.cluster_bundles,
            namespaces=self.namespaces,
            bundles=self.bundles,
            outcomes=self.outcomes,
            monotonic=self.clock.now,
            now=lambda: NOW,
        )

    def sync(self) -> None:
        """Let the caches catch up with the server."""
        self.cluster_bundles.sync(self.kube.tracker, CLUSTERCONFIGBUNDLES)
        self.namespaces.sync(self.kube.tracker, NAMESPACES)
        self.bundles.sync(self.kube.tracker, CONFIGBUNDLES)

    def stamp_all(self, name: str = "ca") -> dict[str, Exception | int]:
        """Reconcile the stamp key of ``name`` in every cached namespace, as the stamp
        controller's workers would; return each namespace's writes or exception."""
        out: dict[str, Exception | int] = {}
        for ns in self.namespaces.list():
            ns_name = ns["metadata"]["name"]
            try:
                out[ns_name] = self.stamps.reconcile(f"{ns_name}/{name}").writes
            except Exception as err:  # noqa: BLE001 - reported to the test
                out[ns_name] = err
        return out

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


def own_stamp(namespace: str) -> dict[str, Any]:
    """A stamp of "ca" in ``namespace``, as the stamp work creates it."""
    return {
        "apiVersion": CONFIGBUNDLES.api_version,
        "kind": "ConfigBundle",
        "metadata": {
            "name": "ca",
            "namespace": namespace,
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


def test_each_namespace_is_its_own_key_and_the_status_counts_them_all() -> None:
    world = World(namespace("a"), namespace("b"), namespace("c", {}))
    assert world.stamps.reconcile("a/ca").writes == 1
    assert world.writes() == [("create", "configbundles", "a", "ca")]
    # Before the cache shows it, the created stamp is remembered: no second create.
    assert world.stamps.reconcile("a/ca").writes == 0
    assert world.stamps.reconcile("c/ca").writes == 0  # not selected: nothing
    assert world.stamps.reconcile("b/ca").writes == 1
    assert world.writes() == [("create", "configbundles", "b", "ca")]
    assert sorted(world.events()) == [
        ("NamespaceServed", "serving namespace a"),
        ("NamespaceServed", "serving namespace b"),
    ]
    world.sync()
    done = world.status.reconcile("ca")
    assert done.status_written
    (body,) = world.status_bodies()
    assert body["status"]["namespaces"] == {"selected": 2, "ready": 0, "failed": 0}
    # Before the cache shows it, the status written is remembered: nothing again.
    world.writes()
    world.clock.step(5)
    assert world.stamps.reconcile("b/ca").writes == 0
    assert not world.status.reconcile("ca").status_written
    assert world.writes() == []


def test_a_refused_stamp_is_retried_on_its_own_key_while_the_others_are_served() -> None:
    world = World(namespace("a"), namespace("kube-system"))
    world.refuse(
        "kube-system",
        ApiError(
            403, "Forbidden", "ConfigBundles are not allowed in the protected namespace kube-system"
        ),
    )
    outcome = world.stamp_all()
    assert isinstance(outcome["kube-system"], Requeue)
    assert outcome["a"] == 1
    assert world.woken == ["ca"]  # the status is told
    (refused,) = [e for e in world.recorder.recorded if e.reason == "StampRefused"]
    assert refused.type == "Warning"
    assert "namespace kube-system" in refused.message
    assert "protected namespace kube-system" in refused.message
    # Refused again: nothing new to tell, and no second Event.
    with pytest.raises(Requeue):
        world.stamps.reconcile("kube-system/ca")
    assert world.woken == ["ca"]
    assert [e.reason for e in world.recorder.recorded].count("StampRefused") == 1


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (ApiError(403, "Forbidden", 'exceeded quota: "cb", requested: count/configbundles'), True),
        (
            ApiError(422, "Invalid", "metadata.labels: Invalid value: must be no more than 63"),
            False,
        ),
        (ApiError(400, "BadRequest", "the body of the request was in an unknown format"), False),
        (ApiError(413, "RequestEntityTooLarge", "request is too large"), False),
    ],
    ids=["403-quota", "422-invalid", "400-bad-request", "413-too-large"],
)
def test_a_refusal_the_same_request_never_overcomes_is_reported_not_retried(
    error: ApiError, retried: bool
) -> None:
    """A 422 (or 400, 413) is the request's own fault: the namespace is failed with the
    server's message and the key is not requeued (a TerminalError: only a change of the
    ClusterConfigBundle, the namespace or the stamp brings it back). A 403 (a quota, a
    policy) may be lifted at any time: retried with backoff."""
    world = World(namespace("a"))
    world.refuse("a", error)
    with pytest.raises(Requeue if retried else TerminalError):
        world.stamps.reconcile("a/ca")
    assert [(f.namespace, f.reason, f.message) for f in world.outcomes.failures("ca")] == [
        ("a", "Refused", error.message)
    ]
    assert [e.reason for e in world.recorder.recorded] == ["StampRefused"]


def test_the_status_carries_the_refusal_with_the_server_message() -> None:
    world = World(namespace("kube-system"))
    world.refuse("kube-system", ApiError(422, "Invalid", "denied by policy"))
    with pytest.raises(TerminalError):
        world.stamps.reconcile("kube-system/ca")
    world.status.reconcile("ca")
    (body,) = world.status_bodies()
    assert body["status"]["failedNamespaces"] == [
        {"namespace": "kube-system", "reason": "Refused", "message": "denied by policy"}
    ]
    assert body["status"]["namespaces"] == {"selected": 1, "ready": 0, "failed": 1}


def test_a_refusal_clears_when_the_namespace_leaves_the_selector() -> None:
    world = World(namespace("kube-system"))
    world.refuse("kube-system", ApiError(403, "Forbidden", "protected"))
    with pytest.raises(Requeue):
        world.stamps.reconcile("kube-system/ca")
    world.kube.tracker.update(NAMESPACES, None, "kube-system", namespace("kube-system", {}))
    world.sync()
    world.woken.clear()
    assert world.stamps.reconcile("kube-system/ca").writes == 0  # no Requeue
    assert world.woken == ["ca"]
    assert world.outcomes.failures("ca") == []
    world.status.reconcile("ca")
    (body,) = world.status_bodies()
    assert body["status"]["namespaces"] == {"selected": 0, "ready": 0, "failed": 0}


def test_after_a_restart_the_status_keeps_a_refusal_not_met_again_yet() -> None:
    """A new process has no outcome for the refused namespace until its stamp key runs:
    the status it computes meanwhile is the one written before, so nothing is written."""
    world = World(namespace("kube-system"), namespace("a"))
    world.refuse("kube-system", ApiError(403, "Forbidden", "protected"))
    world.stamp_all()
    world.sync()
    world.status.reconcile("ca")
    world.writes()
    world.sync()
    restarted = StatusReconciler(
        client=world.kube,
        cluster_bundles=world.cluster_bundles,
        namespaces=world.namespaces,
        bundles=world.bundles,
        outcomes=Outcomes(),
        monotonic=world.clock.now,
        now=lambda: NOW,
    )
    assert not restarted.reconcile("ca").status_written
    assert world.writes() == []


def test_a_namespace_being_deleted_is_skipped_without_retry() -> None:
    world = World(namespace("a"))
    # The namespace is terminating on the server (its finalizer holds it); the cache
    # still shows it as it was.
    held = namespace("a")
    held["metadata"]["finalizers"] = ["kubernetes"]
    world.kube.tracker.add(NAMESPACES, held)
    world.kube.tracker.delete(NAMESPACES, None, "a")
    done = world.stamps.reconcile("a/ca")  # no Requeue
    assert done.writes == 0
    assert world.events() == []
    assert world.writes() == [("create", "configbundles", "a", "ca")]
    assert world.woken == []


def test_a_namespace_gone_from_the_server_is_skipped_without_retry() -> None:
    world = World(namespace("a"))
    world.kube.tracker.remove(NAMESPACES, None, "a")  # the cache has not seen it go
    done = world.stamps.reconcile("a/ca")  # no Requeue
    assert done.writes == 0
    assert world.events() == []
    assert world.writes() == [("create", "configbundles", "a", "ca")]


def test_a_create_that_finds_the_stamp_already_there_is_requeued_quietly() -> None:
    world = World(namespace("a"))
    # A stamp the bundle cache has not seen yet is already on the server.
    world.kube.tracker.add(CONFIGBUNDLES, {"metadata": {"name": "ca", "namespace": "a"}})
    with pytest.raises(Requeue, match="AlreadyExists"):
        world.stamps.reconcile("a/ca")
    assert world.writes() == [("create", "configbundles", "a", "ca")]


def test_status_is_written_at_most_once_a_second() -> None:
    world = World(namespace("a"))
    world.stamp_all()
    world.sync()
    assert world.status.reconcile("ca").status_written
    world.writes()
    # The status write is in the cache, and then another status (a newer version);
    # a new namespace changes the status 0.7 s later.
    other = world.kube.tracker.get(CLUSTERCONFIGBUNDLES, None, "ca")
    other["status"] = {"observedGeneration": 0}
    world.kube.tracker.update(CLUSTERCONFIGBUNDLES, None, "ca", other, "status")
    world.kube.tracker.add(NAMESPACES, namespace("b"))
    world.sync()
    world.clock.step(0.7)
    done = world.status.reconcile("ca")
    assert done.requeue_after == pytest.approx(0.5)  # the debounce, past the interval
    assert world.writes() == []
    world.clock.step(0.5)
    done = world.status.reconcile("ca")
    assert done.status_written
    assert done.requeue_after is None


def test_a_burst_of_events_is_computed_once_per_debounce() -> None:
    world = World(namespace("a"))
    world.status.reconcile("ca")
    world.writes()
    world.clock.step(0.1)
    done = world.status.reconcile("ca")
    assert done.requeue_after == pytest.approx(0.4)
    assert not done.status_written
    assert world.writes() == []


def test_nothing_is_done_for_a_cluster_bundle_gone_or_being_deleted() -> None:
    world = World(namespace("a"))
    assert world.stamps.reconcile("a/other").writes == 0
    assert world.status.reconcile("other").writes == 0
    held = world.kube.tracker.get(CLUSTERCONFIGBUNDLES, None, "ca")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    world.kube.tracker.put(CLUSTERCONFIGBUNDLES, held)
    world.kube.tracker.delete(CLUSTERCONFIGBUNDLES, None, "ca")
    world.sync()
    deleting = world.cluster_bundles.get(None, "ca")
    assert deleting is not None
    assert deleting["metadata"]["deletionTimestamp"]
    assert world.stamps.reconcile("a/ca").writes == 0
    assert not world.status.reconcile("ca").status_written
    assert world.writes() == []


def test_a_stamp_whose_namespace_left_is_deleted_with_an_event() -> None:
    world = World(namespace("a", {}), namespace("b"))
    world.kube.tracker.add(CONFIGBUNDLES, own_stamp("a"))
    world.sync()
    assert world.stamp_all() == {"a": 1, "b": 1}
    assert ("delete", "configbundles", "a", "ca") in world.writes()
    assert [b["metadata"]["namespace"] for b in world.kube.tracker.objects(CONFIGBUNDLES)] == ["b"]
    assert ("NamespaceReleased", "released namespace a") in world.events()


def test_a_failed_write_fails_its_own_key_only() -> None:
    world = World(*(namespace(f"n{i}") for i in range(6)))
    world.refuse("n2", errors.internal_error("etcd is down"))
    outcome = world.stamp_all()
    assert isinstance(outcome.pop("n2"), ApiError)
    assert outcome == {f"n{i}": 1 for i in (0, 1, 3, 4, 5)}
    assert world.woken == []  # not a refusal: retried, the status not told
    world.sync()
    world.status.reconcile("ca")
    (body,) = world.status_bodies()
    assert body["status"]["namespaces"] == {"selected": 6, "ready": 0, "failed": 0}
