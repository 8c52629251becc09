"""Time as a dependency: the ``Clock`` protocol and the real clock.

This module owns cbop's notion of time: everything that reads the time, sleeps or waits
with a timeout takes a ``Clock``, so that tests drive time by hand with
``cbop_testing.clock.FakeClock``, as ``k8s.io/utils/clock`` does for client-go. Times
are ``float`` seconds on a monotonic scale whose origin means nothing.

A timed wait is a ``threading.Condition`` and a deadline on the clock's scale:
``clock.wait_until(cond, deadline)`` (a fake clock notifies the condition when the test
moves past the deadline). A waiter may also wake early, so callers re-check their
predicate in a loop, as with ``Condition.wait``; :func:`wait_for` is that loop. This
module is the bottom layer: it imports nothing from cbop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "RealClock", "wait_for"]


class Clock(Protocol):
    """A source of monotonic time that can also sleep and wait with a deadline.

    Implementations must be safe to call from any thread. ``RealClock`` is the one cbop
    provides (tests use ``cbop_testing.clock.FakeClock``); the shape follows client-go's
    ``clock.Clock`` reduced to what cbop needs.
    """

    def now(self) -> float:
        """Return the current time in seconds on a monotonic scale (never decreases)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds`` of this clock's time (<= 0: return)."""
        ...

    def wait_until(self, cond: threading.Condition, deadline: float | None) -> bool:
        """Wait on ``cond`` until notified or until this clock reaches ``deadline``.

        The caller must hold ``cond``'s lock, as for ``Condition.wait``; the lock is
        released while waiting and re-acquired before returning. ``deadline`` is an
        absolute time on this clock's scale (compare ``now()``), or ``None`` to wait
        only for a notification.

        Returns ``False`` if the deadline had passed when the call returned (a timeout),
        ``True`` otherwise (notified, or woken spuriously). Callers re-check their
        condition in a loop.
        """
        ...


class RealClock:
    """The system's monotonic clock (``time.monotonic``), as client-go's ``clock.RealClock``."""

    def now(self) -> float:
        """Return ``time.monotonic()`` in seconds."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """Sleep for ``seconds`` real seconds; a non-positive value returns at once."""
        if seconds > 0:
            time.sleep(seconds)

    def wait_until(self, cond: threading.Condition, deadline: float | None) -> bool:
        """Wait on ``cond`` (lock held) until notified or ``time.monotonic()`` >= ``deadline``.

        See ``Clock.wait_until``. Deadlines beyond ``threading.TIMEOUT_MAX`` seconds away
        (including ``math.inf``) are waited for in ``TIMEOUT_MAX`` slices, which the
        caller's loop absorbs as spurious wake-ups.

        Raises:
            RuntimeError: if the caller does not hold ``cond``'s lock.
        """
        if deadline is None:
            cond.wait()
            return True
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            return False
        cond.wait(min(timeout, threading.TIMEOUT_MAX))
        return time.monotonic() < deadline


def wait_for(
    clock: Clock,
    cond: threading.Condition,
    predicate: Callable[[], bool],
    timeout: float | None = None,
    *,
    deadline: float | None = None,
) -> bool:
    """Wait on ``cond`` until ``predicate()`` is true or ``timeout`` seconds of ``clock`` pass.

    ``Condition.wait_for`` with the timeout measured on ``clock``: the caller holds
    ``cond``'s lock; ``predicate`` is evaluated with it held, first before any waiting;
    ``timeout=None`` (and no ``deadline``) waits without limit. ``deadline`` instead of
    ``timeout`` is an absolute time on ``clock``: pass it when the caller compares
    ``now()`` with that time, since ``now + (deadline - now)`` can round to just below
    ``deadline`` and a caller looping until ``now() >= deadline`` would then spin.
    Returns the last value of ``predicate()`` (``False`` means the time ran out first).

    Raises:
        RuntimeError: if the caller does not hold ``cond``'s lock.
        ValueError: both ``timeout`` and ``deadline`` given.
    """
    if timeout is not None:
        if deadline is not None:
            raise ValueError("give timeout or deadline, not both")
        deadline = clock.now() + timeout
    result = predicate()
    while not result:
        if not clock.wait_until(cond, deadline):
            return predicate()
        result = predicate()
    return result
