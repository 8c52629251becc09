"""Behaviour of cbop.workqueue.PriorityQueue's priorities, driven by a FakeClock.

The contracts it shares with the plain queues run in the other test_workqueue_* modules;
this module covers what priorities add: order, promotion, merged adds, retries that keep
their priority, and ageing (no starvation of low keys under a steady stream of normal ones).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from cbop.workqueue import (
    DEFAULT_MAX_WAIT,
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    PriorityQueue,
)
from cbop_testing.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def q(clock: FakeClock) -> Iterator[PriorityQueue[str]]:
    queue = PriorityQueue[str](clock=clock)
    yield queue
    queue.shut_down()


def take(q: PriorityQueue[str]) -> tuple[str, int]:
    """Get one ready item (finishing it at once) with its priority."""
    item, priority, shutdown = q.get_with_priority()
    assert not shutdown
    assert item is not None
    q.done(item)
    return item, priority


def take_all(q: PriorityQueue[str]) -> list[str]:
    items: list[str] = []
    while len(q):
        items.append(take(q)[0])
    return items


class TestOrder:
    def test_normal_keys_are_served_before_low_ones_fifo_within_each(
        self, q: PriorityQueue[str]
    ) -> None:
        q.add("low-1", LOW_PRIORITY)
        q.add("normal-1")
        q.add("low-2", LOW_PRIORITY)
        q.add("normal-2", NORMAL_PRIORITY)
        assert q.ready_by_priority() == {LOW_PRIORITY: 2, NORMAL_PRIORITY: 2}
        assert [take(q) for _ in range(4)] == [
            ("normal-1", NORMAL_PRIORITY),
            ("normal-2", NORMAL_PRIORITY),
            ("low-1", LOW_PRIORITY),
            ("low-2", LOW_PRIORITY),
        ]

    def test_any_int_priority_higher_first(self, q: PriorityQueue[str]) -> None:
        for key, priority in [("a", -5), ("b", 3), ("c", 0), ("d", 3), ("e", -200)]:
            q.add(key, priority)
        assert take_all(q) == ["b", "d", "c", "a", "e"]

    def test_item_re_queued_by_done_goes_to_the_back_of_its_priority(
        self, q: PriorityQueue[str]
    ) -> None:
        q.add("a", LOW_PRIORITY)
        assert q.get_with_priority() == ("a", LOW_PRIORITY, False)
        q.add("a", LOW_PRIORITY)
        q.add("b", LOW_PRIORITY)
        q.add("c")
        q.done("a")
        assert take_all(q) == ["c", "b", "a"]

    def test_get_reports_shutdown_with_the_normal_priority(self, q: PriorityQueue[str]) -> None:
        q.shut_down()
        assert q.get_with_priority() == (None, NORMAL_PRIORITY, True)


class TestAKeyKeepsItsHighestPriority:
    def test_a_higher_add_promotes_to_the_back_of_the_higher_fifo(
        self, q: PriorityQueue[str]
    ) -> None:
        q.add("n1")
        q.add("low", LOW_PRIORITY)
        q.add("n2")
        q.add("low", NORMAL_PRIORITY)  # promoted: after n2, as controller-runtime
        assert len(q) == 3
        assert q.ready_by_priority() == {NORMAL_PRIORITY: 3}
        assert [take(q) for _ in range(3)] == [
            ("n1", NORMAL_PRIORITY),
            ("n2", NORMAL_PRIORITY),
            ("low", NORMAL_PRIORITY),
        ]
        assert len(q) == 0

    def test_a_lower_add_changes_nothing(self, q: PriorityQueue[str]) -> None:
        q.add("a")
        q.add("b")
        q.add("a", LOW_PRIORITY)
        assert q.ready_by_priority() == {NORMAL_PRIORITY: 2}
        assert take_all(q) == ["a", "b"]

    def test_promotion_while_processing_applies_when_done_requeues(
        self, q: PriorityQueue[str]
    ) -> None:
        q.add("a", LOW_PRIORITY)
        q.get_with_priority()
        q.add("a", LOW_PRIORITY)
        q.add("a", NORMAL_PRIORITY)
        q.add("b", LOW_PRIORITY)
        assert len(q) == 1  # "a" waits for done
        q.done("a")
        assert [take(q) for _ in range(2)] == [("a", NORMAL_PRIORITY), ("b", LOW_PRIORITY)]

    def test_many_promotions_leave_no_stale_fifo_behind(self, q: PriorityQueue[str]) -> None:
        keys = [f"k{i}" for i in range(1000)]
        for key in keys:
            q.add(key, LOW_PRIORITY)
        for key in keys:
            q.add(key, NORMAL_PRIORITY)
        assert q.ready_by_priority() == {NORMAL_PRIORITY: 1000}
        assert list(q._fifos) == [NORMAL_PRIORITY]  # the low FIFO of stale entries is gone
        assert take_all(q) == keys


class TestDelayedAdds:
    def test_a_waiting_key_keeps_the_earliest_time_and_the_highest_priority(
        self, q: PriorityQueue[str], clock: FakeClock
    ) -> None:
        q.add_after("a", 5.0, NORMAL_PRIORITY)
        q.add_after("a", 1.0, LOW_PRIORITY)
        q.add_after("b", 1.0, LOW_PRIORITY)
        assert q.waiting_len() == 2
        assert clock.wait_for_waiter(1.0)
        clock.step(1.0)
        assert [take(q) for _ in range(2)] == [("a", NORMAL_PRIORITY), ("b", LOW_PRIORITY)]

    def test_a_plain_add_makes_a_waiting_key_ready_at_the_higher_priority(
        self, q: PriorityQueue[str]
    ) -> None:
        q.add_after("a", 5.0, NORMAL_PRIORITY)
        q.add("b")
        q.add("a", LOW_PRIORITY)
        assert q.waiting_len() == 0
        assert [take(q) for _ in range(2)] == [("b", NORMAL_PRIORITY), ("a", NORMAL_PRIORITY)]

    def test_a_delayed_add_raises_a_queued_key(self, q: PriorityQueue[str]) -> None:
        q.add("a", LOW_PRIORITY)
        q.add("b", LOW_PRIORITY)
        q.add_after("b", 3.0, NORMAL_PRIORITY)
        assert q.waiting_len() == 0
        assert take_all(q) == ["b", "a"]

    def test_released_keys_join_the_back_of_their_fifo_in_ready_time_order(
        self, q: PriorityQueue[str], clock: FakeClock
    ) -> None:
        q.add_after("late", 2.0, LOW_PRIORITY)
        q.add_after("early", 1.0, LOW_PRIORITY)
        q.add("queued", LOW_PRIORITY)
        assert clock.wait_for_waiter(1.0)
        clock.step(3.0)
        q.add_after("probe", 1.0)
        assert clock.wait_for_waiter(4.0)  # the loop released both and waits for the probe
        assert take_all(q) == ["queued", "early", "late"]


class TestRetriesKeepTheirPriority:
    @pytest.mark.parametrize("got", [LOW_PRIORITY, NORMAL_PRIORITY, 5], ids=str)
    def test_add_rate_limited_of_a_held_key_keeps_the_priority_it_was_handed_out_with(
        self, q: PriorityQueue[str], clock: FakeClock, got: int
    ) -> None:
        q.add("a", got)
        assert q.get_with_priority() == ("a", got, False)
        q.add_rate_limited("a")  # the worker's retry, before done
        q.done("a")
        assert clock.wait_for_waiter(0.005)
        clock.step(0.005)
        assert take(q) == ("a", got)

    def test_add_after_of_a_held_key_keeps_its_priority(
        self, q: PriorityQueue[str], clock: FakeClock
    ) -> None:
        q.add("a", LOW_PRIORITY)
        q.get_with_priority()
        q.add_after("a", 30.0)
        q.done("a")
        q.add("b", LOW_PRIORITY)
        assert clock.wait_for_waiter(30.0)
        clock.step(30.0)
        assert [take(q) for _ in range(2)] == [("b", LOW_PRIORITY), ("a", LOW_PRIORITY)]

    def test_an_explicit_priority_wins_and_a_free_key_defaults_to_normal(
        self, q: PriorityQueue[str]
    ) -> None:
        q.add("a", LOW_PRIORITY)
        q.get_with_priority()
        q.add_after("a", 0.0, NORMAL_PRIORITY)  # immediate, explicit
        q.done("a")
        q.add_after("b", 0.0)  # nobody holds "b": normal
        q.add("c", LOW_PRIORITY)
        assert [take(q) for _ in range(3)] == [
            ("a", NORMAL_PRIORITY),
            ("b", NORMAL_PRIORITY),
            ("c", LOW_PRIORITY),
        ]


def serve_under_a_steady_stream(
    q: PriorityQueue[str], clock: FakeClock, hand_outs: int, per_hand_out: int = 2
) -> list[tuple[str, float]]:
    """One worker taking 1 s (fake) per item while ``per_hand_out`` new normal keys arrive
    during each: more work than the worker can do, so the normal FIFO never empties.

    Returns the (key, seconds waited since first added) of every hand-out.
    """
    added: dict[str, float] = {}
    served: list[tuple[str, float]] = []
    counter = 0

    def add_normal() -> None:
        nonlocal counter
        key = f"normal-{counter}"
        counter += 1
        added[key] = clock.now()
        q.add(key)

    add_normal()
    for _ in range(hand_outs):
        item, _priority, _ = q.get_with_priority()
        assert item is not None
        served.append((item, clock.now() - added.get(item, 0.0)))
        for _ in range(per_hand_out):
            add_normal()
        clock.step(1.0)
        q.done(item)
    return served


class TestAgeing:
    def test_low_keys_are_starved_without_ageing(self, clock: FakeClock) -> None:
        q = PriorityQueue[str](clock=clock, max_wait=None)  # strict priority
        try:
            for i in range(5):
                q.add(f"low-{i}", LOW_PRIORITY)
            served = serve_under_a_steady_stream(q, clock, hand_outs=200)
        finally:
            q.shut_down()
        assert not [key for key, _ in served if key.startswith("low-")]

    def test_low_keys_progress_under_a_steady_stream_of_normal_ones(self, clock: FakeClock) -> None:
        q = PriorityQueue[str](clock=clock, max_wait=10.0)
        try:
            for i in range(5):
                q.add(f"low-{i}", LOW_PRIORITY)
            served = serve_under_a_steady_stream(q, clock, hand_outs=40)
        finally:
            q.shut_down()
        lows = [(i, key, waited) for i, (key, waited) in enumerate(served) if key.startswith("low")]
        # In FIFO order, the first once it has waited 10 s, then every other hand-out.
        assert [key for _, key, _ in lows] == [f"low-{i}" for i in range(5)]
        assert [i for i, _, _ in lows] == [10, 12, 14, 16, 18]
        assert max(waited for _, _, waited in lows) <= 10.0 + 2 * 5
        # Normal keys keep half the hand-outs meanwhile and all of them otherwise.
        assert all(not key.startswith("low") for key, _ in served[:10] + served[19:])

    def test_no_ageing_before_max_wait(self, q: PriorityQueue[str], clock: FakeClock) -> None:
        q.add("low", LOW_PRIORITY)
        clock.step(DEFAULT_MAX_WAIT - 0.001)
        q.add("n1")
        q.add("n2")
        assert [take(q)[0] for _ in range(2)] == ["n1", "n2"]
        q.add("n3")
        clock.step(0.001)  # "low" has now waited DEFAULT_MAX_WAIT
        q.add("n4")
        assert take_all(q) == ["low", "n3", "n4"]

    def test_the_longest_waiting_lower_head_is_served(
        self, q: PriorityQueue[str], clock: FakeClock
    ) -> None:
        q.add("minus-50", -50)
        clock.step(1.0)
        q.add("minus-100", LOW_PRIORITY)
        clock.step(DEFAULT_MAX_WAIT)
        q.add("n1")
        q.add("n2")
        assert take_all(q) == ["minus-50", "n1", "minus-100", "n2"]

    def test_time_waited_at_a_lower_priority_counts_after_promotion(
        self, q: PriorityQueue[str], clock: FakeClock
    ) -> None:
        q.add("a", -200)
        clock.step(1.0)
        q.add("b", LOW_PRIORITY)
        clock.step(DEFAULT_MAX_WAIT)
        q.add("a", -50)  # promoted above "b" but keeps its waited time
        q.add("n")
        assert take_all(q) == ["a", "n", "b"]

    @pytest.mark.parametrize("bad", [-1.0, math.nan], ids=["negative", "nan"])
    def test_max_wait_must_be_a_duration(self, bad: float) -> None:
        with pytest.raises(ValueError, match="max_wait"):
            PriorityQueue[str](max_wait=bad)
