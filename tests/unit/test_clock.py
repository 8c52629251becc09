"""Behaviour of cbop.clock: RealClock and the manually driven FakeClock."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import pytest

from cbop.clock import Clock, RealClock, wait_for
from cbop_testing.clock import FakeClock

JOIN = 5.0  # real seconds; only bounds a hung test


def start(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


class TestProtocol:
    @pytest.mark.parametrize("clock", [RealClock(), FakeClock()], ids=["real", "fake"])
    def test_both_clocks_satisfy_the_protocol(self, clock: Clock) -> None:
        assert isinstance(clock.now(), float)


class TestRealClock:
    def test_now_is_monotonic(self) -> None:
        clock = RealClock()
        first = clock.now()
        assert clock.now() >= first

    def test_wait_until_a_past_deadline_returns_false_at_once(self) -> None:
        clock = RealClock()
        cond = threading.Condition()
        with cond:
            assert clock.wait_until(cond, clock.now() - 1.0) is False

    def test_wait_until_returns_true_when_notified(self) -> None:
        clock = RealClock()
        cond = threading.Condition()
        results: list[bool] = []
        ready = threading.Event()

        def waiter() -> None:
            with cond:
                ready.set()
                results.append(clock.wait_until(cond, math.inf))

        thread = start(waiter)
        assert ready.wait(JOIN)
        with cond:  # the waiter has released the lock only once it is waiting
            cond.notify_all()
        thread.join(JOIN)
        assert results == [True]

    def test_non_positive_sleep_returns_without_sleeping(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        slept: list[float] = []
        monkeypatch.setattr("cbop.clock.time.sleep", slept.append)
        RealClock().sleep(0)
        RealClock().sleep(-1)
        assert slept == []
        RealClock().sleep(0.25)
        assert slept == [0.25]


class TestFakeClockTime:
    def test_starts_at_start(self) -> None:
        assert FakeClock(12.5).now() == 12.5

    def test_step_and_set_move_time(self) -> None:
        clock = FakeClock()
        clock.step(1.5)
        assert clock.now() == 1.5
        clock.set(10.0)
        assert clock.now() == 10.0

    @pytest.mark.parametrize(
        "action",
        [
            pytest.param(lambda c: c.step(-0.1), id="negative-step"),
            pytest.param(lambda c: c.step(math.nan), id="nan-step"),
            pytest.param(lambda c: c.step(math.inf), id="infinite-step"),
            pytest.param(lambda c: c.set(4.0), id="set-backwards"),
            pytest.param(lambda c: c.set(math.inf), id="set-infinite"),
        ],
    )
    def test_rejects_going_backwards_or_non_finite(
        self, action: Callable[[FakeClock], None]
    ) -> None:
        clock = FakeClock(5.0)
        with pytest.raises(ValueError, match="FakeClock"):
            action(clock)
        assert clock.now() == 5.0

    def test_rejects_non_finite_start(self) -> None:
        with pytest.raises(ValueError, match="finite"):
            FakeClock(math.nan)


class TestFakeClockWaitUntil:
    def test_past_or_current_deadline_does_not_block(self) -> None:
        clock = FakeClock(3.0)
        cond = threading.Condition()
        with cond:
            assert clock.wait_until(cond, 3.0) is False
        assert not clock.has_waiters()

    def test_step_short_of_deadline_keeps_waiter_parked_then_reaching_it_wakes(self) -> None:
        clock = FakeClock()
        cond = threading.Condition()
        results: list[bool] = []

        def waiter() -> None:
            with cond:
                results.append(clock.wait_until(cond, 2.0))

        thread = start(waiter)
        assert clock.wait_for_waiter(2.0)
        clock.step(1.999)
        assert clock.waiter_deadlines() == [2.0]
        assert thread.is_alive()
        clock.step(0.001)
        thread.join(JOIN)
        assert results == [False]  # woken by the deadline: a timeout
        assert not clock.has_waiters()

    def test_notify_before_deadline_returns_true_and_unregisters(self) -> None:
        clock = FakeClock()
        cond = threading.Condition()
        results: list[bool] = []

        def waiter() -> None:
            with cond:
                results.append(clock.wait_until(cond, 100.0))

        thread = start(waiter)
        assert clock.wait_for_waiter(100.0)
        with cond:
            cond.notify_all()
        thread.join(JOIN)
        assert results == [True]
        assert clock.waiter_deadlines() == []

    def test_set_wakes_only_waiters_whose_deadline_is_reached(self) -> None:
        clock = FakeClock()
        conds = {deadline: threading.Condition() for deadline in (1.0, 2.0, 3.0)}
        woken: list[float] = []
        lock = threading.Lock()

        def waiter(deadline: float) -> None:
            cond = conds[deadline]
            with cond:
                while clock.wait_until(cond, deadline):
                    pass
            with lock:
                woken.append(deadline)

        threads = [threading.Thread(target=waiter, args=(d,), daemon=True) for d in conds]
        for thread in threads:
            thread.start()
        for deadline in conds:
            assert clock.wait_for_waiter(deadline)
        clock.set(2.5)
        for thread in threads[:2]:
            thread.join(JOIN)
        assert sorted(woken) == [1.0, 2.0]
        assert clock.waiter_deadlines() == [3.0]
        clock.step(1.0)
        threads[2].join(JOIN)
        assert sorted(woken) == [1.0, 2.0, 3.0]

    def test_untimed_wait_is_not_a_waiter(self) -> None:
        clock = FakeClock()
        cond = threading.Condition()
        entered = threading.Event()

        def waiter() -> None:
            with cond:
                entered.set()
                clock.wait_until(cond, None)

        thread = start(waiter)
        assert entered.wait(JOIN)
        with cond:
            assert not clock.has_waiters()
            cond.notify_all()
        thread.join(JOIN)
        assert not thread.is_alive()

    def test_wait_for_waiter_times_out_when_nobody_waits(self) -> None:
        assert FakeClock().wait_for_waiter(timeout=0.01) is False

    def test_wait_until_without_the_lock_raises_and_leaves_no_waiter(self) -> None:
        clock = FakeClock()
        with pytest.raises(RuntimeError):
            clock.wait_until(threading.Condition(), 1.0)
        assert not clock.has_waiters()


class TestFakeClockSleep:
    def test_sleep_blocks_until_the_clock_has_advanced_enough(self) -> None:
        clock = FakeClock(10.0)
        done = threading.Event()

        def sleeper() -> None:
            clock.sleep(5.0)
            done.set()

        thread = start(sleeper)
        assert clock.wait_for_waiter(15.0)
        clock.step(4.0)
        assert not done.is_set()
        assert clock.waiter_deadlines() == [15.0]
        clock.step(1.0)
        thread.join(JOIN)
        assert done.is_set()

    @pytest.mark.parametrize("seconds", [0.0, -1.0], ids=["zero", "negative"])
    def test_non_positive_sleep_returns_at_once(self, seconds: float) -> None:
        clock = FakeClock()
        clock.sleep(seconds)
        assert clock.now() == 0.0


class TestWaitFor:
    def test_returns_true_once_the_predicate_holds(self) -> None:
        clock = FakeClock()
        cond = threading.Condition()
        state = {"ready": False}
        results: list[bool] = []

        def waiter() -> None:
            with cond:
                results.append(wait_for(clock, cond, lambda: state["ready"], 10.0))

        thread = start(waiter)
        assert clock.wait_for_waiter(10.0)
        clock.step(5.0)  # not yet the deadline: still waiting
        with cond:
            state["ready"] = True
            cond.notify_all()
        thread.join(JOIN)
        assert results == [True]

    def test_returns_false_when_the_clock_passes_the_timeout(self) -> None:
        clock = FakeClock()
        cond = threading.Condition()
        results: list[bool] = []

        def waiter() -> None:
            with cond:
                results.append(wait_for(clock, cond, lambda: False, 2.0))

        thread = start(waiter)
        assert clock.wait_for_waiter(2.0)
        with cond:
            cond.notify_all()  # a spurious wake-up: it must wait again, same deadline
        assert clock.wait_for_waiter(2.0)
        clock.step(2.0)
        thread.join(JOIN)
        assert results == [False]

    def test_true_predicate_does_not_wait(self) -> None:
        cond = threading.Condition()
        with cond:
            assert wait_for(FakeClock(), cond, lambda: True, None) is True

    def test_an_absolute_deadline_is_waited_for_exactly(self) -> None:
        """``now + (deadline - now)`` is below ``deadline`` for these floats; a caller
        looping until ``now() >= deadline`` needs the deadline itself."""
        clock = FakeClock(5.210776725725857)
        deadline = 106.40628893232245
        assert clock.now() + (deadline - clock.now()) < deadline
        cond = threading.Condition()
        results: list[bool] = []

        def waiter() -> None:
            with cond:
                results.append(wait_for(clock, cond, lambda: False, deadline=deadline))

        thread = start(waiter)
        assert clock.wait_for_waiter(deadline)
        clock.set(deadline)
        thread.join(JOIN)
        assert results == [False]

    def test_a_timeout_and_a_deadline_together_are_refused(self) -> None:
        cond = threading.Condition()
        with cond, pytest.raises(ValueError, match="not both"):
            wait_for(FakeClock(), cond, lambda: False, 1.0, deadline=1.0)
