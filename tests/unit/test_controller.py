"""The runtime controller's worker outcome policy and its event-to-key mapping.

As sample-controller's tests: no server, no informer threads; the queue is real (with a
fake clock), the reconcile outcome is scripted, metrics are read from a registry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cbop.configbundle import Action, Requeue, Result
from cbop.informers import DeletedFinalStateUnknown
from cbop.kube import ApiError, LeaseNotHeld
from cbop.metrics.controller import PrometheusControllerMetricsProvider
from cbop.runtime import Controller, EnqueueHandler, enqueue_controller_owner, enqueue_object
from cbop.workqueue import LOW_PRIORITY, NORMAL_PRIORITY, PriorityQueue, RateLimitingQueue
from cbop_testing.clock import FakeClock
from cbop_testing.informerharness import Harness
from cbop_testing.objects import cm, ev
from cbop_testing.waiting import wait_until


class _ScriptedReconciler:
    def __init__(self, outcome: Callable[[str], Result]) -> None:
        self.outcome = outcome
        self.calls: list[str] = []

    def reconcile(self, key: str) -> Result:
        self.calls.append(key)
        return self.outcome(key)


class _Fixture:
    """A controller over a real queue and fake clock, with Prometheus metrics."""

    def __init__(
        self,
        outcome: Callable[[str], Result],
        *,
        queue: RateLimitingQueue[str] | None = None,
        clock: FakeClock | None = None,
    ) -> None:
        self.clock = clock or FakeClock()
        self.registry = CollectorRegistry()
        self.reconciler = _ScriptedReconciler(outcome)
        self.queue: RateLimitingQueue[str] = (
            queue if queue is not None else RateLimitingQueue(clock=self.clock)
        )
        provider = PrometheusControllerMetricsProvider(self.registry)
        self.controller = Controller(
            "demo",
            self.reconciler,
            queue=self.queue,
            workers=2,
            metrics=provider.new_controller_metrics("demo"),
            clock=self.clock,
        )

    def sample(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, {"controller": "demo", **labels})
        assert value is not None, name
        return value

    def results(self, result: str) -> float:
        return self.sample("controller_runtime_reconcile_total", result=result)


def _raise(exc: BaseException) -> Callable[[str], Result]:
    def outcome(key: str) -> Result:
        raise exc

    return outcome


def test_metrics_are_initialised_per_controller() -> None:
    f = _Fixture(lambda k: Result(k, Action.NONE))
    assert f.sample("controller_runtime_max_concurrent_reconciles") == 2
    assert f.sample("controller_runtime_active_workers") == 0
    assert f.sample("controller_runtime_terminal_reconcile_errors_total") == 0
    for result in ("success", "error", "requeue", "requeue_after"):
        assert f.results(result) == 0


@pytest.mark.parametrize(
    ("outcome", "result", "requeues"),
    [
        pytest.param(lambda k: Result(k, Action.NONE), "success", 0, id="success-forgets"),
        pytest.param(_raise(Requeue("409")), "requeue", 1, id="conflict-rate-limited"),
        pytest.param(_raise(ApiError(500, "InternalError", "boom")), "error", 1, id="api-error"),
        pytest.param(_raise(ZeroDivisionError()), "error", 1, id="panic-recovered"),
    ],
)
def test_worker_outcome_policy(
    outcome: Callable[[str], Result], result: str, requeues: int
) -> None:
    f = _Fixture(outcome)
    f.queue.add("ns/a")
    assert f.controller.process_next_work_item() is True
    assert f.results(result) == 1
    assert f.queue.num_requeues("ns/a") == requeues
    assert f.sample("controller_runtime_active_workers") == 0
    if requeues:
        # Rate-limited: back after 5 ms, not at once.
        assert len(f.queue) == 0
        f.clock.wait_for_waiter()
        f.clock.step(0.006)
        first, _ = f.queue.get()
        assert first == "ns/a"
    errors = f.sample("controller_runtime_reconcile_errors_total")
    assert errors == (1 if result == "error" else 0)
    f.queue.shut_down()


def test_panic_is_counted_and_worker_survives() -> None:
    f = _Fixture(_raise(KeyError("bug")))
    f.queue.add("ns/a")
    f.queue.add("ns/b")
    assert f.controller.process_next_work_item()
    assert f.controller.process_next_work_item()
    assert f.sample("controller_runtime_reconcile_panics_total") == 2
    f.queue.shut_down()


def test_requeue_after_forgets_then_adds_after() -> None:
    f = _Fixture(lambda k: Result(k, Action.CONFLICT, requeue_after=15.0))
    f.queue.add("ns/a")
    f.controller.process_next_work_item()
    assert f.results("requeue_after") == 1
    assert f.queue.num_requeues("ns/a") == 0
    assert len(f.queue) == 0
    f.clock.step(14.0)
    f.clock.wait_for_waiter()
    assert len(f.queue) == 0
    f.clock.step(1.0)
    item, _ = f.queue.get()
    assert item == "ns/a"
    f.queue.shut_down()


def test_fenced_write_stops_the_worker_and_drops_the_queue() -> None:
    """A write refused by the fence: no retry of that key, no further key taken."""
    f = _Fixture(_raise(LeaseNotHeld("not leader")))
    f.queue.add("ns/a")
    f.queue.add("ns/b")
    assert f.controller.process_next_work_item() is False
    assert f.queue.num_requeues("ns/a") == 0
    assert f.sample("controller_runtime_reconcile_panics_total") == 0
    assert f.queue.shutting_down()
    # The queued key is dropped, not reconciled.
    assert f.controller.process_next_work_item() is False
    assert f.reconciler.calls == ["ns/a"]


def test_stop_workers_drops_queued_keys() -> None:
    """Stopping takes no further key (controller-runtime), unlike a drain."""
    f = _Fixture(lambda k: Result(k, Action.NONE))
    for name in ("a", "b", "c"):
        f.queue.add(f"ns/{name}")
    f.controller.stop_workers()
    assert f.controller.process_next_work_item() is False
    assert f.reconciler.calls == []


def test_started_workers_reconcile_and_shutdown_waits_for_them() -> None:
    f = _Fixture(lambda k: Result(k, Action.NONE))
    f.controller.start()
    f.queue.add("ns/a")
    wait_until(lambda: f.results("success") == 1)
    assert f.controller.healthy()
    assert f.controller.shutdown(5.0) is True
    assert f.reconciler.calls == ["ns/a"]


def test_a_worker_stuck_in_one_reconcile_fails_liveness() -> None:
    """Wedged, not merely busy: only a reconcile longer than wedged_after fails /healthz."""
    entered, release = threading.Event(), threading.Event()

    def stuck(key: str) -> Result:
        entered.set()
        release.wait(5)
        return Result(key, Action.NONE)

    f = _Fixture(stuck)
    f.queue.add("ns/a")
    worker = threading.Thread(target=f.controller.process_next_work_item)
    worker.start()
    assert entered.wait(5)
    f.clock.step(600.0)
    assert f.controller.healthy(), "busy for exactly wedged_after is not wedged"
    f.clock.step(0.5)
    assert not f.controller.healthy()
    release.set()
    worker.join(5)
    assert f.controller.healthy()
    f.queue.shut_down()


def test_shutdown_reports_to_worker() -> None:
    f = _Fixture(lambda k: Result(k, Action.NONE))
    f.queue.shut_down()
    assert f.controller.process_next_work_item() is False


@pytest.mark.parametrize("got", [LOW_PRIORITY, NORMAL_PRIORITY], ids=["low", "normal"])
def test_a_failed_reconcile_is_retried_at_the_priority_it_was_handed_out_with(got: int) -> None:
    clock = FakeClock()
    queue: PriorityQueue[str] = PriorityQueue(clock=clock)
    f = _Fixture(_raise(ApiError(500, "InternalError", "boom")), queue=queue, clock=clock)
    queue.add("ns/a", got)
    assert f.controller.process_next_work_item()
    assert f.results("error") == 1
    assert clock.wait_for_waiter(0.005)
    clock.step(0.005)
    assert queue.get_with_priority() == ("ns/a", got, False)
    queue.shut_down()


# -- event sources: objects -> keys ----------------------------------------------------


def _cm(owner: dict[str, Any] | None, namespace: str = "demo") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "cm", "namespace": namespace}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"metadata": meta}


BUNDLE_REF = {
    "apiVersion": "cbop.dev/v1alpha1",
    "kind": "ConfigBundle",
    "name": "app",
    "uid": "u",
    "controller": True,
}
to_bundle = enqueue_controller_owner("cbop.dev", "ConfigBundle")


@pytest.mark.parametrize(
    ("obj", "keys"),
    [
        pytest.param(_cm(BUNDLE_REF), ["demo/app"], id="controller-ref"),
        pytest.param(
            _cm({**BUNDLE_REF, "apiVersion": "cbop.dev/v1"}), ["demo/app"], id="version-ignored"
        ),
        pytest.param(_cm({**BUNDLE_REF, "controller": False}), [], id="not-controller"),
        pytest.param(_cm({**BUNDLE_REF, "kind": "Other"}), [], id="other-kind"),
        pytest.param(_cm({**BUNDLE_REF, "apiVersion": "v1"}), [], id="core-group"),
        pytest.param(_cm(None), [], id="no-owner"),
    ],
)
def test_owned_object_maps_to_its_controller_owner(obj: dict[str, Any], keys: list[str]) -> None:
    assert list(to_bundle(obj)) == keys


def test_core_group_owner_is_matched_by_the_empty_group() -> None:
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "parent", "controller": True}
    assert list(enqueue_controller_owner("", "ConfigMap")(_cm(ref))) == ["demo/parent"]


def test_owned_events_enqueue_old_and_new_owner_and_tombstones() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue(clock=FakeClock())
    handler = EnqueueHandler(queue, to_bundle)
    old = _cm(BUNDLE_REF)
    new = _cm({**BUNDLE_REF, "name": "other"})
    handler.on_update(old, new)
    handler.on_delete(DeletedFinalStateUnknown("demo/cm", _cm({**BUNDLE_REF, "name": "third"})))
    handler.on_add(_cm(None))
    got = sorted(queue.get()[0] or "" for _ in range(3))
    assert got == ["demo/app", "demo/other", "demo/third"]
    assert len(queue) == 0
    queue.shut_down()


def _bundle(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "demo", "resourceVersion": rv}}


def _drain(queue: PriorityQueue[str]) -> list[tuple[str | None, int]]:
    got: list[tuple[str | None, int]] = []
    while len(queue):
        item, priority, _ = queue.get_with_priority()
        got.append((item, priority))
        queue.done(item or "")
    return got


def test_initial_list_and_unchanged_updates_go_in_low_real_changes_normal() -> None:
    queue: PriorityQueue[str] = PriorityQueue(clock=FakeClock())
    synced = False
    handler = EnqueueHandler(queue, enqueue_object, synced=lambda: synced)
    handler.on_add(_bundle("listed", "1"))  # initial list: the informer has not synced
    synced = True
    handler.on_add(_bundle("created", "2"))
    resync = _bundle("resynced", "3")
    handler.on_update(resync, resync)
    handler.on_update(_bundle("relisted", "4"), _bundle("relisted", "4"))  # same RV
    handler.on_update(_bundle("changed", "5"), _bundle("changed", "6"))
    handler.on_delete(_bundle("deleted", "7"))
    assert _drain(queue) == [
        ("demo/created", NORMAL_PRIORITY),
        ("demo/changed", NORMAL_PRIORITY),
        ("demo/deleted", NORMAL_PRIORITY),
        ("demo/listed", LOW_PRIORITY),
        ("demo/resynced", LOW_PRIORITY),
        ("demo/relisted", LOW_PRIORITY),
    ]
    queue.shut_down()


def test_listed_objects_that_are_not_converged_go_in_at_normal_priority() -> None:
    """With ``converged``, the initial list puts objects needing work first; after the
    sync, a resync of an unconverged object is still only a look (low)."""
    queue: PriorityQueue[str] = PriorityQueue(clock=FakeClock())
    synced = False
    handler = EnqueueHandler(
        queue,
        enqueue_object,
        synced=lambda: synced,
        converged=lambda obj: obj["metadata"]["name"].startswith("done"),
    )
    for name in ("done-1", "new", "done-2", "changed"):
        handler.on_add(_bundle(name, "1"))
    synced = True
    resync = _bundle("new", "1")
    handler.on_update(resync, resync)
    assert _drain(queue) == [
        ("demo/new", NORMAL_PRIORITY),
        ("demo/changed", NORMAL_PRIORITY),
        ("demo/done-1", LOW_PRIORITY),
        ("demo/done-2", LOW_PRIORITY),
    ]
    queue.shut_down()


def test_a_real_change_overtakes_the_initial_list_through_a_real_informer() -> None:
    h = Harness(resync_period=100.0)
    queue: PriorityQueue[str] = PriorityQueue(clock=FakeClock())
    f = _Fixture(lambda k: Result(k, Action.NONE), queue=queue)
    f.controller.watch(h.informer, enqueue_object)
    try:
        stream = h.start(cm("a", "5"), cm("b", "6"), cm("c", "7"), rv="10")
        wait_until(lambda: queue.ready_by_priority() == {LOW_PRIORITY: 3})
        stream.push(ev("MODIFIED", cm("c", "11", k="1")), ev("ADDED", cm("d", "12")))
        wait_until(lambda: queue.ready_by_priority() == {NORMAL_PRIORITY: 2, LOW_PRIORITY: 2})
        assert _drain(queue) == [
            ("ns/c", NORMAL_PRIORITY),
            ("ns/d", NORMAL_PRIORITY),
            ("ns/a", LOW_PRIORITY),
            ("ns/b", LOW_PRIORITY),
        ]
        # A resync re-delivers every cached object, unchanged: low priority.
        assert h.clock.wait_for_waiter()
        (due,) = h.clock.waiter_deadlines()
        h.clock.set(due)
        wait_until(lambda: queue.ready_by_priority() == {LOW_PRIORITY: 4})
    finally:
        h.stop()
        queue.shut_down()


def test_plain_queue_takes_every_add_when_the_priority_queue_is_off() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue(clock=FakeClock())
    handler = EnqueueHandler(queue, enqueue_object, synced=lambda: False)
    handler.on_add(_bundle("listed", "1"))
    handler.on_update(_bundle("resynced", "2"), _bundle("resynced", "2"))
    assert [queue.get()[0] for _ in range(2)] == ["demo/listed", "demo/resynced"]
    queue.shut_down()
