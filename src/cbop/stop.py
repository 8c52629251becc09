"""The stop signal: a request to stop that wakes everyone waiting for it.

This module owns :class:`StopSignal`, the one way cbop asks a long-running loop to stop
(the leader elector, the shard coordinator, an informer, the manager's runnables). It
plays the part of a Go context's ``Done()`` channel: a loop that waits on a
``threading.Condition`` (on a :class:`cbop.clock.Clock`, so tests can drive time) asks
the signal to notify that condition when it is set (:meth:`StopSignal.wake`), and so
learns of the request at once instead of polling an event. :meth:`StopSignal.child`
gives a signal that is set when its parent is, and may also be set on its own (one
shard's work stopping while the process goes on), as ``context.WithCancel``.

A :class:`StopSignal` is a ``threading.Event`` (``is_set``, ``wait``), so code that
only tests or waits for it needs nothing else. Setting it is final: there is no
``clear``. Callbacks run on the thread that sets the signal and must be quick (notify a
condition, set another signal).

This module is in the bottom layer: it imports nothing from cbop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["StopSignal"]


class StopSignal(threading.Event):
    """A ``threading.Event`` that, once set, calls back and notifies its waiters.

    Thread-safe. :meth:`set` is idempotent: callbacks run once, on the first call.
    """

    def __init__(self) -> None:
        super().__init__()
        self._callbacks_lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], object]] = {}
        self._next_id = 0

    def wait_handling_signals(self, period: float = 1.0) -> None:
        """Block until the signal is set, returning to Python every ``period`` seconds.

        For the main thread, whose Python signal handlers (SIGTERM, SIGINT) run only when
        it executes Python code again. The kernel may deliver a process's SIGTERM to any
        thread that does not block it; the C-level handler then only flags it, and a main
        thread blocked in a plain :meth:`wait` would never run the Python handler that
        sets this signal. Waiting in slices bounds that delay to ``period`` seconds.

        Args:
            period: seconds each slice of the wait lasts (> 0).
        """
        while not self.wait(period):
            pass

    def set(self) -> None:
        """Request the stop: set the event, then run every registered callback once."""
        with self._callbacks_lock:
            if self.is_set():
                return
            super().set()
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        for callback in callbacks:
            callback()

    def clear(self) -> None:
        """Refuse: a stop request cannot be taken back.

        Raises:
            RuntimeError: always.
        """
        raise RuntimeError("a StopSignal cannot be cleared")

    def on_set(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` when the signal is set (at once, here, if it is already).

        Returns:
            A function that unregisters the callback (a no-op once it ran).
        """
        with self._callbacks_lock:
            if not self.is_set():
                token = self._next_id
                self._next_id += 1
                self._callbacks[token] = callback
                return lambda: self._forget(token)
        callback()
        return _nothing

    def wake(self, cond: threading.Condition) -> Callable[[], None]:
        """Notify every waiter of ``cond`` when the signal is set (see :meth:`on_set`).

        The condition's lock is taken to notify, so the caller must not hold it while
        setting this signal. Returns the unregister function of :meth:`on_set`.
        """

        def notify() -> None:
            with cond:
                cond.notify_all()

        return self.on_set(notify)

    def child(self) -> StopSignal:
        """Return a new signal that is set when this one is (and may be set alone)."""
        child = StopSignal()
        unregister = self.on_set(child.set)
        # A child set on its own no longer needs to hear of its parent.
        child.on_set(unregister)
        return child

    def _forget(self, token: int) -> None:
        with self._callbacks_lock:
            self._callbacks.pop(token, None)


def _nothing() -> None:
    """Unregister a callback that has already run."""
