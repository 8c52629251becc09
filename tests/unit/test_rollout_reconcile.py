"""The rollout reconciler against the fake API server, CacheListers, a FakeRecorder, fake time.

As sample-controller's tests: call the sync handler directly and compare the recorded
API actions with the expected ones.
"""

from __future__ import annotations

from typing import Any

import pytest

from cbop.clock import RealClock
from cbop.informers import Lister
from cbop.kube import (
    CONFIGMAPS,
    DEPLOYMENTS,
    NAMESPACES,
    STATEFULSETS,
    ApiError,
    KubeClient,
    Resource,
)
from cbop.metrics.rollout import RolloutMetrics
from cbop.rollout import (
    ANNOTATION_CONFIG_HASH,
    CONFIGMAP_INDEX,
    FIELD_MANAGER,
    LABEL_CONFIG_BASELINE,
    Action,
    ChangeCoalescer,
    RolloutObserver,
    RolloutReconciler,
    configmap_mapper,
    index_by_configmap,
)
from cbop.rollout.decision import EMPTY_DIGEST
from cbop.runtime import TerminalError
from cbop.runtime.events import EventRecorder
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import CacheLister, FakeKube, FakeRecorder, ObjectTracker, errors, fail
from cbop_testing.objects import configmap, rolled, with_annotation, workload

#: A baseline no content here hashes to: the workload was rolled for older content.
OLD = "sha256:" + "0" * 64


def stale(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` rolled for content that has changed since: the next reconcile applies."""
    return rolled(obj, OLD)


class Counter:
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def rolled_out(self, kind: str) -> None:
        self.kinds.append(kind)


#: The arguments of an apply the tests compare.
APPLY_OPTIONS = ("patch_type", "field_manager", "force")


class Fixture:
    """A FakeKube holding the workloads (managedFields written, as a server's reads
    show them), CacheListers the test syncs from it, a FakeRecorder, fake time."""

    def __init__(
        self,
        *cms: dict[str, Any],
        resource: Resource = DEPLOYMENTS,
        observer: RolloutObserver | None = None,
    ) -> None:
        self.resource = resource
        self.clock = FakeClock(100.0)
        self.kube = FakeKube(ObjectTracker(write_managed_fields=True, namespace_lifecycle=True))
        for ns in ("demo", "prod"):
            self.kube.tracker.add(NAMESPACES, {"metadata": {"name": ns}})
        self.workloads = CacheLister(indexers={CONFIGMAP_INDEX: index_by_configmap})
        self.configmaps = CacheLister(cms)
        self.recorder = FakeRecorder()
        self.counter = Counter()
        self.coalescer = ChangeCoalescer(window=1.0, max_delay=5.0, clock=self.clock)
        self.mapper = configmap_mapper(self.workloads, self.coalescer)
        self.reconciler = RolloutReconciler(
            resource=resource,
            client=self.kube,
            workloads=self.workloads,
            configmaps=self.configmaps,
            recorder=self.recorder,
            observer=observer or self.counter,
            coalescer=self.coalescer,
        )

    def seed(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` on the server as it is, and let the cache catch up."""
        stored = self.kube.tracker.add(self.resource, obj)
        self.sync()
        return stored

    def sync(self) -> None:
        """The cache catches up with the server (the watch events arrived)."""
        self.workloads.sync(self.kube.tracker, self.resource)

    def stored(self, name: str = "web") -> dict[str, Any]:
        """The workload as the server stores it."""
        return self.kube.tracker.get(self.resource, "demo", name)

    def patches(self) -> list[tuple[str, str | None, str | None, Any, dict[str, Any]]]:
        """The patches sent: (plural, namespace, name, body, the apply's arguments)."""
        return [
            (a.resource, a.namespace, a.name, a.body, {k: a.options[k] for k in APPLY_OPTIONS})
            for a in self.kube.write_actions()
            if a.verb == "patch"
        ]

    def events(self) -> list[tuple[str, str, str, str, str]]:
        """The Events recorded: (kind, name, type, reason, message)."""
        return [(e.kind, e.name, e.type, e.reason, e.message) for e in self.recorder.recorded]

    def change(self, cm: dict[str, Any]) -> list[str]:
        """A ConfigMap event: the cache updates, then the map function runs."""
        self.configmaps.add(cm)
        return self.mapper(cm)

    def converge(self, key: str = "demo/web") -> str:
        """Reconcile once and let the cache catch up with what it wrote, as the watch
        event of the apply would."""
        result = self.reconciler.reconcile(key)
        assert result.written
        self.sync()
        return result.digest

    def status_update(self) -> dict[str, Any]:
        """The workload controller writes the status; return what the server answered."""
        current = self.stored()
        current["status"] = {"observedGeneration": current["metadata"]["generation"]}
        return self.kube.tracker.update(self.resource, "demo", "web", current, "status")


def at_version(obj: dict[str, Any], rv: int | str) -> dict[str, Any]:
    """``obj`` as the cache holds it at resourceVersion ``rv``."""
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}


def version(obj: dict[str, Any]) -> int:
    """The resourceVersion the server gave ``obj``."""
    return int(obj["metadata"]["resourceVersion"])


def test_first_sight_records_the_baseline_and_rolls_nothing() -> None:
    """Case 17: opting in writes the baseline label only (no template change, so the
    generation stays); the next content change rolls once."""
    f = Fixture(configmap("a", {"k": "1"}, bundle="app-conf"))
    f.seed(workload(volumes=["a"]))
    result = f.reconciler.reconcile("demo/web")
    assert result.action is Action.RECORD
    assert result.written
    ((plural, ns, name, body, kw),) = f.patches()
    assert (plural, ns, name) == ("deployments", "demo", "web")
    assert kw == {"patch_type": "apply", "field_manager": FIELD_MANAGER, "force": False}
    assert body["metadata"]["labels"] == {LABEL_CONFIG_BASELINE: result.digest[7:47]}
    assert "spec" not in body
    assert f.stored()["metadata"]["generation"] == 1
    assert f.counter.kinds == []
    assert f.events() == []

    f.sync()
    assert f.reconciler.reconcile("demo/web").action is Action.NONE
    f.change(configmap("a", {"k": "2"}, bundle="app-conf"))
    f.clock.step(1.0)
    rolled_out = f.reconciler.reconcile("demo/web")
    assert rolled_out.action is Action.APPLY
    (_, (_, _, _, body, kw)) = f.patches()
    assert kw["force"] is False
    assert body["kind"] == "Deployment"
    assert body["apiVersion"] == "apps/v1"
    assert body["spec"]["template"]["metadata"]["annotations"] == {
        ANNOTATION_CONFIG_HASH: rolled_out.digest
    }
    assert body["metadata"]["labels"] == {LABEL_CONFIG_BASELINE: rolled_out.digest[7:47]}
    assert f.stored()["metadata"]["generation"] == 2
    assert f.counter.kinds == ["Deployment"]
    ((kind, obj, type_, reason, message),) = f.events()
    assert (kind, obj, type_, reason) == ("Deployment", "web", "Normal", "ConfigChanged")
    assert message.startswith("ConfigBundle(s) app-conf changed (ConfigMaps a)")


def test_a_required_configmap_is_asked_for_only_until_the_baseline() -> None:
    """cbop caches only its own ConfigMaps: a required reference missing from the cache
    is asked for with one GET, and only while the workload has no baseline. Absent
    (404): nothing is written, the pods wait for it. Another owner's: the baseline of
    nothing at once. Once a baseline is recorded, no GET again."""
    f = Fixture()
    w = workload(volumes=["other"])
    f.seed(w)
    waiting = f.reconciler.reconcile("demo/web")
    assert (waiting.action, waiting.written) == (Action.NONE, False)
    gets = [(a.verb, a.resource, a.name) for a in f.kube.actions if a.verb == "get"]
    assert gets == [("get", "configmaps", "other")]
    assert f.kube.write_actions() == []
    f.kube.tracker.add(CONFIGMAPS, configmap("other", managed=False))
    f.kube.clear_actions()
    recorded = f.reconciler.reconcile("demo/web")
    assert (recorded.action, recorded.digest) == (Action.RECORD, EMPTY_DIGEST)
    f.sync()
    f.kube.clear_actions()
    assert f.reconciler.reconcile("demo/web").action is Action.NONE
    assert [a for a in f.kube.actions if a.verb == "get"] == []


def test_a_workload_reading_no_managed_configmap_costs_one_write_then_rolls_once() -> None:
    """Case 32: first seen reading only an optional ConfigMap that does not exist, the
    workload gets the baseline of nothing: one apply of the label (no pins entry, no
    template change), then none, also after a restart of cbop. The ConfigMap a bundle
    creates later rolls it once."""
    f = Fixture()
    w = workload()
    w["spec"]["template"]["spec"]["containers"][0]["envFrom"] = [
        {"configMapRef": {"name": "opt", "optional": True}}
    ]
    f.seed(w)
    recorded = f.reconciler.reconcile("demo/web")
    assert (recorded.action, recorded.written) == (Action.RECORD, True)
    assert recorded.digest == EMPTY_DIGEST
    ((plural, _, _, body, _),) = f.patches()
    assert plural == "deployments"
    assert body["metadata"]["labels"] == {LABEL_CONFIG_BASELINE: EMPTY_DIGEST[7:47]}
    assert "spec" not in body
    assert len(f.kube.write_actions()) == 1
    assert f.stored()["metadata"]["generation"] == 1
    f.sync()
    f.kube.clear_actions()
    # A new process: nothing in memory, the label on the workload.
    again = RolloutReconciler(
        resource=DEPLOYMENTS, client=f.kube, workloads=f.workloads, configmaps=f.configmaps
    )
    for reconciler in (f.reconciler, again, f.reconciler):
        assert reconciler.reconcile("demo/web").action is Action.NONE
    assert f.kube.write_actions() == []

    assert f.change(configmap("opt", {"K": "v"})) == ["demo/web"]
    f.clock.step(1.0)
    rolled_out = f.reconciler.reconcile("demo/web")
    assert rolled_out.action is Action.APPLY
    ((_, _, _, body, _),) = f.patches()
    assert body["spec"]["template"]["metadata"]["annotations"] == {
        ANNOTATION_CONFIG_HASH: rolled_out.digest
    }
    assert f.stored()["metadata"]["generation"] == 2
    assert f.counter.kinds == ["Deployment"]
    ((_, _, _, reason, message),) = f.events()
    assert reason == "ConfigChanged"
    assert message.startswith("ConfigMap(s) opt now managed by ConfigBundle(s) opt;")


def test_in_sync_writes_nothing_however_often_it_is_reconciled() -> None:
    f = Fixture(configmap("a"))
    f.seed(stale(workload(volumes=["a"])))
    f.converge()
    f.kube.clear_actions()
    for _ in range(5):  # resyncs, restarts, unrelated events
        assert f.reconciler.reconcile("demo/web").action is Action.NONE
    assert f.patches() == []
    assert f.counter.kinds == ["Deployment"]


def test_two_bundles_changed_together_give_one_write_naming_both() -> None:
    f = Fixture(configmap("a", {"k": "1"}), configmap("b", {"k": "1"}), configmap("c"))
    f.seed(stale(workload(volumes=["a", "b", "c"])))
    first = f.converge()
    f.kube.clear_actions()
    f.recorder.clear()

    assert f.change(configmap("a", {"k": "2"})) == ["demo/web"]
    held = f.reconciler.reconcile("demo/web")  # the controller runs the key at once
    assert held.requeue_after == pytest.approx(1.0)
    f.clock.step(0.4)
    assert f.change(configmap("b", {"k": "2"})) == ["demo/web"]
    held = f.reconciler.reconcile("demo/web")
    assert held.requeue_after == pytest.approx(1.0)  # a second change restarts the window
    assert f.patches() == []

    f.clock.step(1.0)
    done = f.reconciler.reconcile("demo/web")
    assert done.written
    assert done.digest != first
    assert len(f.patches()) == 1
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
    seeded = f.seed(stale(workload(volumes=["a"])))
    status = f.status_update()  # not in the cache yet
    first = f.reconciler.reconcile("demo/web")
    assert first.written
    assert version(seeded) < version(status) < version(f.stored())
    f.workloads.add(status)  # the status update arrives, the apply's event not yet
    behind = f.reconciler.reconcile("demo/web")
    assert not behind.written
    assert behind.action is Action.NONE
    assert len(f.patches()) == 1
    f.sync()
    assert f.reconciler.reconcile("demo/web").action is Action.NONE
    # Someone puts the old baseline back afterwards: a newer version, written again
    # (a plain update took the keys, so they are taken back with force).
    f.kube.tracker.put(f.resource, stale(f.stored()), field_manager="kubectl-edit")
    f.sync()
    assert f.reconciler.reconcile("demo/web").written
    assert [kw["force"] for *_, kw in f.patches()] == [False, False, True]
    assert f.counter.kinds == ["Deployment", "Deployment"]


def test_a_new_digest_is_applied_even_while_the_cache_is_behind() -> None:
    f = Fixture(configmap("a", {"k": "1"}))
    f.seed(stale(workload(volumes=["a"])))
    status = f.status_update()
    assert f.reconciler.reconcile("demo/web").written
    f.workloads.add(status)  # older than the apply
    f.change(configmap("a", {"k": "2"}))
    f.clock.step(1.0)
    assert f.reconciler.reconcile("demo/web").written
    assert len(f.patches()) == 2


@pytest.mark.parametrize("cached_rv", ["", "0010", "abc"], ids=["empty", "zeros", "letters"])
def test_resource_versions_that_cannot_be_ordered_fall_back_to_applying(cached_rv: str) -> None:
    f = Fixture(configmap("a"))
    f.seed(stale(workload(volumes=["a"])))
    assert f.reconciler.reconcile("demo/web").written
    # A cache entry whose resourceVersion no server of the tests would hand out.
    f.workloads.add(at_version(stale(workload(volumes=["a"])), cached_rv))
    assert f.reconciler.reconcile("demo/web").written


def test_a_recreated_workload_of_the_same_name_is_applied() -> None:
    f = Fixture(configmap("a"))
    seeded = f.seed(stale(workload(volumes=["a"])))
    assert f.reconciler.reconcile("demo/web").written
    # Another object of the same name in the cache, at a version older than the apply:
    # only its uid tells it apart.
    recreated = at_version(stale(workload(volumes=["a"])), version(seeded))
    recreated["metadata"] = {**recreated["metadata"], "uid": "uid-web-2"}
    f.workloads.add(recreated)
    assert f.reconciler.reconcile("demo/web").written


def test_a_change_undone_within_the_window_writes_nothing() -> None:
    f = Fixture(configmap("a", {"k": "1"}))
    f.seed(stale(workload(volumes=["a"])))
    f.converge()
    f.kube.clear_actions()
    f.change(configmap("a", {"k": "edited by hand"}))
    assert f.reconciler.reconcile("demo/web").requeue_after
    f.change(configmap("a", {"k": "1"}))  # cbop's bundle reconcile restores it
    f.clock.step(1.0)
    assert f.reconciler.reconcile("demo/web").action is Action.NONE
    assert f.patches() == []
    assert len(f.coalescer) == 0


def test_changes_that_never_stop_are_written_after_the_max_delay() -> None:
    f = Fixture(configmap("a", {"k": "0"}))
    f.seed(stale(workload(volumes=["a"])))
    f.converge()
    f.kube.clear_actions()
    for i in range(1, 12):
        f.change(configmap("a", {"k": str(i)}))
        result = f.reconciler.reconcile("demo/web")
        if result.written:
            break
        f.clock.step(0.5)
    assert len(f.patches()) == 1
    assert i == 11  # 5 s of changes every 0.5 s: the bound, not the quiet, released it


def test_a_workload_event_without_a_configmap_change_is_not_held_back() -> None:
    f = Fixture(configmap("a"))
    f.seed(stale(workload(volumes=["a"])))
    result = f.reconciler.reconcile("demo/web")
    assert result.written
    assert result.requeue_after is None


def test_the_mapper_finds_readers_in_the_configmaps_namespace_only() -> None:
    f = Fixture()
    f.seed(workload("web", volumes=["a"]))
    f.seed(workload("api", env_from=["a"]))
    f.seed(workload("other", volumes=["b"]))
    f.seed(workload("elsewhere", volumes=["a"], namespace="prod"))
    assert f.mapper(configmap("a")) == ["demo/api", "demo/web"]
    assert f.mapper(configmap("a", namespace="prod")) == ["prod/elsewhere"]
    assert f.mapper(configmap("z")) == []


def test_a_paused_deployment_is_not_written_and_reported_once() -> None:
    f = Fixture(configmap("a", bundle="app-conf"))
    f.seed(stale(workload(volumes=["a"], paused=True)))
    for _ in range(3):
        assert f.reconciler.reconcile("demo/web").action is Action.SKIP
    assert f.patches() == []
    ((_, _, type_, reason, message),) = f.events()
    assert (type_, reason) == ("Normal", "RolloutPaused")
    assert "app-conf" in message
    # Resumed: the Deployment's update event brings the key back, and it is written.
    f.kube.tracker.put(f.resource, stale(workload(volumes=["a"])))
    f.sync()
    assert f.stored()["metadata"]["generation"] == 2
    assert f.reconciler.reconcile("demo/web").written


def _applied_by(f: Fixture, manager: str) -> None:
    """``manager`` server-side applies the config-hash annotation of the workload."""
    f.kube.tracker.patch(
        f.resource,
        "demo",
        "web",
        {
            "apiVersion": f.resource.api_version,
            "kind": f.resource.kind,
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"template": {"metadata": {"annotations": {ANNOTATION_CONFIG_HASH: OLD}}}},
        },
        patch_type="apply",
        field_manager=manager,
    )
    f.sync()


def test_a_conflict_with_an_applier_is_reported_and_not_retried_until_the_spec_changes() -> None:
    f = Fixture(configmap("a"))
    f.seed(stale(workload(volumes=["a"])))
    _applied_by(f, "argocd-controller")
    with pytest.raises(TerminalError, match="argocd-controller"):
        f.reconciler.reconcile("demo/web")
    ((_, _, type_, reason, message),) = f.events()
    assert (type_, reason) == ("Warning", "RolloutConflict")
    assert "argocd-controller" in message
    assert [kw["force"] for *_, kw in f.patches()] == [False]
    assert f.stored()["spec"]["template"]["metadata"]["annotations"] == {
        ANNOTATION_CONFIG_HASH: OLD
    }
    for _ in range(3):  # status updates of the Deployment bring the key back
        f.status_update()
        f.sync()
        f.reconciler.reconcile("demo/web")
    assert len(f.patches()) == 1
    assert len(f.events()) == 1
    # The other owner lets go (applies without the annotation), which changes the spec.
    f.kube.tracker.patch(
        f.resource,
        "demo",
        "web",
        {"metadata": {"name": "web", "namespace": "demo"}},
        patch_type="apply",
        field_manager="argocd-controller",
    )
    f.sync()
    assert f.stored()["metadata"]["generation"] == 2
    assert f.reconciler.reconcile("demo/web").written
    assert f.counter.kinds == ["Deployment"]


def _updated_by(f: Fixture, manager: str) -> None:
    """``manager`` writes the config-hash annotation with a plain update (a merge patch)."""
    f.kube.tracker.patch(
        f.resource,
        "demo",
        "web",
        {"spec": {"template": {"metadata": {"annotations": {ANNOTATION_CONFIG_HASH: "undone"}}}}},
        field_manager=manager,
    )
    f.sync()


@pytest.mark.parametrize("manager", ["kubectl-rollout", "kubectl-edit", "kubectl"])
def test_keys_a_plain_update_took_are_taken_back_with_force(manager: str) -> None:
    """Case 18: after ``kubectl rollout undo`` (an Update) owns the annotation, the next
    content change is applied again, with force, and the Event says from whom."""
    f = Fixture(configmap("a"))
    f.seed(stale(workload(volumes=["a"])))
    _updated_by(f, manager)
    f.kube.clear_actions()
    result = f.reconciler.reconcile("demo/web")
    assert result.written
    assert result.action is Action.APPLY
    assert [kw["force"] for *_, kw in f.patches()] == [False, True]
    assert [a.key for a in f.kube.actions if a.verb == "get"] == [
        ("get", "deployments", "demo", "web")
    ]
    assert f.stored()["spec"]["template"]["metadata"]["annotations"] == {
        ANNOTATION_CONFIG_HASH: result.digest
    }
    ((_, _, type_, reason, message),) = f.events()
    assert (type_, reason) == ("Normal", "ConfigChanged")
    assert f"taken back from {manager}" in message
    assert f.counter.kinds == ["Deployment"]


def test_a_conflict_again_after_a_take_back_is_reported() -> None:
    """An applier took the key between the GET and the forced apply: that 409 (from a
    forced apply a server's state cannot give it; here scripted) is reported, never
    looped on."""
    f = Fixture(configmap("a"))
    f.seed(stale(workload(volumes=["a"])))
    _updated_by(f, "kubectl-rollout")
    f.kube.prepend_reactor(
        "patch",
        "deployments",
        fail(
            lambda a: errors.apply_conflict(DEPLOYMENTS, "web", [("argocd-controller", ".spec")]),
            when=lambda a: bool(a.options.get("force")),
        ),
    )
    f.kube.clear_actions()
    with pytest.raises(TerminalError):
        f.reconciler.reconcile("demo/web")
    assert [reason for *_, reason, _ in f.events()] == ["RolloutConflict"]
    assert len(f.patches()) == 2


def test_a_workload_deleted_meanwhile_is_no_error() -> None:
    """Deleted with its namespace, and the cache has not seen it go: the apply (which
    would create a missing object) finds no namespace, 404."""
    f = Fixture(configmap("a"))
    f.seed(stale(workload(volumes=["a"])))
    f.kube.tracker.remove(f.resource, "demo", "web")
    f.kube.tracker.remove(NAMESPACES, None, "demo")
    result = f.reconciler.reconcile("demo/web")
    assert not result.written
    assert len(f.patches()) == 1
    assert f.counter.kinds == []


@pytest.mark.parametrize("status", [500, 429, 403], ids=["500", "429", "403"])
def test_other_errors_are_raised_for_a_rate_limited_retry(status: int) -> None:
    f = Fixture(configmap("a"))
    f.seed(stale(workload(volumes=["a"])))
    f.kube.prepend_reactor(
        "patch", "deployments", fail(errors.status_error(status, "x", "failed"), times=1)
    )
    with pytest.raises(ApiError):
        f.reconciler.reconcile("demo/web")
    assert f.events() == []
    assert f.reconciler.reconcile("demo/web").written  # the retry


def test_a_workload_not_in_the_cache_is_left_alone() -> None:
    f = Fixture(configmap("a"))
    result = f.reconciler.reconcile("demo/web")
    assert result.action is None
    assert f.kube.actions == []


def test_after_a_restart_every_referenced_bundle_is_named() -> None:
    f = Fixture(configmap("a", bundle="one"), configmap("b", bundle="two"))
    f.seed(with_annotation(workload(volumes=["a", "b"]), "sha256:from-before"))
    assert f.reconciler.reconcile("demo/web").written
    ((_, _, _, _, message),) = f.events()
    assert "ConfigBundle(s) one, two changed" in message


def test_a_release_and_a_take_back_are_named_as_such_not_as_changes() -> None:
    """A released ConfigMap leaves the digest, one taken back joins it again: the Event
    names what happened to which ConfigMap, and no bundle as changed."""
    a, b = configmap("a", bundle="one"), configmap("b", bundle="two")
    f = Fixture(a, b)
    f.seed(stale(workload(volumes=["a", "b"])))
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
    f.seed(stale(workload(volumes=["a"])))
    assert f.reconciler.reconcile("demo/web").written
    ((plural, _, _, body, _),) = f.patches()
    assert (plural, body["kind"]) == ("statefulsets", "StatefulSet")
    assert f.kube.tracker.objects(DEPLOYMENTS) == []
    assert f.counter.kinds == ["StatefulSet"]


def test_the_prometheus_counter_has_every_kind_from_zero() -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    metrics = RolloutMetrics(registry)
    f = Fixture(configmap("a"), observer=metrics)
    f.seed(stale(workload(volumes=["a"])))
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
