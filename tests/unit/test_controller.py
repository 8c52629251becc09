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
from cbop.informers import DeletedFinalStateUnknown, ListWatchProblem
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, LeaseNotHeld
from cbop.metrics.controller import ControllerMetrics
from cbop.reconciler import Action, Requeue, Result
from cbop.workqueue import (
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    PriorityQueue,
    RateLimitingQueue,
)
from cbop_testing.clock import FakeClock
from tests.unit.test_informer import Harness, cm, ev, wait_until


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
    handler = _Enqueue(queue, owned=False, synced=lambda: synced)
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


def test_a_real_change_overtakes_the_initial_list_through_a_real_informer() -> None:
    h = Harness(resync_period=100.0)
    queue: PriorityQueue[str] = PriorityQueue(clock=FakeClock())
    h.informer.add_event_handler(_Enqueue(queue, owned=False, synced=h.informer.has_synced))
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
    handler = _Enqueue(queue, owned=False, synced=lambda: False)
    handler.on_add(_bundle("listed", "1"))
    handler.on_update(_bundle("resynced", "2"), _bundle("resynced", "2"))
    assert [queue.get()[0] for _ in range(2)] == ["demo/listed", "demo/resynced"]
    queue.shut_down()


@pytest.mark.parametrize("got", [LOW_PRIORITY, NORMAL_PRIORITY], ids=["low", "normal"])
def test_a_failed_reconcile_is_retried_at_the_priority_it_was_handed_out_with(got: int) -> None:
    clock = FakeClock()
    ctrl, metrics = _controller(_raise(ApiError(500, "InternalError", "boom")), clock)
    ctrl.queue = PriorityQueue(clock=clock)
    ctrl.queue.add("ns/a", got)
    assert ctrl.process_next_work_item()
    assert _count(metrics, "error") == 1
    assert clock.wait_for_waiter(0.005)
    clock.step(0.005)
    assert ctrl.queue.get_with_priority() == ("ns/a", got, False)
    ctrl.queue.shut_down()


@pytest.mark.parametrize("priority_queue", [True, False], ids=["priority", "plain"])
def test_the_controller_builds_the_queue_the_flag_asks_for(priority_queue: bool) -> None:
    ctrl = Controller(
        None,  # type: ignore[arg-type]  # the informers are built, never started
        resync_period=0,
        priority_queue=priority_queue,
    )
    assert isinstance(ctrl.queue, PriorityQueue) is priority_queue
    assert isinstance(ctrl.queue, RateLimitingQueue)
    ctrl.queue.shut_down()


class _StubInformer:
    """What the controller reads of an informer: name, sync state, current problem."""

    def __init__(
        self, name: str, *, synced: bool = False, problem: ListWatchProblem | None = None
    ) -> None:
        self.name = name
        self.synced = synced
        self.current = problem
        self.sync_calls = 0
        self.sync_after: int | None = None

    def has_synced(self) -> bool:
        return self.synced

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        self.sync_calls += 1
        if self.sync_after is not None and self.sync_calls >= self.sync_after:
            self.synced, self.current = True, None
        return self.synced

    def problem(self) -> ListWatchProblem | None:
        return self.current

    def healthy(self) -> bool:
        # As SharedInformer.healthy: refusals and brief failures count as healthy.
        return self.current is None or self.current.refused or not self.down_long

    down_long = False


def _forbidden_problem(namespace: str | None) -> ListWatchProblem:
    return ListWatchProblem.of(
        "list", CONFIGMAPS, namespace, ApiError(403, "Forbidden", "configmaps is forbidden")
    )


def _with_informers(*informers: _StubInformer) -> Controller:
    ctrl = Controller.__new__(Controller)
    stubs: list[Any] = list(informers)
    ctrl.bundle_informers = {None: stubs[0]}
    ctrl.configmap_informers = {str(i): inf for i, inf in enumerate(stubs[1:])}
    return ctrl


def test_a_refused_list_ends_the_cache_sync_wait_at_once_unless_waited_out() -> None:
    bundles = _StubInformer("configbundles/*", synced=True)
    configmaps = _StubInformer("configmaps/a", problem=_forbidden_problem("a"))
    ctrl = _with_informers(bundles, configmaps)
    assert ctrl.refusals() == [configmaps.current]
    assert ctrl.wait_for_cache_sync(3600.0, poll=0.001) is False
    # Waited out (the long-running operator): the timeout does not run while refused.
    configmaps.sync_after = configmaps.sync_calls + 50
    assert ctrl.wait_for_cache_sync(0.0, wait_out_refusals=True, poll=0.001) is True
    assert ctrl.refusals() == []


def test_cache_sync_wait_ends_on_stop_and_on_timeout_without_refusal() -> None:
    ctrl = _with_informers(_StubInformer("configbundles/*"), _StubInformer("configmaps/a"))
    assert ctrl.wait_for_cache_sync(0.0, wait_out_refusals=True, poll=0.001) is False
    stop = threading.Event()
    stop.set()
    refused = _StubInformer("configmaps/b", problem=_forbidden_problem("b"))
    ctrl = _with_informers(_StubInformer("configbundles/*"), refused)
    assert ctrl.wait_for_cache_sync(0.0, stop=stop, wait_out_refusals=True, poll=0.001) is False


def test_readiness_has_one_check_per_informer_naming_what_is_wrong() -> None:
    not_served = ListWatchProblem.of(
        "list", CONFIGBUNDLES, None, ApiError(404, "NotFound", "404 page not found")
    )
    ctrl = _with_informers(
        _StubInformer("configbundles/*", problem=not_served),
        _StubInformer("configmaps/a", synced=True, problem=_forbidden_problem("a")),
        _StubInformer("configmaps/b"),
        _StubInformer("configmaps/c", synced=True),
    )
    checks = {name: check() for name, check in ctrl.readiness_checks().items()}
    assert checks == {
        "informer configbundles/*": (
            "the API server does not serve configbundles of cbop.dev/v1alpha1 (404 on list at "
            "cluster scope (all namespaces)); install the CustomResourceDefinition "
            "configbundles.cbop.dev"
        ),
        "informer configmaps/a": (
            'forbidden to list configmaps in namespace "a" (403): configmaps is forbidden'
        ),
        "informer configmaps/b": "the first list is in progress",
        "informer configmaps/c": None,
    }


def test_readiness_ignores_a_brief_watch_failure_but_not_a_long_one() -> None:
    """A watch that timed out and is being re-established does not fail readiness; one
    that has been down longer than ``unhealthy_after`` does, naming the failure."""
    timeout = ListWatchProblem.of(
        "watch", CONFIGMAPS, "a", ApiError(0, "Timeout", "watch stream broken: read timed out")
    )
    brief = _StubInformer("configmaps/a", synced=True, problem=timeout)
    ctrl = _with_informers(_StubInformer("configbundles/*", synced=True), brief)
    assert ctrl.readiness_checks()["informer configmaps/a"]() is None
    brief.down_long = True
    message = ctrl.readiness_checks()["informer configmaps/a"]()
    assert message is not None
    assert "read timed out" in message
