"""Locks for the short critical sections that busy reconcile threads share.

Why not a plain ``threading.Lock``: CPython runs one thread at a time (the interpreter
lock, the GIL). When a thread finds a ``threading.Lock`` taken, it gives up the GIL and
sleeps in the operating system until the lock is released; the lock then passes to it
at once, while it is still asleep, and it must wait for the GIL holding that lock. The
thread that released the lock soon wants it again (the next work item takes the same
locks), finds it held by a thread that cannot run, gives up the GIL to it, and so on: a
lock convoy. Every acquisition then costs two context switches, and it lasts as long as
the threads keep taking the lock. Measured on 2 cores, 10,000 reconciles of converged
bundles (no request sent), one reconcile thread: 0.85 CPU s and 4 context switches;
four threads sharing a few ``threading.Lock``s: 1.35-2.0 CPU s and 10,000-17,500
context switches; four threads sharing :class:`YieldingLock`s: 1.10-1.15 CPU s and
about 1,000.

:class:`YieldingLock` never sleeps on a taken lock at first: it gives up the GIL
(``time.sleep(0)``) and tries again, so the lock is only ever taken by a thread that
holds the GIL and runs. A holder interrupted inside its critical section (the GIL is
handed over every 5 ms) gets the GIL back, finishes and releases the lock; nobody
queues on it. Only a lock still taken after :data:`SPINS` tries, or after
:data:`SPIN_SECONDS` (a holder that does something slow under it), is waited for as
``threading.Lock`` waits.

Use it for locks held briefly and taken by several busy threads for every item of work
(the workqueue, the reconciler's caches, the informer's indexer); a lock held across
I/O gains nothing from it.
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
