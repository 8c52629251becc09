"""The ClusterConfigBundle controller's wiring: where it runs, and how events map to keys."""

from __future__ import annotations

from typing import Any

import pytest
import structlog
from prometheus_client import CollectorRegistry

from cbop.clusterbundle.controller import (
    DEFINITION,
    bundle_mapper,
    namespace_mapper,
    unsupported_scope,
)
from cbop.informers import SharedInformerFactory
from cbop.kube import CLUSTERCONFIGBUNDLES, EVENTS
from cbop.runtime import Scope
from cbop.runtime.definition import Context
from cbop.runtime.events import EventRecorder
from cbop.shardrange import ShardRange
from cbop_testing.fakekube import CacheLister, FakeKube, FakeRecorder


def cluster_bundles(*names: str) -> CacheLister:
    """A cache of ClusterConfigBundles with these names."""
    kube = FakeKube()
    for name in names:
        kube.tracker.add(CLUSTERCONFIGBUNDLES, {"metadata": {"name": name}})
    return CacheLister().sync(kube.tracker, CLUSTERCONFIGBUNDLES)


def scope(namespaces: tuple[str, ...] = (), shard: ShardRange | None = None) -> Scope:
    kube = FakeKube()  # nothing is started: it is never called
    factory = SharedInformerFactory(kube, namespaces=namespaces, shard=shard)
    return Scope(kube, informers=factory, shard=shard)


def test_it_runs_only_with_the_cluster_scope_and_unsharded() -> None:
    assert unsupported_scope(scope()) is None
    assert "--namespace" in str(unsupported_scope(scope(("a", "b"))))
    assert "--shards" in str(unsupported_scope(scope(shard=ShardRange.of(0, 2))))


def test_where_it_cannot_run_it_adds_nothing_and_says_so_once() -> None:
    context = Context(
        settings={},
        workers=2,
        priority_queue=True,
        recorder=FakeRecorder(),
        registry=CollectorRegistry(),
        cached=lambda resource: [],
    )
    setup = DEFINITION.install(context)
    scoped = scope(("a",))
    with structlog.testing.capture_logs() as logs:
        assert setup(scoped) is None
        assert setup(scope(("b",))) is None
    assert scoped.controllers == {}
    assert scoped.informers.informers == []
    said = [e for e in logs if "cluster scope" in e["event"]]
    assert len(said) == 1


def test_with_the_cluster_scope_it_watches_its_three_kinds() -> None:
    context = Context(
        settings={},
        workers=2,
        priority_queue=True,
        recorder=FakeRecorder(),
        registry=CollectorRegistry(),
        cached=lambda resource: [],
    )
    cluster = scope()
    controller = DEFINITION.install(context)(cluster)
    assert controller is not None
    assert set(cluster.controllers) == {"clusterbundle"}
    watched = {i.name for i in cluster.informers.informers}
    assert watched == {"clusterconfigbundles/*", "namespaces/*", "configbundles/*"}


@pytest.mark.parametrize(
    ("bundle", "keys"),
    [
        ({"metadata": {"name": "x", "labels": {"cbop.dev/cluster-bundle": "ca"}}}, ["ca"]),
        ({"metadata": {"name": "ca"}}, ["ca"]),
        ({"metadata": {"name": "other"}}, []),
    ],
    ids=["stamp-by-label", "named-like-a-cluster-bundle", "unrelated"],
)
def test_a_configbundle_event_enqueues_the_cluster_bundle_it_concerns(
    bundle: dict[str, Any], keys: list[str]
) -> None:
    assert bundle_mapper(cluster_bundles("ca"))(bundle) == keys


def test_a_namespace_event_enqueues_every_cluster_bundle() -> None:
    assert namespace_mapper(cluster_bundles("b", "a"))({"metadata": {"name": "ns"}}) == ["a", "b"]


def test_events_about_a_cluster_bundle_go_to_the_default_namespace() -> None:
    """As client-go's recorder: a cluster-scoped object's Events live in "default", and
    their involvedObject has no namespace."""
    kube = FakeKube()
    recorder = EventRecorder(kube)
    ccb = {
        "apiVersion": "cbop.dev/v1beta1",
        "kind": "ClusterConfigBundle",
        "metadata": {"name": "ca", "uid": "u1"},
    }
    recorder.event(ccb, "Normal", "NamespaceServed", "serving namespace a")
    assert recorder.flush(5.0)
    recorder.close(1.0)
    (created,) = kube.write_actions()
    assert created.key[:3] == ("create", "events", "default")
    body = created.body
    (stored,) = kube.tracker.objects(EVENTS, "default")
    assert stored["involvedObject"]["name"] == "ca"
    assert body["metadata"]["namespace"] == "default"
    assert body["involvedObject"]["namespace"] == ""
    assert body["involvedObject"]["kind"] == "ClusterConfigBundle"
