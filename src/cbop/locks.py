"""Locks for the short critical sections that busy reconcile threads share.

Why not a plain ``threading.Lock``: a thread that finds one taken gives up the GIL and
sleeps until it is released; the lock then passes to it while it is still asleep, and
the thread that released it, wanting it again for the next item of work, must wait for
a thread that cannot run: a lock convoy, two context switches per acquisition for as
long as the threads keep taking the lock (bench/results/s6-s7.md measures it).
:class:`YieldingLock` never sleeps on a taken lock at first: it gives up the GIL
(``time.sleep(0)``) and tries again, so the lock is only taken by a thread that runs;
only a lock still taken after :data:`SPINS` tries or :data:`SPIN_SECONDS` is waited for
as ``threading.Lock`` waits. Use it for locks held briefly by several busy threads for
every item of work (the workqueue, the reconciler's caches, the indexer), not across I/O.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any, Protocol, cast

import cachetools

__all__ = ["SPINS", "SPIN_SECONDS", "YieldingLock", "absent", "condition"]

#: Tries (each after giving up the GIL) before waiting for a taken lock.
SPINS = 64
#: Seconds of trying before waiting for a taken lock.
SPIN_SECONDS = 0.02


class _Lock(Protocol):
    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...
    def release(self) -> None: ...


class YieldingLock:
    """A mutex whose contended acquire yields the GIL instead of queueing (see module docs).

    Args:
        inner: the lock it guards with (default a new ``threading.Lock``); a
            ``threading.RLock`` makes it reentrant. Only one over a ``threading.Lock``
            can serve a ``threading.Condition`` (see :func:`condition`): the Condition
            tells whether the caller holds the lock by trying to take it, which the
            owner of an RLock always can.

    Usable as a context manager; ``acquire(blocking, timeout)`` and ``release()`` as
    ``threading.Lock``'s (``timeout`` in seconds, -1 for none).

    Raises:
        ValueError: from ``acquire``, a timeout with ``blocking=False``, or one that is
            negative (other than -1) or NaN, as ``threading.Lock``.
        RuntimeError: from ``release``, when the lock is not held.

    It relies on the GIL as the rest of cbop does (CPython 3.11, not a free-threaded
    build): between its tries another thread runs only when this one gives up the GIL.
    """

    __slots__ = ("_acquire", "_release")

    def __init__(self, inner: _Lock | None = None) -> None:
        lock = inner if inner is not None else threading.Lock()
        self._acquire = lock.acquire
        self._release = lock.release

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock; return whether it was taken (always, when blocking without timeout)."""
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if timeout != -1 and not timeout >= 0:
            raise ValueError("timeout value must be a non-negative number")
        if self._acquire(False):
            return True
        if not blocking:
            return False
        return self._contended(timeout)

    def _contended(self, timeout: float) -> bool:
        started = time.monotonic()
        deadline = None if timeout < 0 else started + timeout
        spin_until = started + SPIN_SECONDS
        if deadline is not None:
            spin_until = min(spin_until, deadline)
        for _ in range(SPINS):
            time.sleep(0)  # hand the GIL to whoever holds the lock
            if self._acquire(False):
                return True
            if time.monotonic() >= spin_until:
                break
        if deadline is None:
            return self._acquire(True)
        return self._acquire(True, max(0.0, deadline - time.monotonic()))

    def release(self) -> None:
        """Release the lock."""
        self._release()

    def __enter__(self) -> bool:
        if self._acquire(False):
            return True
        return self._contended(-1)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release()


def condition(lock: YieldingLock) -> threading.Condition:
    """Return a ``threading.Condition`` whose waits release and re-take ``lock``.

    ``lock`` must wrap a ``threading.Lock`` (the default). The Condition's own waiters
    sleep on locks of their own, so only the mutex itself yields.
    """
    return threading.Condition(cast(Any, lock))


def absent(cache: cachetools.Cache[Any, Any], key: Any) -> bool:
    """Whether ``key`` is not in ``cache``, asked without the lock that guards it.

    For the fast path of a lookup that mostly misses (every bundle after a restart):
    reconcile threads that take a shared lock several times per reconcile convoy on it
    (measured: 10,000 cold reconciles on 4 threads cost twice the CPU of one thread,
    with about 20,000 context switches against 10). A containment test reads the
    cache's dict without reordering or expiring anything (``cachetools``'
    ``__contains__``), which the interpreter's lock makes safe against a writer
    holding ours; the answer may be out of date by the time it is used, so only use it
    where a stale answer is harmless: a missed entry is computed again, and a key is
    never reconciled by two threads at once, so the entry of the bundle at hand is not
    being written by another thread. It relies on the GIL: without it (a free-threaded
    build) a ``TTLCache`` being written can be seen with an entry whose expiry is not
    set yet.
    """
    return key not in cache
