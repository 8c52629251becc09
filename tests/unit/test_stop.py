"""The stop signal: set once, callbacks once, waiters woken without polling."""

from __future__ import annotations

import subprocess
import sys
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


_SIGTERM_ON_ANOTHER_THREAD = """
import signal, sys, threading, time
from cbop.stop import StopSignal

stop = StopSignal()
signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
waiting = threading.Event()


def worker() -> None:
    waiting.wait()
    time.sleep(0.5)  # the main thread is blocked in its wait by now
    # The kernel may hand a process's SIGTERM to any thread: here, to this one.
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
    threading.Event().wait()


threading.Thread(target=worker, daemon=True).start()
waiting.set()
if sys.argv[1] == "slices":
    stop.wait_handling_signals(0.2)
    print("set" if stop.is_set() else "not set")
else:
    # True only if the handler ran while the main thread waited.
    print("set" if stop.wait(float(sys.argv[2])) else "not set")
"""


def test_a_sigterm_delivered_to_another_thread_wakes_the_main_thread() -> None:
    # A plain wait on the main thread never runs the handler (bounded here so the
    # test ends): what the manager's main thread did before it waited in slices.
    plain = subprocess.run(
        [sys.executable, "-c", _SIGTERM_ON_ANOTHER_THREAD, "plain", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert plain.stdout.strip() == "not set"
    sliced = subprocess.run(
        [sys.executable, "-c", _SIGTERM_ON_ANOTHER_THREAD, "slices"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert sliced.stdout.strip() == "set"
