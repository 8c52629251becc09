"""SharedInformer decisions against a scripted list/watch fake and a FakeClock."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from cbop.informers import (
    CONTROLLER_UID_INDEX,
    DeletedFinalStateUnknown,
    FuncHandler,
    SharedInformer,
    index_by_controller_uid,
    meta_namespace_key,
    wait_for_cache_sync,
)
from cbop.kube import CONFIGMAPS, ApiError, ConnectionFailed, Resource
from cbop.stop import StopSignal
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import FakeWatch
from cbop_testing.informerharness import Harness, Recorder, ScriptedListWatch
from cbop_testing.objects import bookmark, cm, ev, page
from cbop_testing.waiting import WAIT, wait_until


@pytest.fixture
def harness_factory() -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(**kwargs: Any) -> Harness:
        h = Harness(**kwargs)
        made.append(h)
        return h

    yield make
    for h in made:
        h.stop()


def test_initial_list_syncs_then_watch_events_arrive_in_order(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory()
    stream = h.start(cm("a", "5"), cm("b", "6"), rv="10")
    assert h.rec.wait(2) == [("add", "ns/a", "5"), ("add", "ns/b", "6")]
    assert wait_for_cache_sync(h.informer, timeout=WAIT)
    assert h.informer.has_synced()
    assert h.informer.last_sync_resource_version() == "10"
    assert h.fake.lists == [
        {
            "namespace": None,
            "label_selector": None,
            "field_selector": None,
            "limit": 500,
            "continue_": None,
            "resource_version": "0",
        }
    ]
    w = h.fake.watches[0]
    assert w["resource_version"] == "10"
    assert w["allow_bookmarks"] is True
    assert 300 <= w["timeout_seconds"] < 600
    assert w["read_timeout"] == 90.0

    stream.push(
        ev("MODIFIED", cm("a", "11", k="1")),
        ev("ADDED", cm("c", "12")),
        ev("MODIFIED", cm("a", "13", k="2")),
        ev("DELETED", cm("b", "14")),
        bookmark("20"),
    )
    assert h.rec.wait(6)[2:] == [
        ("update", "ns/a", ("5", "11")),
        ("add", "ns/c", "12"),
        ("update", "ns/a", ("11", "13")),
        ("delete", "ns/b", "14"),
    ]
    wait_until(lambda: h.informer.last_sync_resource_version() == "20")
    lister = h.informer.lister()
    assert sorted(lister.list_keys()) == ["ns/a", "ns/c"]
    a = lister.get("ns", "a")
    assert a is not None
    assert a["data"] == {"k": "2"}
    # Cached objects carry kind/apiVersion and lose managedFields (default transform).
    assert a["kind"] == "ConfigMap"
    assert a["apiVersion"] == "v1"
    assert "managedFields" not in a["metadata"]
    assert h.informer.healthy()
    # The bookmark reached no handler.
    assert len(h.rec.events) == 6


def test_transform_none_keeps_managed_fields(harness_factory: Callable[..., Harness]) -> None:
    h = harness_factory(transform=None)
    h.start(cm("a", "5"))
    h.rec.wait(1)
    a = h.informer.lister().get("ns", "a")
    assert a is not None
    assert a["metadata"]["managedFields"] == [{"manager": "kubectl", "operation": "Apply"}]


def test_paged_list_is_followed_to_the_end(harness_factory: Callable[..., Harness]) -> None:
    h = harness_factory(page_size=2)
    h.fake.list_answers.put(page(cm("a", "1"), cm("b", "2"), rv="30", cont="tok1"))
    h.fake.list_answers.put(page(cm("c", "3"), cm("d", "4"), rv="30", cont="tok2"))
    h.fake.list_answers.put(page(cm("e", "5"), rv="30"))
    h.fake.watch_answers.put(FakeWatch())
    h.informer.start()
    h.fake.wait_watches(1)
    assert [k for _, k, _ in h.rec.wait(5)] == ["ns/a", "ns/b", "ns/c", "ns/d", "ns/e"]
    assert [(c["continue_"], c["resource_version"], c["limit"]) for c in h.fake.lists] == [
        (None, "0", 2),
        ("tok1", None, 2),
        ("tok2", None, 2),
    ]
    assert h.fake.watches[0]["resource_version"] == "30"


def test_expired_continue_token_falls_back_to_one_full_list(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory(page_size=1)
    h.fake.list_answers.put(page(cm("a", "1"), rv="30", cont="tok1"))
    h.fake.list_answers.put(ApiError(410, "Expired", "continue token expired"))
    h.fake.list_answers.put(page(cm("a", "1"), cm("b", "2"), rv="31"))
    h.fake.watch_answers.put(FakeWatch())
    h.informer.start()
    h.fake.wait_watches(1)
    assert [k for _, k, _ in h.rec.wait(2)] == ["ns/a", "ns/b"]
    assert h.fake.lists[2].get("limit") is None
    assert h.fake.lists[2].get("continue_") is None
    assert h.fake.watches[0]["resource_version"] == "31"


def test_gone_relists_and_delivers_missing_keys_as_tombstones(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory()
    stream = h.start(cm("a", "5"), cm("b", "6"), cm("c", "7"), rv="10")
    h.rec.wait(3)
    cached_b = h.informer.lister().get("ns", "b")
    # While the informer was not watching: b was deleted, a changed, d was created.
    h.fake.list_answers.put(page(cm("a", "15"), cm("c", "7"), cm("d", "16"), rv="20"))
    stream2 = FakeWatch()
    h.fake.watch_answers.put(stream2)
    stream.push(
        ApiError.from_status(
            {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
        )
    )
    # As client-go's reflector, the relist waits one (jittered) backoff step.
    assert h.clock.wait_for_waiter()
    (due,) = h.clock.waiter_deadlines()
    assert 0.6 <= due - h.clock.now() <= 0.8
    assert len(h.fake.lists) == 1
    h.clock.step(due - h.clock.now())
    h.fake.wait_lists(2)
    # A relist after 410 is a consistent read (no resourceVersion), as client-go.
    assert h.fake.lists[1]["resource_version"] is None
    h.fake.wait_watches(2)
    events = h.rec.wait(7)[3:]
    assert events == [
        ("update", "ns/a", ("5", "15")),
        ("update", "ns/c", ("7", "7")),
        ("add", "ns/d", "16"),
        ("delete", "ns/b", "tombstone"),
    ]
    tombstone = h.rec.raw[-1][1]
    assert isinstance(tombstone, DeletedFinalStateUnknown)
    assert tombstone.obj is cached_b
    assert sorted(h.informer.lister().list_keys()) == ["ns/a", "ns/c", "ns/d"]
    assert h.fake.watches[1]["resource_version"] == "20"
    # Later events still flow.
    stream2.push(ev("ADDED", cm("e", "21")))
    assert h.rec.wait(8)[-1] == ("add", "ns/e", "21")


def test_transport_failure_rewatches_from_last_rv_without_relisting(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory()
    stream = h.start(cm("a", "5"), rv="10")
    stream.push(ev("MODIFIED", cm("a", "11")), bookmark("12"))
    h.rec.wait(2)
    wait_until(lambda: h.informer.last_sync_resource_version() == "12")

    # The stream goes silent and the read times out; the reconnect is refused twice.
    h.fake.watch_answers.put(ConnectionFailed("connection refused"))
    h.fake.watch_answers.put(ConnectionFailed("connection refused"))
    stream2 = FakeWatch()
    h.fake.watch_answers.put(stream2)
    stream.push(ConnectionFailed("read timed out", timed_out=True))

    # Backoff 0.8 s, then 1.6 s, then 3.2 s; each wait is on the clock.
    for n, delay in ((2, 0.8), (3, 1.6), (4, 3.2)):
        assert h.clock.wait_for_waiter(deadline=h.clock.now() + delay)
        assert len(h.fake.watches) == n - 1
        h.clock.step(delay)
        h.fake.wait_watches(n)
    assert [w["resource_version"] for w in h.fake.watches] == ["10", "12", "12", "12"]
    assert len(h.fake.lists) == 1  # never relisted
    stream2.push(ev("DELETED", cm("a", "13")))
    assert h.rec.wait(3)[-1] == ("delete", "ns/a", "13")


def test_too_many_requests_honours_retry_after(harness_factory: Callable[..., Harness]) -> None:
    h = harness_factory()
    stream = h.start(rv="10")
    h.fake.watch_answers.put(ApiError(429, "TooManyRequests", "slow", retry_after=7.0))
    h.fake.watch_answers.put(FakeWatch())
    stream.push(bookmark("11"))
    stream.end()  # the server ends the watch; re-watch at once ...
    h.fake.wait_watches(2)
    # ... which is answered 429 Retry-After: 7 -> wait 7 s, not the 0.8 s backoff.
    assert h.clock.wait_for_waiter(deadline=h.clock.now() + 7.0)
    h.clock.step(6.9)
    assert h.clock.wait_for_waiter(deadline=h.clock.now() + 0.1)
    assert len(h.fake.watches) == 2
    h.clock.step(0.1)
    h.fake.wait_watches(3)
    assert len(h.fake.lists) == 1
    assert [w["resource_version"] for w in h.fake.watches] == ["10", "11", "11"]


def test_a_watch_that_ends_at_once_without_events_backs_off(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory()
    stream = h.start(rv="10")
    h.fake.watch_answers.put(FakeWatch())
    stream.end()
    assert h.clock.wait_for_waiter(deadline=h.clock.now() + 0.8)
    assert len(h.fake.watches) == 1
    h.clock.step(0.8)
    h.fake.wait_watches(2)


def test_server_error_on_list_backs_off_and_retries(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory()
    h.fake.list_answers.put(ApiError(503, "ServiceUnavailable"))
    h.fake.list_answers.put(page(cm("a", "1"), rv="10"))
    h.fake.watch_answers.put(FakeWatch())
    h.informer.start()
    h.fake.wait_lists(1)
    assert h.clock.wait_for_waiter(deadline=h.clock.now() + 0.8)
    assert not h.informer.has_synced()
    h.clock.step(0.8)
    h.fake.wait_watches(1)
    assert h.rec.wait(1) == [("add", "ns/a", "1")]
    assert [c["resource_version"] for c in h.fake.lists] == ["0", "0"]


def test_resync_redelivers_cached_objects_without_api_calls(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory(resync_period=100.0)
    stream = h.start(cm("a", "5"), cm("b", "6"), rv="10")
    h.rec.wait(2)
    # The resync deadline is the period jittered by a factor in [0.9, 1.1).
    assert h.clock.wait_for_waiter()
    (due,) = h.clock.waiter_deadlines()
    assert 1000.0 + 90.0 <= due < 1000.0 + 110.0
    h.clock.step(due - h.clock.now() - 0.001)
    assert len(h.rec.events) == 2
    h.clock.step(0.001)
    events = h.rec.wait(4)[2:]
    assert sorted(events) == [("update", "ns/a", ("5", "5")), ("update", "ns/b", ("6", "6"))]
    for kind, old, new in h.rec.raw[2:]:
        assert kind == "update"
        assert old is new
    assert len(h.fake.lists) == 1
    assert len(h.fake.watches) == 1
    # The next resync is scheduled again.
    assert h.clock.wait_for_waiter()
    (due2,) = h.clock.waiter_deadlines()
    assert 90.0 <= due2 - h.clock.now() < 110.0
    # A watch event in between is still delivered in order.
    stream.push(ev("MODIFIED", cm("a", "7")))
    assert h.rec.wait(5)[-1] == ("update", "ns/a", ("5", "7"))


def test_resync_disabled_with_zero_period(harness_factory: Callable[..., Harness]) -> None:
    h = harness_factory(resync_period=0)
    h.start(cm("a", "5"))
    h.rec.wait(1)
    assert wait_for_cache_sync(h.informer, timeout=WAIT)
    assert not h.clock.has_waiters()
    h.clock.step(10 * 36000.0)
    assert len(h.rec.events) == 1


def test_handler_exception_does_not_kill_the_informer(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory()
    seen: list[str] = []

    def explode(obj: Mapping[str, Any]) -> None:
        seen.append(obj["metadata"]["name"])
        raise RuntimeError("handler bug")

    h.informer.add_event_handler(FuncHandler(on_add=explode))
    stream = h.start(cm("a", "5"))
    stream.push(ev("ADDED", cm("b", "6")))
    assert h.rec.wait(2) == [("add", "ns/a", "5"), ("add", "ns/b", "6")]
    assert seen == ["a", "b"]
    assert h.informer.healthy()


def test_handler_added_late_gets_the_current_state_first(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory()
    stream = h.start(cm("a", "5"), cm("b", "6"))
    h.rec.wait(2)
    late = Recorder()
    h.informer.add_event_handler(late)
    stream.push(ev("ADDED", cm("c", "7")))
    assert sorted(late.wait(3)[:2]) == [("add", "ns/a", "5"), ("add", "ns/b", "6")]
    assert late.events[2] == ("add", "ns/c", "7")


def test_health_turns_false_while_the_watch_stays_down(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory(unhealthy_after=60.0)
    stream = h.start(rv="10")
    wait_until(h.informer.healthy)
    for _ in range(10):
        h.fake.watch_answers.put(ConnectionFailed("refused"))
    stream.push(ConnectionFailed("reset"))
    elapsed = 0.0
    for delay in (0.8, 1.6, 3.2, 6.4, 12.8, 25.6):
        assert h.clock.wait_for_waiter(deadline=h.clock.now() + delay)
        assert h.informer.healthy() == (elapsed <= 60.0)
        h.clock.step(delay)
        elapsed += delay
    assert h.clock.wait_for_waiter(deadline=h.clock.now() + 30.0)
    assert elapsed > 50.0
    h.clock.step(30.0)
    assert h.clock.wait_for_waiter(deadline=h.clock.now() + 30.0)
    assert not h.informer.healthy()
    assert h.informer.alive(), "an outage is not a dead informer (liveness stays up)"
    # The API server comes back: the next watch succeeds and health returns.
    h.fake.watch_answers.clear()
    h.fake.watch_answers.put(FakeWatch())
    h.clock.step(30.0)
    wait_until(h.informer.healthy)
    assert len(h.fake.lists) == 1


def test_stop_ends_threads_and_closes_the_watch(harness_factory: Callable[..., Harness]) -> None:
    h = harness_factory()
    stream = h.start(cm("a", "1"))
    h.rec.wait(1)
    assert h.informer.healthy()
    assert h.informer.alive()
    h.informer.stop()
    assert stream.closed.is_set()
    assert not h.informer.healthy()
    assert not h.informer.alive()
    thread = h.informer._thread
    assert thread is not None
    assert not thread.is_alive()


def test_run_with_an_external_stop_event(harness_factory: Callable[..., Harness]) -> None:
    h = harness_factory()
    h.fake.list_answers.put(page(cm("a", "1"), rv="3"))
    stream = FakeWatch()
    h.fake.watch_answers.put(stream)
    stop = StopSignal()
    runner = threading.Thread(target=h.informer.run, args=(stop,))
    runner.start()
    h.rec.wait(1)
    stop.set()
    runner.join(WAIT)
    assert not runner.is_alive()
    assert stream.closed.is_set()


def test_wait_for_cache_sync_times_out() -> None:
    informer = SharedInformer(ScriptedListWatch(), CONFIGMAPS, clock=FakeClock())
    assert not wait_for_cache_sync(informer, timeout=0.05, poll=0.01)


def test_custom_index_is_maintained(harness_factory: Callable[..., Harness]) -> None:
    h = harness_factory(indexers={CONTROLLER_UID_INDEX: index_by_controller_uid})
    owned = cm("a", "5")
    owned["metadata"]["ownerReferences"] = [{"uid": "u-1", "controller": True}]
    stream = h.start(owned, cm("b", "6"))
    h.rec.wait(2)
    assert [
        meta_namespace_key(o) for o in h.informer.lister().by_index(CONTROLLER_UID_INDEX, "u-1")
    ] == ["ns/a"]
    stream.push(ev("DELETED", cm("a", "7")))
    h.rec.wait(3)
    assert h.informer.lister().by_index(CONTROLLER_UID_INDEX, "u-1") == []


def test_gone_after_an_outage_relists_without_the_outage_backoff(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory()
    stream = h.start(cm("a", "5"), rv="10")
    h.rec.wait(1)
    for _ in range(4):
        h.fake.watch_answers.put(ConnectionFailed("connection refused"))
    h.fake.watch_answers.put(ApiError(410, "Expired", "too old resource version"))
    h.fake.list_answers.put(page(cm("a", "5"), rv="50"))
    h.fake.watch_answers.put(FakeWatch())
    stream.push(ConnectionFailed("reset"))
    for delay in (0.8, 1.6, 3.2, 6.4, 12.8):  # the reset, then four refusals
        assert h.clock.wait_for_waiter(deadline=h.clock.now() + delay)
        h.clock.step(delay)
    # The API server is back but our RV is gone: relist after one short step (<= 0.8 s),
    # not after the 25.6 s the outage's schedule has reached.
    assert h.clock.wait_for_waiter()
    (due,) = h.clock.waiter_deadlines()
    assert due - h.clock.now() <= 0.8
    h.clock.step(due - h.clock.now())
    h.fake.wait_lists(2)
    h.fake.wait_watches(7)
    assert h.fake.lists[-1]["resource_version"] is None
    assert h.fake.watches[-1]["resource_version"] == "50"


# ------------------------------------------------------------- refusals: 404 and 403

NOT_SERVED = Resource("cbop.dev", "v1alpha1", "configbundles", "ConfigBundle")


def _not_found() -> ApiError:
    return ApiError(404, "NotFound", "404 page not found")


def _forbidden(verb: str = "list") -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        f'configmaps is forbidden: User "u" cannot {verb} resource "configmaps" in API '
        'group "" at the cluster scope',
    )


def _next_delay(h: Harness) -> float:
    """Wait until the reflector sleeps on the clock; return how long it sleeps."""
    assert h.clock.wait_for_waiter()
    (due,) = h.clock.waiter_deadlines()
    return due - h.clock.now()


def test_missing_crd_is_retried_every_few_seconds_and_never_fails_liveness(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory(unhealthy_after=60.0)
    h.informer = SharedInformer(
        h.fake, NOT_SERVED, namespace="ns", clock=h.clock, rng=random.Random(1), resync_period=0
    )
    for _ in range(30):
        h.fake.list_answers.put(_not_found())
    with capture_logs() as logs:
        h.informer.start()
        elapsed = 0.0
        for attempt in range(1, 31):
            delay = _next_delay(h)
            assert delay <= 5.0
            assert len(h.fake.lists) == attempt
            assert h.informer.healthy()  # waiting for the CRD is not a dead watch
            problem = h.informer.problem()
            assert problem is not None
            assert problem.refused
            h.clock.step(delay)
            elapsed += delay
        assert elapsed > 60.0
    # One log line per attempt, naming the CRD to install.
    assert [r["event"] for r in logs] == ["list failed; retrying"] * 30
    assert "install the CustomResourceDefinition configbundles.cbop.dev" in logs[0]["problem"]
    # The CRD is installed: the next attempt syncs, and the problem clears.
    h.fake.list_answers.put(page(cm("a", "5"), rv="10"))
    h.fake.watch_answers.put(FakeWatch())
    h.fake.wait_lists(31)
    h.fake.wait_watches(1)
    assert h.informer.wait_for_sync(WAIT)
    wait_until(lambda: h.informer.problem() is None)


def test_crd_deleted_under_a_watch_relists_afresh_once_it_is_back(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory()
    stream = h.start(cm("a", "5"), cm("b", "6"), rv="10")
    h.rec.wait(2)
    # The CRD is deleted: the server ends the watch; watching again and listing get 404.
    h.fake.watch_answers.put(_not_found())
    h.fake.list_answers.put(_not_found())
    stream.push(bookmark("11"))
    stream.end()
    h.fake.wait_watches(2)
    assert _next_delay(h) <= 0.8
    assert h.informer.problem() is not None
    h.clock.step(0.8)
    h.fake.wait_lists(2)
    # The CRD is back (with "b" only): a consistent list, and "a" is delivered as deleted.
    h.fake.list_answers.put(page(cm("b", "60"), rv="70"))
    h.fake.watch_answers.put(FakeWatch())
    h.clock.step(_next_delay(h))
    h.fake.wait_watches(3)
    assert [c["resource_version"] for c in h.fake.lists] == ["0", None, None]
    assert sorted(h.rec.wait(4)[2:]) == [
        ("delete", "ns/a", "tombstone"),
        ("update", "ns/b", ("6", "60")),
    ]
    assert h.fake.watches[-1]["resource_version"] == "70"
    wait_until(lambda: h.informer.problem() is None)


def test_forbidden_list_is_named_retried_on_the_usual_schedule_and_never_fails_liveness(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory(unhealthy_after=60.0)
    for _ in range(8):
        h.fake.list_answers.put(_forbidden())
    with capture_logs() as logs:
        h.informer.start()
        for attempt, expected in enumerate((0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0), 1):
            assert _next_delay(h) == pytest.approx(expected)
            assert len(h.fake.lists) == attempt
            assert h.informer.healthy()
            h.clock.step(expected)
    problem = h.informer.problem()
    assert problem is not None
    assert problem.refused
    assert problem.message.startswith(
        "forbidden to list configmaps at cluster scope (all namespaces) (403): configmaps is"
    )
    assert [(r["event"], r["reason"], r["retry_in"]) for r in logs] == [
        ("list failed; retrying", "Forbidden", d)
        for d in (0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0)
    ]
    # RBAC granted: the next list succeeds.
    h.fake.list_answers.put(page(rv="10"))
    h.fake.watch_answers.put(FakeWatch())
    h.fake.wait_watches(1)
    assert h.informer.wait_for_sync(WAIT)
    wait_until(lambda: h.informer.problem() is None)


def test_an_outage_still_fails_liveness_and_is_no_refusal(
    harness_factory: Callable[..., Harness],
) -> None:
    h = harness_factory(unhealthy_after=60.0)
    for _ in range(8):
        h.fake.list_answers.put(ConnectionFailed("connection refused"))
    h.informer.start()
    for expected in (0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0):
        assert _next_delay(h) == pytest.approx(expected)
        h.clock.step(expected)
    assert _next_delay(h) == pytest.approx(30.0)
    problem = h.informer.problem()
    assert problem is not None
    assert not problem.refused
    assert problem.reason == "ConnectionFailed"
    assert not h.informer.healthy()
