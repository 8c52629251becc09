"""Behaviour of cbop.workqueue.DelayingQueue.add_after, driven by a FakeClock.

The contracts run against ``DelayingQueue`` and ``PriorityQueue`` (default priorities);
the one place they differ (``add_after`` of a key already queued) is tested for each.

Synchronisation: the waiting loop parks on the clock with a deadline equal to the earliest
ready time. ``clock.wait_for_waiter(t)`` returns once it is parked at ``t``; stepping the
clock short of ``t`` then cannot wake it, so "nothing released yet" is deterministic, and
``get()`` blocks until a released item arrives.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator

import pytest

from cbop.workqueue import DelayingQueue, PriorityQueue, RealClock
from cbop_testing.clock import FakeClock

JOIN = 5.0  # real seconds; only bounds a hung test


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=[DelayingQueue, PriorityQueue], ids=["delaying", "priority"])
def kind(request: pytest.FixtureRequest) -> type[DelayingQueue[str]]:
    chosen: type[DelayingQueue[str]] = request.param
    return chosen


@pytest.fixture
def q(clock: FakeClock, kind: type[DelayingQueue[str]]) -> Iterator[DelayingQueue[str]]:
    queue = kind(clock=clock)
    yield queue
    queue.shut_down()


def get_n(q: DelayingQueue[str], n: int) -> list[str]:
    items: list[str] = []
    for _ in range(n):
        item, shutdown = q.get()
        assert not shutdown
        assert item is not None
        items.append(item)
        q.done(item)
    return items


class TestImmediate:
    @pytest.mark.parametrize("delay", [0.0, -1.0], ids=["zero", "negative"])
    def test_non_positive_delay_adds_at_once(self, q: DelayingQueue[str], delay: float) -> None:
        q.add_after("a", delay)
        assert len(q) == 1
        assert q.waiting_len() == 0

    def test_nan_delay_is_rejected(self, q: DelayingQueue[str]) -> None:
        with pytest.raises(ValueError, match="NaN"):
            q.add_after("a", math.nan)


class TestReadyTime:
    def test_item_is_released_only_when_its_time_comes(
        self, q: DelayingQueue[str], clock: FakeClock
    ) -> None:
        q.add_after("a", 1.0)
        assert clock.wait_for_waiter(1.0)
        clock.step(0.999)
        assert len(q) == 0
        assert q.waiting_len() == 1
        clock.step(0.001)
        assert get_n(q, 1) == ["a"]
        assert q.waiting_len() == 0

    def test_items_are_released_in_ready_time_order(
        self, q: DelayingQueue[str], clock: FakeClock
    ) -> None:
        q.add_after("c", 3.0)
        q.add_after("a", 1.0)
        q.add_after("b", 2.0)
        q.add_after("b2", 2.0)  # same ready time as "b": arrival order
        assert clock.wait_for_waiter(1.0)
        clock.step(5.0)  # all ready at once: the loop releases them as one ordered batch
        assert get_n(q, 4) == ["a", "b", "b2", "c"]

    def test_steps_release_items_one_deadline_at_a_time(
        self, q: DelayingQueue[str], clock: FakeClock
    ) -> None:
        for key, delay in [("c", 3.0), ("a", 1.0), ("b", 2.0)]:
            q.add_after(key, delay)
        released: list[str] = []
        for deadline, expected in [(1.0, "a"), (2.0, "b"), (3.0, "c")]:
            assert clock.wait_for_waiter(deadline)
            assert len(q) == 0
            clock.set(deadline)
            released += get_n(q, 1)
            assert released[-1] == expected
        assert released == ["a", "b", "c"]

    def test_new_earlier_item_wakes_the_loop(self, q: DelayingQueue[str], clock: FakeClock) -> None:
        q.add_after("late", 10.0)
        assert clock.wait_for_waiter(10.0)
        q.add_after("early", 1.0)
        assert clock.wait_for_waiter(1.0)
        clock.step(1.0)
        assert get_n(q, 1) == ["early"]
        assert clock.wait_for_waiter(10.0)
        assert len(q) == 0

    def test_released_item_is_deduplicated_with_a_plain_add(self, clock: FakeClock) -> None:
        q = DelayingQueue[str](clock=clock)  # the priority queue merges at once: see below
        q.add("a")
        q.add_after("a", 1.0)
        assert clock.wait_for_waiter(1.0)
        clock.step(1.0)
        # Wait for the loop to go idle again: it re-parks with no deadline, so probe with
        # a fresh delayed item instead.
        q.add_after("probe", 1.0)
        assert clock.wait_for_waiter(2.0)
        assert len(q) == 1
        q.shut_down()

    def test_priority_queue_merges_a_delayed_add_into_a_queued_key(self, clock: FakeClock) -> None:
        q = PriorityQueue[str](clock=clock)
        q.add("a")
        q.add_after("a", 1.0)  # "a" will be handed out sooner than asked: nothing waits
        assert q.waiting_len() == 0
        assert get_n(q, 1) == ["a"]
        q.add_after("probe", 2.0)
        assert clock.wait_for_waiter(2.0)
        clock.step(1.0)
        assert len(q) == 0  # "a" is not added a second time
        q.shut_down()

    def test_priority_queue_makes_a_waiting_key_ready_on_a_plain_add(
        self, clock: FakeClock
    ) -> None:
        q = PriorityQueue[str](clock=clock)
        q.add_after("a", 1.0)
        q.add("a")
        assert (len(q), q.waiting_len()) == (1, 0)
        assert get_n(q, 1) == ["a"]
        q.add_after("probe", 2.0)
        assert clock.wait_for_waiter(1.0)  # the loop still waits for the stale entry
        clock.step(1.0)
        assert clock.wait_for_waiter(2.0)  # stale entry popped, "a" not released again
        assert len(q) == 0
        q.shut_down()


class TestReAdd:
    def test_re_adding_a_waiting_item_keeps_the_earlier_time(
        self, q: DelayingQueue[str], clock: FakeClock
    ) -> None:
        q.add_after("a", 5.0)
        q.add_after("a", 2.0)  # moves earlier
        q.add_after("a", 10.0)  # ignored: later than 2.0
        assert q.waiting_len() == 1
        assert clock.wait_for_waiter(2.0)
        clock.step(2.0)
        assert get_n(q, 1) == ["a"]
        # The superseded 5.0 entry must not release "a" a second time.
        q.add_after("probe", 6.0)  # ready at 8.0
        clock.step(4.0)  # now 6.0: past the stale 5.0 entry
        assert clock.wait_for_waiter(8.0)
        assert len(q) == 0
        assert q.waiting_len() == 1

    def test_later_re_add_does_not_postpone(self, q: DelayingQueue[str], clock: FakeClock) -> None:
        q.add_after("a", 1.0)
        clock.step(0.5)
        q.add_after("a", 1.0)  # would be ready at 1.5; keeps 1.0
        assert clock.wait_for_waiter(1.0)
        clock.step(0.5)
        assert get_n(q, 1) == ["a"]

    def test_many_moves_earlier_release_the_item_once(
        self, q: DelayingQueue[str], clock: FakeClock
    ) -> None:
        for i in range(300):
            q.add_after("a", 1000.0 - i)
        assert q.waiting_len() == 1
        assert len(q._waiting) < 300  # superseded entries were compacted away
        clock.step(1000.0)
        assert get_n(q, 1) == ["a"]
        q.add_after("probe", 1.0)
        assert clock.wait_for_waiter(1001.0)
        assert len(q) == 0


class TestShutDown:
    def test_add_after_is_dropped_while_shutting_down(
        self, q: DelayingQueue[str], clock: FakeClock
    ) -> None:
        q.shut_down()
        q.add_after("a", 1.0)
        q.add_after("b", 0.0)
        assert q.waiting_len() == 0
        assert q.get() == (None, True)

    def test_shutdown_stops_the_waiting_loop_and_drops_waiting_items(
        self, clock: FakeClock, kind: type[DelayingQueue[str]]
    ) -> None:
        q = kind(name="delaying-shutdown-test", clock=clock)
        loops = [
            t
            for t in threading.enumerate()
            if t.name == "workqueue-waiting-loop[delaying-shutdown-test]"
        ]
        assert len(loops) == 1
        q.add_after("a", 1.0)
        assert clock.wait_for_waiter(1.0)
        q.shut_down()
        loops[0].join(JOIN)
        assert not loops[0].is_alive()
        assert not clock.has_waiters()
        clock.step(2.0)
        assert q.get() == (None, True)


class TestRealClock:
    def test_short_delay_with_the_real_clock(self, kind: type[DelayingQueue[str]]) -> None:
        q = kind(clock=RealClock())
        try:
            q.add_after("a", 0.01)
            assert q.get() == ("a", False)
        finally:
            q.shut_down()
