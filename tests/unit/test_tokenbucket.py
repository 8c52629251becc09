"""Behaviour of cbop.tokenbucket.TokenBucket (x/time/rate semantics, fake clock)."""

from __future__ import annotations

import math
import threading

import pytest

from cbop.tokenbucket import TokenBucket
from cbop_testing.clock import FakeClock


class TestReserve:
    def test_burst_is_free_then_tokens_come_one_per_interval(self) -> None:
        bucket = TokenBucket(10.0, 100, clock=FakeClock())
        assert [bucket.reserve() for _ in range(100)] == [0.0] * 100
        assert [bucket.reserve() for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])

    def test_reserving_spends_the_token_even_in_debt(self) -> None:
        clock = FakeClock()
        bucket = TokenBucket(2.0, 1, clock=clock)
        assert bucket.reserve() == 0.0
        assert bucket.reserve() == pytest.approx(0.5)
        assert bucket.tokens() == pytest.approx(-1.0)

    def test_tokens_refill_with_time_up_to_burst(self) -> None:
        clock = FakeClock()
        bucket = TokenBucket(10.0, 5, clock=clock)
        for _ in range(5):
            bucket.reserve()
        clock.step(0.3)
        assert bucket.tokens() == pytest.approx(3.0)
        clock.step(100.0)
        assert bucket.tokens() == pytest.approx(5.0)

    def test_debt_is_repaid_by_waiting(self) -> None:
        clock = FakeClock()
        bucket = TokenBucket(10.0, 1, clock=clock)
        bucket.reserve()
        assert bucket.reserve() == pytest.approx(0.1)
        clock.step(0.1)
        assert bucket.reserve() == pytest.approx(0.1)


class TestTryTake:
    def test_takes_while_tokens_remain_and_never_goes_into_debt(self) -> None:
        clock = FakeClock()
        bucket = TokenBucket(1.0, 2, clock=clock)
        assert [bucket.try_take() for _ in range(3)] == [True, True, False]
        assert bucket.tokens() == pytest.approx(0.0)
        clock.step(1.0)
        assert bucket.try_take() is True


class TestUnlimited:
    @pytest.mark.parametrize("qps", [0.0, -1.0, math.inf], ids=["zero", "negative", "inf"])
    def test_never_waits(self, qps: float) -> None:
        bucket = TokenBucket(qps, 0, clock=FakeClock())
        assert all(bucket.reserve() == 0.0 for _ in range(1000))
        assert all(bucket.try_take() for _ in range(1000))
        assert bucket.tokens() == math.inf


class TestValidation:
    @pytest.mark.parametrize(
        ("qps", "burst"),
        [(math.nan, 1), (10.0, 0), (10.0, -3)],
        ids=["nan-qps", "zero-burst", "negative-burst"],
    )
    def test_rejects_unusable_parameters(self, qps: float, burst: int) -> None:
        with pytest.raises(ValueError, match="TokenBucket"):
            TokenBucket(qps, burst, clock=FakeClock())


class TestConcurrency:
    def test_each_token_is_handed_out_once(self) -> None:
        bucket = TokenBucket(1.0, 1000, clock=FakeClock())
        taken: list[int] = []
        lock = threading.Lock()

        def taker() -> None:
            count = sum(bucket.try_take() for _ in range(300))
            with lock:
                taken.append(count)

        threads = [threading.Thread(target=taker) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(5.0)
        assert sum(taken) == 1000
