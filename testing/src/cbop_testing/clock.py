"""A manually driven clock for tests: ``FakeClock``, as ``k8s.io/utils/clock/testing``.

``FakeClock`` implements ``cbop.clock.Clock`` (structurally; nothing here imports cbop):
time moves only when a test calls ``step`` or ``set``, and every thread blocked in
``wait_until`` or ``sleep`` whose deadline is reached is woken. Unit tests use it
instead of sleeping. How a waiter uses a clock is described in :mod:`cbop.clock`.
"""

from __future__ import annotations

import math
import threading

__all__ = ["FakeClock"]


class _Waiter:
    """A thread blocked in ``FakeClock.wait_until``: its condition and its deadline."""

    __slots__ = ("cond", "deadline")

    def __init__(self, cond: threading.Condition, deadline: float) -> None:
        self.cond = cond
        self.deadline = deadline


class FakeClock:
    """A manually driven clock for deterministic tests, as client-go's ``FakeClock``.

    Time starts at ``start`` seconds and only moves when a test calls ``step`` or ``set``.
    ``wait_until`` and ``sleep`` block (in real time) until the fake time reaches their
    deadline. Thread-safe.

    Locking: ``_lock`` guards the time and the waiter list. ``wait_until`` is entered
    with the caller's condition lock held and then takes ``_lock`` (order: caller's lock,
    then ``_lock``). ``step``/``set`` never hold ``_lock`` while acquiring a caller's
    lock, so the two orders cannot deadlock. ``_waiters_changed`` (on ``_lock``) is
    waited on by ``wait_for_waiter`` and notified whenever a waiter registers or is
    released.

    ``sleep`` differs from client-go's ``FakeClock.Sleep`` (which advances the clock): it
    blocks until another thread moves the clock, so a test can observe a component
    sleeping and decide when it wakes.

    Raises:
        ValueError: if ``start`` is not finite.
    """

    def __init__(self, start: float = 0.0) -> None:
        if not math.isfinite(start):
            raise ValueError(f"FakeClock start must be finite, got {start!r}")
        self._now = float(start)
        self._lock = threading.Lock()
        # wait_for_waiter() waits; wait_until() (register/unregister) and step()/set() notify.
        self._waiters_changed = threading.Condition(self._lock)
        self._waiters: list[_Waiter] = []
        # sleep() waits on this condition through wait_until(); step()/set() notify it.
        self._sleep_cond = threading.Condition(threading.Lock())

    def now(self) -> float:
        """Return the fake time in seconds."""
        with self._lock:
            return self._now

    def step(self, seconds: float) -> None:
        """Advance the clock by ``seconds`` and wake every waiter whose deadline is reached.

        Raises:
            ValueError: if ``seconds`` is negative or not finite (the clock is monotonic).
        """
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(
                f"FakeClock.step needs a finite, non-negative duration, got {seconds!r}"
            )
        with self._lock:
            due = self._advance_locked(self._now + seconds)
        self._wake(due)

    def set(self, t: float) -> None:
        """Set the clock to absolute time ``t`` seconds and wake waiters whose deadline is reached.

        Raises:
            ValueError: if ``t`` is earlier than ``now()`` or not finite (the clock is monotonic).
        """
        if not math.isfinite(t):
            raise ValueError(f"FakeClock.set needs a finite time, got {t!r}")
        with self._lock:
            if t < self._now:
                raise ValueError(f"FakeClock cannot go back in time from {self._now} to {t}")
            due = self._advance_locked(t)
        self._wake(due)

    def sleep(self, seconds: float) -> None:
        """Block until the fake time has advanced by ``seconds`` (moved by another thread).

        A non-positive duration returns at once. Sleepers are listed by
        ``waiter_deadlines`` like any other waiter.
        """
        if seconds <= 0:
            return
        with self._sleep_cond:
            deadline = self.now() + seconds
            while self.wait_until(self._sleep_cond, deadline):
                pass

    def wait_until(self, cond: threading.Condition, deadline: float | None) -> bool:
        """Wait on ``cond`` (lock held) until notified or the fake time reaches ``deadline``.

        See ``Clock.wait_until``. With a deadline, the condition is registered so that
        ``step``/``set`` notify it once the deadline is reached; the real wait has no
        timeout. With ``deadline=None`` this is a plain ``cond.wait()`` and is not listed
        as a waiter.

        Raises:
            RuntimeError: if the caller does not hold ``cond``'s lock.
        """
        if deadline is None:
            cond.wait()
            return True
        waiter = _Waiter(cond, deadline)
        with self._lock:
            if deadline <= self._now:
                return False
            self._waiters.append(waiter)
            self._waiters_changed.notify_all()
        # Still holding cond's lock here, so a concurrent step() cannot notify cond until
        # cond.wait() has released it: the wake-up cannot be lost.
        try:
            cond.wait()
        finally:
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                    self._waiters_changed.notify_all()
                expired = self._now >= deadline
        return not expired

    def waiter_deadlines(self) -> list[float]:
        """Return the deadlines (seconds, sorted) of all threads blocked on this clock."""
        with self._lock:
            return sorted(w.deadline for w in self._waiters)

    def has_waiters(self) -> bool:
        """Return whether any thread is blocked on this clock with a deadline."""
        with self._lock:
            return bool(self._waiters)

    def wait_for_waiter(self, deadline: float | None = None, *, timeout: float = 5.0) -> bool:
        """Block until a thread waits on this clock (with exactly ``deadline``, if given).

        Lets a test synchronise with a background thread: after it returns ``True`` the
        thread is parked in ``wait_until``/``sleep`` and will stay parked until the clock
        reaches its deadline or its condition is notified. ``deadline`` is compared with
        a 1e-9 s tolerance. ``timeout`` is in real seconds and only guards against a
        hung test.

        Returns ``False`` if no matching waiter appeared within ``timeout``.
        """

        def found() -> bool:
            if deadline is None:
                return bool(self._waiters)
            return any(math.isclose(w.deadline, deadline, abs_tol=1e-9) for w in self._waiters)

        with self._waiters_changed:
            return self._waiters_changed.wait_for(found, timeout)

    def _advance_locked(self, t: float) -> list[threading.Condition]:
        """Move the time to ``t`` and unregister the due waiters. Called with ``_lock`` held.

        Returns the distinct conditions of the due waiters, to be notified after
        ``_lock`` is released.
        """
        self._now = t
        due = [w for w in self._waiters if w.deadline <= t]
        if not due:
            return []
        self._waiters = [w for w in self._waiters if w.deadline > t]
        self._waiters_changed.notify_all()
        conds: list[threading.Condition] = []
        for w in due:
            if all(w.cond is not c for c in conds):
                conds.append(w.cond)
        return conds

    def _wake(self, conds: list[threading.Condition]) -> None:
        """Notify every condition in ``conds``. Called without ``_lock`` held."""
        for cond in conds:
            with cond:
                cond.notify_all()
