"""ClusterConfigBundles under --shards: each shard stamps its own namespaces and reports
the failures no stamp shows in an annotation of its own; shard 0 writes the one status
from cluster-wide caches and those reports. On the fake API server, with a fake clock."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cbop.api import MAX_FAILED_NAMESPACES
from cbop.clusterbundle import report
from cbop.clusterbundle.controller import (
    DEFINITION,
    ClusterBundleControllers,
    cluster_bundle_stamp_mapper,
    namespace_stamp_mapper,
)
from cbop.clusterbundle.decision import Failure
from cbop.clusterbundle.reconcile import (
    CLUSTER_BUNDLE_INDEX,
    Outcomes,
    ReportReconciler,
    StampReconciler,
    StatusReconciler,
    index_by_cluster_bundle,
)
from cbop.informers import SharedInformerFactory
from cbop.kube import CLUSTERCONFIGBUNDLES, CONFIGBUNDLES, NAMESPACES, ApiError
from cbop.runtime import Controller, Requeue, Scope, ScopeSpec
from cbop.runtime.definition import Context, FlagValues
from cbop.shardrange import ShardRange
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import CacheLister, FakeKube, FakeRecorder, ObjectTracker, fail

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
LABEL = {"ca": "yes"}
SHARD0, SHARD1 = ShardRange.of(0, 2), ShardRange.of(1, 2)
NAMES = [f"{i}-team" for i in range(40)]  # names differing early spread over shards
IN0 = [n for n in NAMES if SHARD0.contains(n)][:3]
IN1 = [n for n in NAMES if SHARD1.contains(n)][:3]
KEY0, KEY1 = report.report_key(0, 2), report.report_key(1, 2)


def ccb(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": CLUSTERCONFIGBUNDLES.api_version,
        "kind": "ClusterConfigBundle",
        "metadata": {
            "name": "ca",
            "uid": "ccb-uid",
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": annotations or {},
        },
        "spec": {"namespaceSelector": {"matchLabels": LABEL}, "template": {"data": {"a": "1"}}},
    }


class Group:
    """One FakeKube; per shard the stamp work and its report; shard 0's status writer
    over cluster-wide caches (every Namespace, every stamp)."""

    def __init__(self) -> None:
        self.clock = FakeClock(start=1000.0)
        self.kube = FakeKube(ObjectTracker(namespace_lifecycle=True))
        self.kube.tracker.add(CLUSTERCONFIGBUNDLES, ccb())
        for name in (*IN0, *IN1):
            self.kube.tracker.add(NAMESPACES, {"metadata": {"name": name, "labels": LABEL}})
        self.cluster_bundles = CacheLister()
        self.namespaces = CacheLister()
        self.stamps = CacheLister(indexers={CLUSTER_BUNDLE_INDEX: index_by_cluster_bundle})
        self.sync()
        self.outcomes = {0: Outcomes(), 1: Outcomes()}
        self.stampers = {
            i: StampReconciler(
                client=self.kube,
                cluster_bundles=self.cluster_bundles,
                namespaces=self.namespaces,
                bundles=self.stamps,  # each shard's own would do: keys are filtered
                outcomes=self.outcomes[i],
                monotonic=self.clock.now,
                owns=shard.contains,
            )
            for i, shard in ((0, SHARD0), (1, SHARD1))
        }
        self.reporters = {
            i: ReportReconciler(
                client=self.kube,
                cluster_bundles=self.cluster_bundles,
                outcomes=self.outcomes[i],
                key=report.report_key(i, 2),
                monotonic=self.clock.now,
            )
            for i in (0, 1)
        }
        self.status = StatusReconciler(
            client=self.kube,
            cluster_bundles=self.cluster_bundles,
            namespaces=self.namespaces,
            bundles=self.stamps,
            outcomes=Outcomes(),
            monotonic=self.clock.now,
            now=lambda: NOW,
            reports=lambda c: report.reported(c, 2),
        )

    def sync(self) -> None:
        self.cluster_bundles.sync(self.kube.tracker, CLUSTERCONFIGBUNDLES)
        self.namespaces.sync(self.kube.tracker, NAMESPACES)
        self.stamps.sync(self.kube.tracker, CONFIGBUNDLES)

    def stamp(self, shard: int) -> dict[str, Any]:
        """Every namespace's stamp key through ``shard``'s stamp work: writes or error."""
        out: dict[str, Any] = {}
        for name in (*IN0, *IN1):
            try:
                out[name] = self.stampers[shard].reconcile(f"{name}/ca").writes
            except Requeue as err:
                out[name] = err
        return out

    def patches(self) -> list[dict[str, Any]]:
        found = [a.body for a in self.kube.actions if a.matches("patch", "clusterconfigbundles")]
        self.kube.clear_actions()
        return found

    def annotations(self) -> dict[str, str]:
        got = self.kube.tracker.get(CLUSTERCONFIGBUNDLES, None, "ca")
        return dict(got["metadata"].get("annotations") or {})


def test_report_values_are_deterministic_bounded_and_read_back() -> None:
    failures = [Failure(f"ns-{i:03}", "Refused", "m" * 600) for i in range(30)]
    value = report.encode(reversed(failures))
    assert value == report.encode(failures)
    assert value is not None
    parsed = json.loads(value)
    assert len(parsed) == 30
    assert parsed["ns-000"] == ["Refused", "m" * report.MAX_MESSAGE]
    assert parsed["ns-029"] == ["Refused"]  # beyond the 20 listed: no message
    assert sum(len(v) == 2 for v in parsed.values()) == MAX_FAILED_NAMESPACES
    assert [f.namespace for f in report.decode(value)] == [f"ns-{i:03}" for i in range(30)]
    assert report.encode([]) is None
    assert report.decode("not json") == []
    stale = {report.report_key(2, 3): value, KEY1: report.encode(failures[:1]) or ""}
    assert report.reported(ccb(stale), 2) == [Failure("ns-000", "Refused", "m" * 512)]


def test_each_shard_stamps_only_the_namespaces_whose_name_hashes_into_its_range() -> None:
    group = Group()
    assert group.stamp(0) == {**dict.fromkeys(IN0, 1), **dict.fromkeys(IN1, 0)}
    assert group.stamp(1) == {**dict.fromkeys(IN0, 0), **dict.fromkeys(IN1, 1)}
    made = sorted(b["metadata"]["namespace"] for b in group.kube.tracker.objects(CONFIGBUNDLES))
    assert made == sorted((*IN0, *IN1))
    # The mappers enqueue only the shard's keys.
    group.sync()
    ns_keys = namespace_stamp_mapper(group.cluster_bundles, SHARD0.contains)
    assert ns_keys({"metadata": {"name": IN0[0]}}) == [f"{IN0[0]}/ca"]
    assert ns_keys({"metadata": {"name": IN1[0]}}) == []
    ccb_keys = cluster_bundle_stamp_mapper(group.cluster_bundles, group.namespaces, SHARD1.contains)
    assert ccb_keys(ccb()) == sorted(f"{n}/ca" for n in IN1)


def test_a_refusal_in_one_shard_reaches_the_status_through_its_report() -> None:
    group = Group()
    refused = IN1[0]
    group.kube.prepend_reactor(
        "create",
        "configbundles",
        fail(ApiError(403, "Forbidden", "protected"), when=lambda a: a.namespace == refused),
    )
    group.stamp(0)
    outcome = group.stamp(1)
    assert isinstance(outcome[refused], Requeue)
    group.sync()
    assert group.reporters[0].reconcile("ca").writes == 0  # nothing to report
    assert group.reporters[1].reconcile("ca").writes == 1
    (patch,) = group.patches()
    assert patch == {
        "metadata": {"annotations": {KEY1: f'{{"{refused}":["Refused","protected"]}}'}}
    }
    group.sync()
    assert group.reporters[1].reconcile("ca").writes == 0  # the cache shows it: no write
    assert group.status.reconcile("ca").status_written
    status = group.kube.tracker.get(CLUSTERCONFIGBUNDLES, None, "ca")["status"]
    assert status["namespaces"] == {"selected": 6, "ready": 0, "failed": 1}
    assert status["failedNamespaces"] == [
        {"namespace": refused, "reason": "Refused", "message": "protected"}
    ]


def test_a_report_is_cleared_when_the_failure_is_gone_and_ignored_once_a_stamp_exists() -> None:
    group = Group()
    refused = IN1[0]
    group.kube.tracker.add(
        CONFIGBUNDLES, {"metadata": {"name": "ca", "namespace": refused}}
    )  # a foreign bundle in the stamp's way: no stamp shows it
    group.sync()
    group.stamp(1)
    group.reporters[1].reconcile("ca")
    reported = report.decode(group.annotations()[KEY1])
    assert [(f.namespace, f.reason) for f in reported] == [(refused, "ConfigBundleConflict")]
    # The foreign bundle goes and the stamp is made: the status writer ignores the report
    # at once (a stamp is there), and the shard clears it, a second later at the most.
    group.kube.tracker.remove(CONFIGBUNDLES, refused, "ca")
    group.sync()
    group.stamp(1)
    group.sync()
    group.status.reconcile("ca")
    status = group.kube.tracker.get(CLUSTERCONFIGBUNDLES, None, "ca")["status"]
    assert status["namespaces"]["failed"] == 0
    group.patches()
    done = group.reporters[1].reconcile("ca")
    assert done.requeue_after == pytest.approx(1.0)
    group.clock.step(1.0)
    assert group.reporters[1].reconcile("ca").writes == 1
    assert group.patches() == [{"metadata": {"annotations": {KEY1: None}}}]
    assert KEY1 not in group.annotations()


def test_a_new_holder_of_a_shard_keeps_what_it_has_not_met_again() -> None:
    """A report written by the shard's previous holder stays until the new holder's stamp
    work has looked at that namespace: no flip of the status at a handover."""
    group = Group()
    refused = IN1[0]
    value = report.encode([Failure(refused, "Refused", "protected")])
    assert value is not None
    group.kube.tracker.update(CLUSTERCONFIGBUNDLES, None, "ca", ccb({KEY1: value}))
    group.sync()
    assert group.reporters[1].reconcile("ca").writes == 0
    assert group.patches() == []
    # Looked at and now served (the refusal was lifted): cleared.
    group.stamp(1)
    group.sync()
    assert group.reporters[1].reconcile("ca").writes == 1
    assert KEY1 not in group.annotations()


def test_sharded_setup_adds_the_status_writer_to_shard_zero_only() -> None:
    context = Context(
        workers=2,
        priority_queue=True,
        recorder=FakeRecorder(),
        registry=CollectorRegistry(),
        cached=lambda resource: [],
    )
    setup = DEFINITION.configure(FlagValues()).install(context)
    assert setup.once is not None
    added = {}
    for shard in (SHARD0, SHARD1):
        factory = SharedInformerFactory(FakeKube(), shard=shard)
        scope = Scope(FakeKube(), informers=factory, spec=ScopeSpec.of_shard(shard))
        scope.lister(CONFIGBUNDLES)  # the ConfigBundle controller's, set up before
        # As the manager does: the group's once-controllers first, where hosted.
        status = setup.once(scope) if scope.spec.hosts_once else None
        made = setup.each_scope(scope)
        assert isinstance(made, ClusterBundleControllers)
        assert made.report is not None
        added[shard.index] = (scope, made, status)
    scope0, _, status0 = added[0]
    scope1, made1, status1 = added[1]
    assert set(scope0.controllers) == {
        "clusterbundle-shard-0",
        "clusterbundle-status-shard-0",
        "clusterbundle-report-shard-0",
    }
    assert set(scope1.controllers) == {"clusterbundle-shard-1", "clusterbundle-report-shard-1"}
    assert isinstance(status0, Controller)
    assert status1 is None
    # Shard 0 reads every Namespace, every ClusterConfigBundle and every stamp; the stamp
    # controllers read their shard's ConfigBundles, and shard 1 its own Namespaces
    # (shard 0's stamp work reads them from the status writer's informer of all).
    names0 = {i.name for i in scope0.informers.informers}
    assert names0 == {
        "clusterconfigbundles/*",
        "namespaces/*",
        "configbundles/* shard 0/2",
        "configbundles/*[cbop.dev/cluster-bundle]",
    }
    names1 = {i.name for i in scope1.informers.informers}
    assert names1 == {
        "clusterconfigbundles/*",
        "namespaces/* shard 1/2 by name",  # its own namespaces' Namespace objects only
        "configbundles/* shard 1/2",
    }
    # A failure met wakes the shard's report, not a status.
    made1.outcomes.record("ca", IN1[0], Failure(IN1[0], "Refused", "no"))
    assert made1.report is not None
    assert len(made1.report.queue) == 1


def test_on_the_status_writers_shard_a_failure_wakes_its_report_once() -> None:
    """Shard 0 hosts the status writer and its own stamp work. The status reads the
    shards' reports, shard 0's included, so a failure met there wakes shard 0's report
    controller (which writes it for the status), and nothing else: one listener on the
    shard's outcomes, none overwritten (the status's wiring used to be assigned first
    and silently replaced by the report's)."""
    setup = DEFINITION.configure(FlagValues()).install(
        Context(
            workers=1,
            priority_queue=False,
            recorder=FakeRecorder(),
            registry=CollectorRegistry(),
            cached=lambda resource: [],
        )
    )
    scope = Scope(
        FakeKube(),
        informers=SharedInformerFactory(FakeKube(), shard=SHARD0),
        spec=ScopeSpec.of_shard(SHARD0),
    )
    assert setup.once is not None
    status = setup.once(scope)
    made = setup.each_scope(scope)
    assert isinstance(status, Controller)
    assert isinstance(made, ClusterBundleControllers)
    assert made.report is not None
    made.outcomes.record("ca", IN0[0], Failure(IN0[0], "Refused", "no"))
    made.outcomes.record("other", IN0[0], Failure(IN0[0], "Refused", "no"))
    assert sorted(str(made.report.queue.get()[0]) for _ in range(2)) == ["ca", "other"]
    assert len(status.queue) == 0


def test_a_deleted_cluster_bundle_leaves_no_outcomes_behind() -> None:
    group = Group()
    group.stamp(1)
    assert group.outcomes[1].known("ca", IN1[0])
    group.kube.tracker.remove(CLUSTERCONFIGBUNDLES, None, "ca")
    group.sync()
    assert group.stamp(1) == dict.fromkeys((*IN0, *IN1), 0)
    assert group.reporters[1].reconcile("ca").writes == 0
    assert not group.outcomes[1].known("ca", IN1[0])
    assert group.stamp(1) == dict.fromkeys((*IN0, *IN1), 0)
    assert not group.outcomes[1].known("ca", IN1[0])  # nothing recorded for a gone one
