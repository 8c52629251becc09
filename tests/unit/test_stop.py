"""The stop signal: set once, callbacks once, waiters woken without polling."""

from __future__ import annotations

import threading

import pytest

from cbop.clock import wait_for
from cbop.stop import StopSignal
from cbop_testing.clock import FakeClock


def test_callbacks_run_once_on_the_first_set_and_at_once_when_already_set() -> None:
    stop = StopSignal()
    calls: list[str] = []
    stop.on_set(lambda: calls.append("a"))
    unregister = stop.on_set(lambda: calls.append("b"))
    unregister()
    stop.set()
    stop.set()
    assert calls == ["a"]
    stop.on_set(lambda: calls.append("late"))
    assert calls == ["a", "late"]
    assert stop.is_set()


def test_it_cannot_be_cleared() -> None:
    stop = StopSignal()
    stop.set()
    with pytest.raises(RuntimeError, match="cannot be cleared"):
        stop.clear()
    assert stop.is_set()


def test_wake_notifies_a_condition_waiting_on_a_clock_without_a_deadline() -> None:
    """A loop waiting on a fake clock (whose time never moves here) learns of the stop:
    the signal itself notifies the condition, no thread polls the event."""
    stop = StopSignal()
    clock = FakeClock()
    cond = threading.Condition()
    stop.wake(cond)
    woken: list[bool] = []

    def waiter() -> None:
        with cond:
            woken.append(wait_for(clock, cond, stop.is_set))

    thread = threading.Thread(target=waiter)
    thread.start()
    stop.set()
    thread.join(10)
    assert woken == [True]


def test_a_child_is_set_with_its_parent_and_may_be_set_alone() -> None:
    parent = StopSignal()
    alone, follows = parent.child(), parent.child()
    alone.set()
    assert not parent.is_set()
    assert len(parent._callbacks) == 1  # the child set alone let go of its parent
    parent.set()
    assert follows.is_set()
