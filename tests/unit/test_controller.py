"""The controller's worker outcome policy and event mapping, with a fake reconciler.

As sample-controller's tests: no server, no informer threads; the queue is real (with a
fake clock), the reconcile outcome is scripted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cbop.controller import Controller, MultiNamespaceLister, _Enqueue, owner_key
from cbop.informers import DeletedFinalStateUnknown
from cbop.kube import ApiError, LeaseNotHeld
from cbop.metrics.controller import ControllerMetrics
from cbop.reconciler import Action, Requeue, Result
from cbop.workqueue import FakeClock, RateLimitingQueue


class _ScriptedReconciler:
    def __init__(self, outcome: Callable[[str], Result]) -> None:
        self.outcome = outcome
        self.calls: list[str] = []

    def reconcile(self, key: str) -> Result:
        self.calls.append(key)
        return self.outcome(key)


def _controller(
    outcome: Callable[[str], Result], clock: FakeClock
) -> tuple[Controller, ControllerMetrics]:
    registry = CollectorRegistry()
    metrics = ControllerMetrics("configbundle", registry)
    ctrl = Controller.__new__(Controller)
    ctrl.queue = RateLimitingQueue(clock=clock)
    ctrl.reconciler = _ScriptedReconciler(outcome)  # type: ignore[assignment]
    ctrl._metrics = metrics
    ctrl._stopping = threading.Event()
    ctrl._threads = []
    ctrl._busy_since = {}
    ctrl._busy_lock = threading.Lock()
    ctrl._wedged_after = 600.0
    ctrl._now = clock.now
    return ctrl, metrics


def _count(metrics: ControllerMetrics, result: str) -> float:
    return float(metrics.reconcile_total.labels("configbundle", result)._value.get())


def _raise(exc: BaseException) -> Callable[[str], Result]:
    def outcome(key: str) -> Result:
        raise exc

    return outcome


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
    clock = FakeClock()
    ctrl, metrics = _controller(outcome, clock)
    ctrl.queue.add("ns/a")
    assert ctrl.process_next_work_item() is True
    assert _count(metrics, result) == 1
    assert ctrl.queue.num_requeues("ns/a") == requeues
    assert metrics.active_workers._value.get() == 0
    if requeues:
        # Rate-limited: back after 5 ms, not at once.
        assert len(ctrl.queue) == 0
        clock.wait_for_waiter()
        clock.step(0.006)
        first, _ = ctrl.queue.get()
        assert first == "ns/a"
    if result == "error":
        assert metrics.reconcile_errors._value.get() == 1
    ctrl.queue.shut_down()


def test_panic_is_counted_and_worker_survives() -> None:
    ctrl, metrics = _controller(_raise(KeyError("bug")), FakeClock())
    ctrl.queue.add("ns/a")
    ctrl.queue.add("ns/b")
    assert ctrl.process_next_work_item()
    assert ctrl.process_next_work_item()
    assert metrics.panics._value.get() == 2
    ctrl.queue.shut_down()


def test_requeue_after_forgets_then_adds_after() -> None:
    clock = FakeClock()
    ctrl, metrics = _controller(lambda k: Result(k, Action.CONFLICT, requeue_after=15.0), clock)
    ctrl.queue.add("ns/a")
    ctrl.process_next_work_item()
    assert _count(metrics, "requeue_after") == 1
    assert ctrl.queue.num_requeues("ns/a") == 0
    assert len(ctrl.queue) == 0
    clock.step(14.0)
    clock.wait_for_waiter()
    assert len(ctrl.queue) == 0
    clock.step(1.0)
    item, _ = ctrl.queue.get()
    assert item == "ns/a"
    ctrl.queue.shut_down()


def test_fenced_write_stops_the_worker_and_drops_the_queue() -> None:
    """A write refused by the fence: no retry of that key, no further key taken."""
    ctrl, metrics = _controller(_raise(LeaseNotHeld("not leader")), FakeClock())
    ctrl.queue.add("ns/a")
    ctrl.queue.add("ns/b")
    assert ctrl.process_next_work_item() is False
    assert ctrl.queue.num_requeues("ns/a") == 0
    assert metrics.panics._value.get() == 0
    assert ctrl.queue.shutting_down()
    # The queued key is dropped, not reconciled.
    assert ctrl.process_next_work_item() is False
    assert ctrl.reconciler.calls == ["ns/a"]  # type: ignore[attr-defined]


def test_stop_workers_drops_queued_keys() -> None:
    """Stopping takes no further key (controller-runtime), unlike a drain."""
    ctrl, _ = _controller(lambda k: Result(k, Action.NONE), FakeClock())
    for name in ("a", "b", "c"):
        ctrl.queue.add(f"ns/{name}")
    ctrl.stop_workers()
    assert ctrl.process_next_work_item() is False
    assert ctrl.reconciler.calls == []  # type: ignore[attr-defined]


def test_a_worker_stuck_in_one_reconcile_fails_liveness() -> None:
    """Wedged, not merely busy: only a reconcile longer than wedged_after fails /healthz."""
    entered, release = threading.Event(), threading.Event()

    def stuck(key: str) -> Result:
        entered.set()
        release.wait(5)
        return Result(key, Action.NONE)

    clock = FakeClock()
    ctrl, _ = _controller(stuck, clock)
    ctrl.bundle_informers = {}
    ctrl.configmap_informers = {}
    ctrl.queue.add("ns/a")
    worker = threading.Thread(target=ctrl.process_next_work_item)
    worker.start()
    assert entered.wait(5)
    clock.step(600.0)
    assert ctrl.healthy(), "busy for exactly wedged_after is not wedged"
    clock.step(0.5)
    assert not ctrl.healthy()
    release.set()
    worker.join(5)
    assert ctrl.healthy()
    ctrl.queue.shut_down()


def test_shutdown_reports_to_worker() -> None:
    ctrl, _ = _controller(lambda k: Result(k, Action.NONE), FakeClock())
    ctrl.queue.shut_down()
    assert ctrl.process_next_work_item() is False


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


@pytest.mark.parametrize(
    ("obj", "key"),
    [
        pytest.param(_cm(BUNDLE_REF), "demo/app", id="controller-ref"),
        pytest.param(
            _cm({**BUNDLE_REF, "apiVersion": "cbop.dev/v1"}), "demo/app", id="version-ignored"
        ),
        pytest.param(_cm({**BUNDLE_REF, "controller": False}), None, id="not-controller"),
        pytest.param(_cm({**BUNDLE_REF, "kind": "Other"}), None, id="other-kind"),
        pytest.param(_cm(None), None, id="no-owner"),
    ],
)
def test_owned_configmap_maps_to_its_bundle(obj: dict[str, Any], key: str | None) -> None:
    assert owner_key(obj) == key


def test_configmap_events_enqueue_old_and_new_owner_and_tombstones() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue(clock=FakeClock())
    handler = _Enqueue(queue, owned=True)
    old = _cm(BUNDLE_REF)
    new = _cm({**BUNDLE_REF, "name": "other"})
    handler.on_update(old, new)
    handler.on_delete(DeletedFinalStateUnknown("demo/cm", _cm({**BUNDLE_REF, "name": "third"})))
    handler.on_add(_cm(None))
    got = sorted(queue.get()[0] or "" for _ in range(3))
    assert got == ["demo/app", "demo/other", "demo/third"]
    assert len(queue) == 0
    queue.shut_down()


class _Lister:
    def __init__(self, objs: list[dict[str, Any]]) -> None:
        self.objs = objs

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return next((o for o in self.objs if o["metadata"]["name"] == name), None)

    def by_index(self, index_name: str, value: str) -> list[dict[str, Any]]:
        return [o for o in self.objs if o["metadata"].get("uid") == value]

    def list(self) -> list[dict[str, Any]]:
        return list(self.objs)


def test_multi_namespace_lister_dispatches_by_namespace() -> None:
    a = {"metadata": {"name": "x", "namespace": "a", "uid": "1"}}
    b = {"metadata": {"name": "x", "namespace": "b", "uid": "1"}}
    lister = MultiNamespaceLister({"a": _Lister([a]), "b": _Lister([b])})
    assert lister.get("a", "x") is a
    assert lister.get("b", "x") is b
    assert lister.get("c", "x") is None
    assert lister.by_index("controller-uid", "1") == [a, b]
    assert len(lister.list()) == 2
