"""The rollout reconciler against recording fakes: listers, client, Events, fake time.

As sample-controller's tests: call the sync handler directly and compare the recorded
API actions with the expected ones.
"""

from __future__ import annotations

from typing import Any

import pytest

from cbop.clock import RealClock
from cbop.informers import Lister
from cbop.kube import DEPLOYMENTS, STATEFULSETS, ApiError, KubeClient, Resource
from cbop.metrics.rollout import RolloutMetrics
from cbop.rollout import (
    ANNOTATION_CONFIG_HASH,
    CONFIGMAP_INDEX,
    FIELD_MANAGER,
    LABEL_CONFIG_BASELINE,
    Action,
    ChangeCoalescer,
    RolloutReconciler,
    configmap_mapper,
    index_by_configmap,
)
from cbop.runtime import TerminalError
from cbop.runtime.events import EventRecorder
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import CacheLister, FakeRecorder
from cbop_testing.objects import configmap, rolled, with_annotation, with_baseline, workload

#: A baseline no content here hashes to: the workload was rolled for older content.
OLD = "sha256:" + "0" * 64


def stale(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` rolled for content that has changed since: the next reconcile applies."""
    return rolled(obj, OLD)


class FakeClient:
    """Records every patch; scripted errors. Each answered apply returns the body with
    a new resourceVersion (100, 101, ...), as the API server does. ``get`` answers
    ``fresh`` (the workload with its managedFields)."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, str, str, Any, dict[str, Any]]] = []
        self.errors: list[ApiError] = []
        self.last_rv = 99
        self.fresh: dict[str, Any] = {}
        self.gets: list[tuple[str, str, str]] = []

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        self.gets.append((res.plural, str(namespace), name))
        return self.fresh

    def create(self, res: Resource, namespace: str | None, body: Any, **kw: Any) -> dict[str, Any]:
        raise AssertionError("the rollout never creates")

    def update(
        self, res: Resource, namespace: str | None, name: str, body: Any, *a: Any, **kw: Any
    ) -> dict[str, Any]:
        raise AssertionError("the rollout never updates")

    def delete(self, res: Resource, namespace: str | None, name: str, **kw: Any) -> dict[str, Any]:
        raise AssertionError("the rollout never deletes")

    def patch(
        self, res: Resource, namespace: str | None, name: str, body: Any, **kw: Any
    ) -> dict[str, Any]:
        self.patches.append((res.plural, str(namespace), name, body, kw))
        if self.errors:
            raise self.errors.pop(0)
        self.last_rv += 1
        return {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.last_rv)}}


class Counter:
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def rolled_out(self, kind: str) -> None:
        self.kinds.append(kind)


class Fixture:
    def __init__(self, *cms: dict[str, Any], resource: Resource = DEPLOYMENTS) -> None:
        self.clock = FakeClock(100.0)
        self.client = FakeClient()
        self.workloads = CacheLister(indexers={CONFIGMAP_INDEX: index_by_configmap})
        self.configmaps = CacheLister(cms)
        self.recorder = FakeRecorder()
        self.counter = Counter()
        self.coalescer = ChangeCoalescer(window=1.0, max_delay=5.0, clock=self.clock)
        self.mapper = configmap_mapper(self.workloads, self.coalescer)
        self.reconciler = RolloutReconciler(
            resource=resource,
            client=self.client,
            workloads=self.workloads,
            configmaps=self.configmaps,
            recorder=self.recorder,
            observer=self.counter,
            coalescer=self.coalescer,
        )

    def events(self) -> list[tuple[str, str, str, str, str]]:
        """The Events recorded: (kind, name, type, reason, message)."""
        return [(e.kind, e.name, e.type, e.reason, e.message) for e in self.recorder.recorded]

    def change(self, cm: dict[str, Any]) -> list[str]:
        """A ConfigMap event: the cache updates, then the map function runs."""
        self.configmaps.add(cm)
        return self.mapper(cm)

    def converge(self, key: str = "demo/web") -> str:
        """Reconcile once and file what it wrote (the baseline, the annotation for a
        rollout) into the cached workload, as the watch event of the apply would."""
        result = self.reconciler.reconcile(key)
        assert result.written
        ns, _, name = key.partition("/")
        cached = self.workloads.get(ns, name)
        assert cached is not None
        written = (
            rolled(cached, result.digest)
            if result.action is Action.APPLY
            else with_baseline(cached, result.digest)
        )
        self.workloads.add(at_version(written, self.client.last_rv))
        return result.digest


def at_version(obj: dict[str, Any], rv: int | str) -> dict[str, Any]:
    """``obj`` as the cache holds it at resourceVersion ``rv``."""
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}


def test_first_sight_records_the_baseline_and_rolls_nothing() -> None:
    """Case 17: opting in writes the baseline label only (no template change, so the
    generation stays); the next content change rolls once."""
    f = Fixture(configmap("a", {"k": "1"}, bundle="app-conf"))
    f.workloads.add(workload(volumes=["a"]))
    result = f.reconciler.reconcile("demo/web")
    assert result.action is Action.RECORD
    assert result.written
    ((plural, ns, name, body, kw),) = f.client.patches
    assert (plural, ns, name) == ("deployments", "demo", "web")
    assert kw == {"patch_type": "apply", "field_manager": FIELD_MANAGER, "force": False}
    assert body["metadata"]["labels"] == {LABEL_CONFIG_BASELINE: result.digest[7:47]}
    assert "spec" not in body
    assert f.counter.kinds == []
    assert f.events() == []

    f.workloads.add(at_version(with_baseline(workload(volumes=["a"]), result.digest), 100))
    assert f.reconciler.reconcile("demo/web").action is Action.NONE
    f.change(configmap("a", {"k": "2"}, bundle="app-conf"))
    f.clock.step(1.0)
    rolled_out = f.reconciler.reconcile("demo/web")
    assert rolled_out.action is Action.APPLY
    (_, (_, _, _, body, kw)) = f.client.patches
    assert kw["force"] is False
    assert body["kind"] == "Deployment"
    assert body["apiVersion"] == "apps/v1"
    assert body["spec"]["template"]["metadata"]["annotations"] == {
        ANNOTATION_CONFIG_HASH: rolled_out.digest
    }
    assert body["metadata"]["labels"] == {LABEL_CONFIG_BASELINE: rolled_out.digest[7:47]}
    assert f.counter.kinds == ["Deployment"]
    ((kind, obj, type_, reason, message),) = f.events()
    assert (kind, obj, type_, reason) == ("Deployment", "web", "Normal", "ConfigChanged")
    assert message.startswith("ConfigBundle(s) app-conf changed (ConfigMaps a)")


def test_in_sync_writes_nothing_however_often_it_is_reconciled() -> None:
    f = Fixture(configmap("a"))
    f.workloads.add(stale(workload(volumes=["a"])))
    f.converge()
    f.client.patches.clear()
    for _ in range(5):  # resyncs, restarts, unrelated events
        assert f.reconciler.reconcile("demo/web").action is Action.NONE
    assert f.client.patches == []
    assert f.counter.kinds == ["Deployment"]


def test_two_bundles_changed_together_give_one_write_naming_both() -> None:
    f = Fixture(configmap("a", {"k": "1"}), configmap("b", {"k": "1"}), configmap("c"))
    f.workloads.add(stale(workload(volumes=["a", "b", "c"])))
    first = f.converge()
    f.client.patches.clear()
    f.recorder.clear()

    assert f.change(configmap("a", {"k": "2"})) == ["demo/web"]
    held = f.reconciler.reconcile("demo/web")  # the controller runs the key at once
    assert held.requeue_after == pytest.approx(1.0)
    f.clock.step(0.4)
    assert f.change(configmap("b", {"k": "2"})) == ["demo/web"]
    held = f.reconciler.reconcile("demo/web")
    assert held.requeue_after == pytest.approx(1.0)  # a second change restarts the window
    assert f.client.patches == []

    f.clock.step(1.0)
    done = f.reconciler.reconcile("demo/web")
    assert done.written
    assert done.digest != first
    assert len(f.client.patches) == 1
    ((_, _, _, _, message),) = f.events()
    assert "ConfigBundle(s) a, b changed" in message
    assert "c" not in message.split("changed")[0]
    assert f.counter.kinds == ["Deployment", "Deployment"]
    assert len(f.coalescer) == 0


def test_a_cache_behind_the_own_apply_does_not_apply_the_same_digest_again() -> None:
    """The workload controller's status update, older than cbop's apply, reaches the
    cache first and queues the key again: no second apply of the same digest (a
    duplicate the rollout e2e test caught after a Deployment was resumed)."""
    f = Fixture(configmap("a"))
    f.workloads.add(stale(workload(volumes=["a"])))  # resourceVersion 10
    first = f.reconciler.reconcile("demo/web")
    assert first.written  # the apply answered resourceVersion 100
    f.workloads.add(at_version(stale(workload(volumes=["a"])), 60))  # a status update before it
    behind = f.reconciler.reconcile("demo/web")
    assert not behind.written
    assert behind.action is Action.NONE
    assert len(f.client.patches) == 1
    f.workloads.add(at_version(rolled(workload(volumes=["a"]), first.digest), 100))
    assert f.reconciler.reconcile("demo/web").action is Action.NONE
    # Someone puts the old baseline back afterwards: a newer version, written again.
    f.workloads.add(at_version(stale(workload(volumes=["a"])), 120))
    assert f.reconciler.reconcile("demo/web").written
    assert len(f.client.patches) == 2
    assert f.counter.kinds == ["Deployment", "Deployment"]


def test_a_new_digest_is_applied_even_while_the_cache_is_behind() -> None:
    f = Fixture(configmap("a", {"k": "1"}))
    f.workloads.add(stale(workload(volumes=["a"])))
    assert f.reconciler.reconcile("demo/web").written
    f.workloads.add(at_version(stale(workload(volumes=["a"])), 60))
    f.change(configmap("a", {"k": "2"}))
    f.clock.step(1.0)
    assert f.reconciler.reconcile("demo/web").written
    assert len(f.client.patches) == 2


@pytest.mark.parametrize("cached_rv", ["", "0010", "abc"], ids=["empty", "zeros", "letters"])
def test_resource_versions_that_cannot_be_ordered_fall_back_to_applying(cached_rv: str) -> None:
    f = Fixture(configmap("a"))
    f.workloads.add(stale(workload(volumes=["a"])))
    assert f.reconciler.reconcile("demo/web").written
    f.workloads.add(at_version(stale(workload(volumes=["a"])), cached_rv))
    assert f.reconciler.reconcile("demo/web").written


def test_a_recreated_workload_of_the_same_name_is_applied() -> None:
    f = Fixture(configmap("a"))
    f.workloads.add(stale(workload(volumes=["a"])))
    assert f.reconciler.reconcile("demo/web").written
    recreated = at_version(stale(workload(volumes=["a"])), 60)
    recreated["metadata"] = {**recreated["metadata"], "uid": "uid-web-2"}
    f.workloads.add(recreated)
    assert f.reconciler.reconcile("demo/web").written


def test_a_change_undone_within_the_window_writes_nothing() -> None:
    f = Fixture(configmap("a", {"k": "1"}))
    f.workloads.add(stale(workload(volumes=["a"])))
    f.converge()
    f.client.patches.clear()
    f.change(configmap("a", {"k": "edited by hand"}))
    assert f.reconciler.reconcile("demo/web").requeue_after
    f.change(configmap("a", {"k": "1"}))  # cbop's bundle reconcile restores it
    f.clock.step(1.0)
    assert f.reconciler.reconcile("demo/web").action is Action.NONE
    assert f.client.patches == []
    assert len(f.coalescer) == 0


def test_changes_that_never_stop_are_written_after_the_max_delay() -> None:
    f = Fixture(configmap("a", {"k": "0"}))
    f.workloads.add(stale(workload(volumes=["a"])))
    f.converge()
    f.client.patches.clear()
    for i in range(1, 12):
        f.change(configmap("a", {"k": str(i)}))
        result = f.reconciler.reconcile("demo/web")
        if result.written:
            break
        f.clock.step(0.5)
    assert len(f.client.patches) == 1
    assert i == 11  # 5 s of changes every 0.5 s: the bound, not the quiet, released it


def test_a_workload_event_without_a_configmap_change_is_not_held_back() -> None:
    f = Fixture(configmap("a"))
    f.workloads.add(stale(workload(volumes=["a"])))
    result = f.reconciler.reconcile("demo/web")
    assert result.written
    assert result.requeue_after is None


def test_the_mapper_finds_readers_in_the_configmaps_namespace_only() -> None:
    f = Fixture()
    f.workloads.add(workload("web", volumes=["a"]))
    f.workloads.add(workload("api", env_from=["a"]))
    f.workloads.add(workload("other", volumes=["b"]))
    f.workloads.add(workload("elsewhere", volumes=["a"], namespace="prod"))
    assert f.mapper(configmap("a")) == ["demo/api", "demo/web"]
    assert f.mapper(configmap("a", namespace="prod")) == ["prod/elsewhere"]
    assert f.mapper(configmap("z")) == []


def test_a_paused_deployment_is_not_written_and_reported_once() -> None:
    f = Fixture(configmap("a", bundle="app-conf"))
    f.workloads.add(stale(workload(volumes=["a"], paused=True)))
    for _ in range(3):
        assert f.reconciler.reconcile("demo/web").action is Action.SKIP
    assert f.client.patches == []
    ((_, _, type_, reason, message),) = f.events()
    assert (type_, reason) == ("Normal", "RolloutPaused")
    assert "app-conf" in message
    # Resumed: the Deployment's update event brings the key back, and it is written.
    f.workloads.add(stale(workload(volumes=["a"], generation=2)))
    assert f.reconciler.reconcile("demo/web").written


def _managed_fields(manager: str, operation: str) -> dict[str, Any]:
    """The workload as a fresh GET returns it: ``manager`` owns the annotation."""
    w = stale(workload(volumes=["a"]))
    w["metadata"]["managedFields"] = [
        {
            "manager": FIELD_MANAGER,
            "operation": "Apply",
            "fieldsV1": {"f:metadata": {"f:labels": {f"f:{LABEL_CONFIG_BASELINE}": {}}}},
        },
        {
            "manager": manager,
            "operation": operation,
            "fieldsV1": {
                "f:spec": {
                    "f:template": {
                        "f:metadata": {"f:annotations": {f"f:{ANNOTATION_CONFIG_HASH}": {}}}
                    }
                }
            },
        },
    ]
    return w


def test_a_conflict_with_an_applier_is_reported_and_not_retried_until_the_spec_changes() -> None:
    f = Fixture(configmap("a"))
    f.workloads.add(stale(workload(volumes=["a"])))
    f.client.fresh = _managed_fields("argocd-controller", "Apply")
    f.client.errors.append(
        ApiError(409, "Conflict", 'Apply failed with 1 conflict: conflict with "argocd-controller"')
    )
    with pytest.raises(TerminalError, match="argocd-controller"):
        f.reconciler.reconcile("demo/web")
    ((_, _, type_, reason, message),) = f.events()
    assert (type_, reason) == ("Warning", "RolloutConflict")
    assert "argocd-controller" in message
    assert [kw["force"] for *_, kw in f.client.patches] == [False]
    for _ in range(3):  # status updates of the Deployment bring the key back
        f.reconciler.reconcile("demo/web")
    assert len(f.client.patches) == 1
    assert len(f.events()) == 1
    f.workloads.add(stale(workload(volumes=["a"], generation=2)))  # the other owner let go
    assert f.reconciler.reconcile("demo/web").written
    assert f.counter.kinds == ["Deployment"]


@pytest.mark.parametrize("manager", ["kubectl-rollout", "kubectl-edit", "kubectl"])
def test_keys_a_plain_update_took_are_taken_back_with_force(manager: str) -> None:
    """Case 18: after ``kubectl rollout undo`` (an Update) owns the annotation, the next
    content change is applied again, with force, and the Event says from whom."""
    f = Fixture(configmap("a"))
    f.workloads.add(stale(workload(volumes=["a"])))
    f.client.fresh = _managed_fields(manager, "Update")
    f.client.errors.append(
        ApiError(409, "Conflict", f'Apply failed with 1 conflict: conflict with "{manager}"')
    )
    result = f.reconciler.reconcile("demo/web")
    assert result.written
    assert result.action is Action.APPLY
    assert [kw["force"] for *_, kw in f.client.patches] == [False, True]
    assert f.client.gets == [("deployments", "demo", "web")]
    ((_, _, type_, reason, message),) = f.events()
    assert (type_, reason) == ("Normal", "ConfigChanged")
    assert f"taken back from {manager}" in message
    assert f.counter.kinds == ["Deployment"]


def test_a_conflict_again_after_a_take_back_is_reported() -> None:
    """An applier took the key between the GET and the forced apply: that 409 (from a
    forced apply it cannot come; here scripted) is reported, never looped on."""
    f = Fixture(configmap("a"))
    f.workloads.add(stale(workload(volumes=["a"])))
    f.client.fresh = _managed_fields("kubectl-rollout", "Update")
    conflict = ApiError(409, "Conflict", "Apply failed with 1 conflict")
    f.client.errors.extend([conflict, conflict])
    with pytest.raises(TerminalError):
        f.reconciler.reconcile("demo/web")
    assert [reason for *_, reason, _ in f.events()] == ["RolloutConflict"]
    assert len(f.client.patches) == 2


def test_a_workload_deleted_meanwhile_is_no_error() -> None:
    f = Fixture(configmap("a"))
    f.workloads.add(stale(workload(volumes=["a"])))
    f.client.errors.append(ApiError(404, "NotFound", "gone"))
    result = f.reconciler.reconcile("demo/web")
    assert not result.written
    assert f.counter.kinds == []


@pytest.mark.parametrize("status", [500, 429, 403], ids=["500", "429", "403"])
def test_other_errors_are_raised_for_a_rate_limited_retry(status: int) -> None:
    f = Fixture(configmap("a"))
    f.workloads.add(stale(workload(volumes=["a"])))
    f.client.errors.append(ApiError(status, "x", "failed"))
    with pytest.raises(ApiError):
        f.reconciler.reconcile("demo/web")
    assert f.events() == []
    assert f.reconciler.reconcile("demo/web").written  # the retry


def test_a_workload_not_in_the_cache_is_left_alone() -> None:
    f = Fixture(configmap("a"))
    result = f.reconciler.reconcile("demo/web")
    assert result.action is None
    assert f.client.patches == []


def test_after_a_restart_every_referenced_bundle_is_named() -> None:
    f = Fixture(configmap("a", bundle="one"), configmap("b", bundle="two"))
    f.workloads.add(with_annotation(workload(volumes=["a", "b"]), "sha256:from-before"))
    assert f.reconciler.reconcile("demo/web").written
    ((_, _, _, _, message),) = f.events()
    assert "ConfigBundle(s) one, two changed" in message


def test_a_release_and_a_take_back_are_named_as_such_not_as_changes() -> None:
    """A released ConfigMap leaves the digest, one taken back joins it again: the Event
    names what happened to which ConfigMap, and no bundle as changed."""
    a, b = configmap("a", bundle="one"), configmap("b", bundle="two")
    f = Fixture(a, b)
    f.workloads.add(stale(workload(volumes=["a", "b"])))
    f.converge()
    f.recorder.clear()
    f.change(configmap("b", managed=False))  # released: no longer managed
    f.clock.step(1.0)
    f.converge()
    ((_, _, _, _, released),) = f.events()
    assert released.startswith("ConfigMap(s) b no longer managed by cbop;")
    assert "changed" not in released
    f.recorder.clear()
    f.change(b)  # taken back, content as before
    f.clock.step(1.0)
    f.converge()
    ((_, _, _, _, taken),) = f.events()
    assert taken.startswith("ConfigMap(s) b now managed by ConfigBundle(s) two;")
    assert "changed" not in taken


def test_each_kind_writes_its_own_resource_and_metric_label() -> None:
    f = Fixture(configmap("a"), resource=STATEFULSETS)
    f.workloads.add(stale(workload(volumes=["a"])))
    assert f.reconciler.reconcile("demo/web").written
    ((plural, _, _, body, _),) = f.client.patches
    assert (plural, body["kind"]) == ("statefulsets", "StatefulSet")
    assert f.counter.kinds == ["StatefulSet"]


def test_the_prometheus_counter_has_every_kind_from_zero() -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    metrics = RolloutMetrics(registry)
    f = Fixture(configmap("a"))
    f.reconciler._observer = metrics
    f.workloads.add(stale(workload(volumes=["a"])))
    f.reconciler.reconcile("demo/web")

    def value(kind: str) -> float | None:
        return registry.get_sample_value("cbop_rollouts_total", {"kind": kind})

    assert (value("Deployment"), value("StatefulSet"), value("DaemonSet")) == (1.0, 0.0, 0.0)


def _the_real_parts_fit_the_seams(
    kube: KubeClient, recorder: EventRecorder, lister: Lister, metrics: RolloutMetrics
) -> RolloutReconciler:
    """Never called: mypy checks that cbop's client, recorder, lister and metrics fit."""
    return RolloutReconciler(
        resource=DEPLOYMENTS,
        client=kube,
        workloads=lister,
        configmaps=lister,
        recorder=recorder,
        observer=metrics,
        coalescer=ChangeCoalescer(clock=RealClock()),
    )
