"""The ClusterConfigBundle controller's wiring: where it runs, and how events map to keys."""

from __future__ import annotations

from typing import Any

import pytest
import structlog
from prometheus_client import CollectorRegistry

from cbop.api import label_value
from cbop.clusterbundle.controller import (
    DEFINITION,
    ClusterBundleControllers,
    NamedLikeAClusterBundle,
    bundle_mapper,
    cluster_bundle_stamp_mapper,
    namespace_mapper,
    namespace_stamp_mapper,
    unsupported_scope,
)
from cbop.clusterbundle.decision import Failure
from cbop.clusterbundle.outcomes import Outcomes
from cbop.informers import SharedInformerFactory
from cbop.kube import CLUSTERCONFIGBUNDLES, EVENTS, NAMESPACES
from cbop.runtime import EVERYTHING, Controller, Scope, ScopeSpec
from cbop.runtime.definition import Context, FlagValues, Setup
from cbop.runtime.events import EventRecorder
from cbop.shardrange import ShardRange
from cbop_testing.fakekube import CacheLister, FakeKube, FakeRecorder


def cluster_bundles(*names: str, config_maps: dict[str, str] | None = None) -> CacheLister:
    """A cache of ClusterConfigBundles with these names (and template configMapNames)."""
    kube = FakeKube()
    for name in names:
        template = {"configMapName": (config_maps or {}).get(name, name)}
        kube.tracker.add(
            CLUSTERCONFIGBUNDLES, {"metadata": {"name": name}, "spec": {"template": template}}
        )
    return CacheLister().sync(kube.tracker, CLUSTERCONFIGBUNDLES)


def namespaces(*names: str) -> CacheLister:
    """A cache of Namespaces with these names."""
    kube = FakeKube()
    for name in names:
        kube.tracker.add(NAMESPACES, {"metadata": {"name": name}})
    return CacheLister().sync(kube.tracker, NAMESPACES)


def scope(namespaces: tuple[str, ...] = (), shard: ShardRange | None = None) -> Scope:
    kube = FakeKube()  # nothing is started: it is never called
    factory = SharedInformerFactory(kube, namespaces=namespaces, shard=shard)
    spec = EVERYTHING if shard is None else ScopeSpec.of_shard(shard)
    return Scope(kube, informers=factory, spec=spec)


def installed() -> Setup:
    """The controller installed in a process, with its default settings."""
    context = Context(
        workers=2,
        priority_queue=True,
        recorder=FakeRecorder(),
        registry=CollectorRegistry(),
        cached=lambda resource: [],
    )
    return DEFINITION.configure(FlagValues()).install(context)


def test_it_runs_only_with_the_cluster_scope() -> None:
    assert unsupported_scope(scope()) is None
    assert unsupported_scope(scope(shard=ShardRange.of(0, 2))) is None
    assert "--namespace" in str(unsupported_scope(scope(("a", "b"))))


def test_where_it_cannot_run_it_adds_nothing_and_says_so_once() -> None:
    setup = installed()
    scoped = scope(("a",))
    with structlog.testing.capture_logs() as logs:
        setup.set_up(scoped)
        setup.set_up(scope(("b",)))
    assert scoped.controllers == {}
    assert scoped.informers.informers == []
    said = [e for e in logs if "cluster scope" in e["event"]]
    assert len(said) == 1


def test_with_the_cluster_scope_it_adds_two_controllers_on_three_kinds() -> None:
    setup = installed()
    cluster = scope()
    assert setup.once is not None
    status = setup.once(cluster)
    assert isinstance(status, Controller)
    added = setup.each_scope(cluster)
    assert isinstance(added, ClusterBundleControllers)
    assert added.report is None
    assert set(cluster.controllers) == {"clusterbundle", "clusterbundle-status"}
    assert DEFINITION.controllers == len(cluster.controllers)
    assert cluster.controllers["clusterbundle"].workers == 2
    assert cluster.controllers["clusterbundle-status"].workers == 1
    watched = {i.name for i in cluster.informers.informers}
    assert watched == {"clusterconfigbundles/*", "namespaces/*", "configbundles/*"}
    # A refusal recorded by the stamp work wakes the status controller.
    added.outcomes.record("ca", "kube-system", None)
    assert len(status.queue) == 0
    added.outcomes.record("ca", "kube-system", Failure("kube-system", "Refused", "no"))
    assert len(status.queue) == 1


#: A ClusterConfigBundle name past the 63 characters of a label value.
LONG = "platform-trusted-certificate-authorities-for-every-team-namespaces"


@pytest.mark.parametrize(
    ("bundle", "keys"),
    [
        ({"metadata": {"name": "x", "labels": {"cbop.dev/cluster-bundle": "ca"}}}, ["ca"]),
        ({"metadata": {"name": "ca"}}, ["ca"]),
        ({"metadata": {"name": "other"}}, []),
        (
            {"metadata": {"name": LONG, "labels": {"cbop.dev/cluster-bundle": label_value(LONG)}}},
            [LONG],
        ),
    ],
    ids=["stamp-by-label", "named-like-a-cluster-bundle", "unrelated", "stamp-of-a-long-name"],
)
def test_a_configbundle_event_enqueues_the_cluster_bundle_it_concerns(
    bundle: dict[str, Any], keys: list[str]
) -> None:
    assert bundle_mapper(cluster_bundles("ca"))(bundle) == keys


def test_a_namespace_event_enqueues_every_cluster_bundle_status() -> None:
    assert namespace_mapper(cluster_bundles("b", "a"))({"metadata": {"name": "ns"}}) == ["a", "b"]


def test_a_namespace_event_enqueues_only_its_own_stamp_keys() -> None:
    mapper = namespace_stamp_mapper(cluster_bundles("b", "a"))
    assert mapper({"metadata": {"name": "ns"}}) == ["ns/a", "ns/b"]


def test_a_cluster_bundle_event_enqueues_its_stamp_in_every_namespace_and_its_rivals() -> None:
    cached = cluster_bundles("ca", "rival", "other", config_maps={"rival": "ca"})
    mapper = cluster_bundle_stamp_mapper(cached, namespaces("n1", "n2"))
    ca = cached.get(None, "ca")
    assert ca is not None
    assert mapper(ca) == ["n1/ca", "n2/ca", "n1/rival", "n2/rival"]


def test_the_stamp_controller_hears_only_bundles_named_like_a_cluster_bundle() -> None:
    predicate = NamedLikeAClusterBundle(cluster_bundles("ca"))
    stamp = {"metadata": {"name": "ca", "namespace": "a"}}
    unrelated = {"metadata": {"name": "app", "namespace": "a"}}
    assert predicate.create(stamp)
    assert predicate.update(stamp, stamp)
    assert predicate.delete(stamp)
    assert not predicate.create(unrelated)
    assert not predicate.update(unrelated, unrelated)


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


def test_every_listener_of_the_stamp_outcomes_is_woken_once_per_change() -> None:
    """A second listener is added beside the first, never in its place."""
    woken: list[tuple[str, str]] = []
    outcomes = Outcomes(lambda name: woken.append(("first", name)))
    outcomes.listen(lambda name: woken.append(("second", name)))
    refused = Failure("kube-system", "Refused", "no")
    assert outcomes.record("ca", "kube-system", refused)
    assert not outcomes.record("ca", "kube-system", refused)  # no change: nobody woken
    assert woken == [("first", "ca"), ("second", "ca")]
