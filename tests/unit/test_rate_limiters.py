"""Behaviour of cbop.workqueue's rate limiters (client-go semantics, fake clock)."""

from __future__ import annotations

import math

import pytest

from cbop.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from cbop_testing.clock import FakeClock


class FixedLimiter:
    """A limiter returning a fixed delay and recording every call."""

    def __init__(self, delay: float, requeues: int = 0) -> None:
        self.delay = delay
        self.requeues = requeues
        self.calls: list[tuple[str, str]] = []

    def when(self, item: str) -> float:
        self.calls.append(("when", item))
        return self.delay

    def forget(self, item: str) -> None:
        self.calls.append(("forget", item))

    def num_requeues(self, item: str) -> int:
        return self.requeues


class TestItemExponentialFailure:
    def test_delays_double_from_five_milliseconds(self) -> None:
        limiter = ItemExponentialFailureRateLimiter[str]()
        delays = [limiter.when("a") for _ in range(6)]
        assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08, 0.16])
        assert limiter.num_requeues("a") == 6

    def test_delay_is_capped_at_one_thousand_seconds(self) -> None:
        limiter = ItemExponentialFailureRateLimiter[str]()
        delays = [limiter.when("a") for _ in range(20)]
        # 0.005 * 2**17 = 655.36 s is the last uncapped delay; 2**18 would be 1310.72 s.
        assert delays[17] == pytest.approx(655.36)
        assert delays[18:] == [1000.0, 1000.0]

    @pytest.mark.parametrize(
        ("base", "cap", "expected"),
        [
            (0.005, 1000.0, 1000.0),
            (1e300, math.inf, math.inf),
            (0.005, math.inf, 0.005 * 2.0**1000),
        ],
        ids=["default", "huge-base-no-cap", "no-cap-exponent-capped"],
    )
    def test_long_failure_streaks_never_overflow(
        self, base: float, cap: float, expected: float
    ) -> None:
        limiter = ItemExponentialFailureRateLimiter[str](base, cap)
        delays = [limiter.when("a") for _ in range(1100)]
        assert delays[-1] == expected
        assert limiter.num_requeues("a") == 1100

    def test_items_back_off_independently(self) -> None:
        limiter = ItemExponentialFailureRateLimiter[str](0.1, 10.0)
        limiter.when("a")
        limiter.when("a")
        assert limiter.when("b") == pytest.approx(0.1)
        assert limiter.when("a") == pytest.approx(0.4)

    def test_forget_restarts_from_the_base_delay(self) -> None:
        limiter = ItemExponentialFailureRateLimiter[str]()
        for _ in range(5):
            limiter.when("a")
        limiter.forget("a")
        assert limiter.num_requeues("a") == 0
        assert limiter.when("a") == pytest.approx(0.005)

    @pytest.mark.parametrize(
        ("base", "cap"),
        [(-0.1, 1.0), (0.1, -1.0), (math.nan, 1.0)],
        ids=["negative-base", "negative-cap", "nan-base"],
    )
    def test_rejects_negative_or_nan_delays(self, base: float, cap: float) -> None:
        with pytest.raises(ValueError, match="non-negative"):
            ItemExponentialFailureRateLimiter[str](base, cap)


class TestBucket:
    def test_burst_of_one_hundred_then_a_tenth_of_a_second_apart(self) -> None:
        limiter = BucketRateLimiter[str](qps=10.0, burst=100, clock=FakeClock())
        delays = [limiter.when(f"item-{i}") for i in range(103)]
        assert delays[:100] == [0.0] * 100
        assert delays[100:] == pytest.approx([0.1, 0.2, 0.3])

    def test_tokens_come_back_with_time(self) -> None:
        clock = FakeClock()
        limiter = BucketRateLimiter[str](qps=10.0, burst=100, clock=clock)
        for _ in range(100):
            limiter.when("x")
        clock.step(0.5)
        assert [limiter.when("x") for _ in range(6)] == pytest.approx(
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.1]
        )

    def test_has_no_per_item_state(self) -> None:
        limiter = BucketRateLimiter[str](clock=FakeClock())
        limiter.when("a")
        limiter.forget("a")
        assert limiter.num_requeues("a") == 0
        assert limiter.bucket.tokens() == pytest.approx(99.0)


class TestMaxOf:
    def test_takes_the_longest_delay_and_asks_every_limiter(self) -> None:
        limiters = [FixedLimiter(0.5), FixedLimiter(2.0), FixedLimiter(1.0)]
        combined = MaxOfRateLimiter[str](*limiters)
        assert combined.when("a") == 2.0
        assert all(limiter.calls == [("when", "a")] for limiter in limiters)

    def test_always_spends_a_bucket_token_even_when_another_limiter_wins(self) -> None:
        bucket = BucketRateLimiter[str](qps=1.0, burst=2, clock=FakeClock())
        combined = MaxOfRateLimiter[str](FixedLimiter(30.0), bucket)
        assert combined.when("a") == 30.0
        assert combined.when("b") == 30.0
        assert bucket.bucket.tokens() == pytest.approx(0.0)
        # The third call finds the bucket empty and in debt: 1 s, then 2 s.
        assert MaxOfRateLimiter[str](bucket).when("c") == pytest.approx(1.0)

    def test_num_requeues_is_the_largest_and_forget_reaches_all(self) -> None:
        limiters = [FixedLimiter(0.0, requeues=2), FixedLimiter(0.0, requeues=7)]
        combined = MaxOfRateLimiter[str](*limiters)
        assert combined.num_requeues("a") == 7
        combined.forget("a")
        assert all(limiter.calls == [("forget", "a")] for limiter in limiters)

    def test_no_limiters_means_no_delay(self) -> None:
        combined = MaxOfRateLimiter[str]()
        assert combined.when("a") == 0.0
        assert combined.num_requeues("a") == 0


class TestDefaultControllerRateLimiter:
    def test_per_item_backoff_dominates_while_the_bucket_has_tokens(self) -> None:
        limiter: RateLimiter[str] = default_controller_rate_limiter(FakeClock())
        assert [limiter.when("a") for _ in range(4)] == pytest.approx([0.005, 0.01, 0.02, 0.04])
        assert limiter.num_requeues("a") == 4
        limiter.forget("a")
        assert limiter.num_requeues("a") == 0
        assert limiter.when("a") == pytest.approx(0.005)

    def test_bucket_dominates_after_one_hundred_retries(self) -> None:
        limiter: RateLimiter[str] = default_controller_rate_limiter(FakeClock())
        first = [limiter.when(f"item-{i}") for i in range(100)]
        assert first == pytest.approx([0.005] * 100)
        assert limiter.when("item-100") == pytest.approx(0.1)
        assert limiter.when("item-101") == pytest.approx(0.2)

    def test_capped_item_delay_is_one_thousand_seconds(self) -> None:
        limiter: RateLimiter[str] = default_controller_rate_limiter(FakeClock())
        delays = [limiter.when("a") for _ in range(30)]
        assert delays[-1] == 1000.0
