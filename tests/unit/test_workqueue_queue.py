"""Behaviour of cbop.workqueue.Queue: dedup, one worker per item, shutdown and drain.

Every test is a contract of the basic queue, so each runs against ``Queue`` and against
``PriorityQueue`` with all adds at the default priority.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from cbop.locks import YieldingLock
from cbop.workqueue import (
    DelayingInterface,
    DelayingQueue,
    Interface,
    PriorityInterface,
    PriorityQueue,
    Queue,
    RateLimitingInterface,
    RateLimitingQueue,
)
from cbop_testing.clock import FakeClock

JOIN = 5.0  # real seconds; only bounds a hung test


def in_thread(target: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run target in a daemon thread; its return value lands in the returned list."""
    results: list[object] = []
    thread = threading.Thread(target=lambda: results.append(target()), daemon=True)
    thread.start()
    return thread, results


def drain(q: Queue[str]) -> list[str]:
    """Get (and finish) everything currently in the FIFO, in order."""
    items: list[str] = []
    while len(q):
        item, shutdown = q.get()
        assert not shutdown
        assert item is not None
        items.append(item)
        q.done(item)
    return items


@pytest.fixture(params=[Queue, PriorityQueue], ids=["queue", "priority"])
def q(request: pytest.FixtureRequest) -> Iterator[Queue[str]]:
    queue: Queue[str] = request.param(clock=FakeClock())
    yield queue
    queue.shut_down()


class TestProtocols:
    def test_concrete_queues_satisfy_the_protocols(self) -> None:
        # Checked by mypy: a failure here is a type error, not an assertion.
        basic: Interface[str] = Queue[str]()
        delaying: DelayingInterface[str] = DelayingQueue[str]()
        limited: RateLimitingInterface[str] = RateLimitingQueue[str]()
        prioritised: PriorityInterface[str] = PriorityQueue[str]()
        for queue in (basic, delaying, limited, prioritised):
            queue.shut_down()
            assert queue.shutting_down()


class TestDeduplication:
    def test_adding_a_dirty_item_again_is_a_no_op(self, q: Queue[str]) -> None:
        for key in ["a", "b", "a", "c", "b", "a"]:
            q.add(key)
        assert len(q) == 3
        assert drain(q) == ["a", "b", "c"]

    def test_item_can_be_queued_again_once_handed_out(self, q: Queue[str]) -> None:
        q.add("a")
        assert q.get() == ("a", False)
        q.done("a")
        q.add("a")
        assert len(q) == 1


class TestProcessing:
    def test_item_added_while_processing_waits_for_done(self, q: Queue[str]) -> None:
        q.add("a")
        assert q.get() == ("a", False)
        q.add("a")
        assert len(q) == 0  # not handed to a second worker while the first holds it
        q.add("a")  # still a single pending add
        q.done("a")
        assert len(q) == 1
        assert q.get() == ("a", False)
        q.done("a")
        assert len(q) == 0

    def test_done_without_new_add_does_not_requeue(self, q: Queue[str]) -> None:
        q.add("a")
        q.get()
        q.done("a")
        assert len(q) == 0

    def test_re_queued_item_goes_to_the_back(self, q: Queue[str]) -> None:
        q.add("a")
        q.get()
        q.add("a")
        q.add("b")
        q.done("a")
        assert drain(q) == ["b", "a"]

    def test_done_of_unknown_item_is_harmless(self, q: Queue[str]) -> None:
        q.done("never-added")
        assert len(q) == 0

    def test_blocked_get_is_woken_by_add(self, q: Queue[str]) -> None:
        thread, results = in_thread(q.get)
        q.add("a")
        thread.join(JOIN)
        assert results == [("a", False)]

    def test_blocked_get_is_woken_when_done_requeues(self, q: Queue[str]) -> None:
        q.add("a")
        q.get()
        q.add("a")
        thread, results = in_thread(q.get)
        q.done("a")
        thread.join(JOIN)
        assert results == [("a", False)]


class TestShutDown:
    def test_get_hands_out_remaining_items_before_reporting_shutdown(self, q: Queue[str]) -> None:
        q.add("a")
        q.add("b")
        q.shut_down()
        assert q.shutting_down()
        assert q.get() == ("a", False)
        assert q.get() == ("b", False)
        assert q.get() == (None, True)
        assert q.get() == (None, True)

    def test_adds_after_shutdown_are_dropped(self, q: Queue[str]) -> None:
        q.shut_down()
        q.add("a")
        assert len(q) == 0
        assert q.get() == (None, True)

    def test_done_after_shutdown_does_not_requeue(self, q: Queue[str]) -> None:
        q.add("a")
        q.get()
        q.shut_down()
        q.add("a")  # dropped
        q.done("a")
        assert q.get() == (None, True)

    def test_item_dirty_before_shutdown_is_requeued_by_done(self, q: Queue[str]) -> None:
        q.add("a")
        q.get()
        q.add("a")
        q.shut_down()
        q.done("a")
        assert q.get() == ("a", False)
        q.done("a")
        assert q.get() == (None, True)

    def test_shutdown_wakes_every_blocked_getter(self, q: Queue[str]) -> None:
        getters = [in_thread(q.get) for _ in range(3)]
        q.shut_down()
        for thread, results in getters:
            thread.join(JOIN)
            assert results == [(None, True)]

    def test_shutdown_is_idempotent_and_does_not_wait(self, q: Queue[str]) -> None:
        q.add("a")
        q.get()  # still processing: shut_down must not wait for it
        q.shut_down()
        q.shut_down()
        assert q.shutting_down()


class WaitCounter(threading.Condition):
    """A Condition that counts calls to wait(), so a test can tell a waiter is parked.

    Swapped in for the queue's private drain condition (same lock): when ``waits``
    reaches n, the waiter has entered wait() n times, and anyone who takes the queue
    lock afterwards runs only once the waiter has released it inside wait().
    """

    def __init__(self, lock: YieldingLock) -> None:
        super().__init__(cast(Any, lock))
        self.waits = 0
        self._seen = threading.Condition()

    def wait(self, timeout: float | None = None) -> bool:
        with self._seen:
            self.waits += 1
            self._seen.notify_all()
        return super().wait(timeout)

    def wait_for_waits(self, n: int) -> bool:
        with self._seen:
            return self._seen.wait_for(lambda: self.waits >= n, JOIN)


@pytest.fixture
def drain_probe(q: Queue[str]) -> WaitCounter:
    probe = WaitCounter(q._mutex)
    q._drained = probe
    return probe


class TestShutDownWithDrain:
    def test_returns_at_once_when_nothing_is_processing(self, q: Queue[str]) -> None:
        q.add("a")  # queued but not processing: drain does not wait for it
        q.shut_down_with_drain()
        assert q.shutting_down()
        assert q.get() == ("a", False)

    def test_waits_for_every_processing_item_then_returns(
        self, q: Queue[str], drain_probe: WaitCounter
    ) -> None:
        for key in ("a", "b"):
            q.add(key)
            q.get()
        drainer, drained = in_thread(q.shut_down_with_drain)
        assert drain_probe.wait_for_waits(1)
        assert q.shutting_down()
        q.add("c")  # dropped: the queue is shutting down
        q.done("a")
        assert len(q) == 0  # lock round-trip after done("a")
        assert drainer.is_alive()  # "b" is still processing
        q.done("b")
        drainer.join(JOIN)
        assert not drainer.is_alive()
        assert drained == [None]
        assert q.get() == (None, True)

    def test_getters_see_shutdown_while_drain_waits(self, q: Queue[str]) -> None:
        q.add("a")
        q.get()
        getter, got = in_thread(q.get)
        drainer, _ = in_thread(q.shut_down_with_drain)
        getter.join(JOIN)
        assert got == [(None, True)]
        assert drainer.is_alive()  # "a" is still processing; nothing can finish the drain
        q.done("a")
        drainer.join(JOIN)
        assert not drainer.is_alive()

    def test_shut_down_cancels_a_drain_in_progress(
        self, q: Queue[str], drain_probe: WaitCounter
    ) -> None:
        q.add("a")
        q.get()
        drainer, _ = in_thread(q.shut_down_with_drain)
        assert drain_probe.wait_for_waits(1)
        q.shut_down()
        drainer.join(JOIN)
        assert not drainer.is_alive()
