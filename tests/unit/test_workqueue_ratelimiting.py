"""Behaviour of cbop.workqueue.RateLimitingQueue: retries through a rate limiter.

Each test runs against ``RateLimitingQueue`` and ``PriorityQueue`` (default priorities).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cbop.workqueue import (
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    PriorityQueue,
    RateLimitingQueue,
)
from cbop_testing.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=[RateLimitingQueue, PriorityQueue], ids=["ratelimiting", "priority"])
def kind(request: pytest.FixtureRequest) -> type[RateLimitingQueue[str]]:
    chosen: type[RateLimitingQueue[str]] = request.param
    return chosen


@pytest.fixture
def q(clock: FakeClock, kind: type[RateLimitingQueue[str]]) -> Iterator[RateLimitingQueue[str]]:
    queue = kind(clock=clock)
    yield queue
    queue.shut_down()


class TestAddRateLimited:
    def test_retry_waits_for_the_limiter_delay(
        self, q: RateLimitingQueue[str], clock: FakeClock
    ) -> None:
        q.add_rate_limited("a")
        assert clock.wait_for_waiter(0.005)
        clock.step(0.004)
        assert len(q) == 0
        clock.step(0.001)
        assert q.get() == ("a", False)
        q.done("a")

    def test_consecutive_failures_back_off_exponentially(
        self, q: RateLimitingQueue[str], clock: FakeClock
    ) -> None:
        delays: list[float] = []
        for _ in range(4):
            start = clock.now()
            q.add_rate_limited("a")
            assert clock.wait_for_waiter()
            (deadline,) = clock.waiter_deadlines()
            delays.append(deadline - start)
            clock.set(deadline)
            item, _ = q.get()
            assert item == "a"
            q.done("a")
        assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04])
        assert q.num_requeues("a") == 4

    def test_forget_resets_the_backoff(self, q: RateLimitingQueue[str]) -> None:
        for _ in range(3):
            q.add_rate_limited("a")
        assert q.num_requeues("a") == 3
        q.forget("a")
        assert q.num_requeues("a") == 0
        assert q.rate_limiter.when("a") == pytest.approx(0.005)

    def test_custom_limiter_is_used(
        self, clock: FakeClock, kind: type[RateLimitingQueue[str]]
    ) -> None:
        limiter = ItemExponentialFailureRateLimiter[str](2.0, 60.0)
        q = kind(limiter, clock=clock)
        try:
            q.add_rate_limited("a")
            assert q.rate_limiter is limiter
            assert clock.wait_for_waiter(2.0)
        finally:
            q.shut_down()

    def test_default_limiter_runs_on_the_queue_clock(self, q: RateLimitingQueue[str]) -> None:
        assert isinstance(q.rate_limiter, MaxOfRateLimiter)
        for i in range(100):
            q.rate_limiter.when(f"item-{i}")
        # Exactly 0.1 s: the bucket reads the fake clock, which has not moved.
        assert q.rate_limiter.when("item-100") == pytest.approx(0.1, abs=1e-12)

    def test_dropped_but_counted_by_the_limiter_while_shutting_down(
        self, q: RateLimitingQueue[str]
    ) -> None:
        q.shut_down()
        q.add_rate_limited("a")
        assert q.waiting_len() == 0
        assert q.num_requeues("a") == 1
