"""A thread-safe token bucket: the one rate-limiting primitive cbop uses.

This module owns token-bucket arithmetic. The workqueue's ``BucketRateLimiter`` is built
on it (overall retry rate of a controller), and the Kubernetes client adapter uses it for
client-side QPS limits. Its semantics follow ``golang.org/x/time/rate.Limiter``:
tokens accrue continuously at ``qps`` per second up to ``burst``; ``reserve()`` always
takes a token, going into debt when none is left, and tells the caller how long to wait
before the token is really theirs (``Reserve().Delay()``).

Like ``cbop.clock``, this is the bottom layer of the package and imports nothing from
cbop (the layering contract keeps the two bottom modules independent). It reads time
through the one-method ``TimeSource`` protocol, which every ``cbop.clock.Clock``
satisfies.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Protocol

__all__ = ["TimeSource", "TokenBucket"]


class TimeSource(Protocol):
    """Anything with a monotonic ``now()`` in seconds, e.g. a ``cbop.clock.Clock``."""

    def now(self) -> float:
        """Return the current time in seconds on a monotonic scale."""
        ...


class _MonotonicTime:
    """The default ``TimeSource``: ``time.monotonic()``."""

    def now(self) -> float:
        """Return ``time.monotonic()``."""
        return time.monotonic()


class TokenBucket:
    """A token bucket refilled at ``qps`` tokens per second, holding at most ``burst``.

    The bucket starts full. ``qps <= 0`` or ``qps == math.inf`` means unlimited: every
    call succeeds at once and ``burst`` is ignored. Time is read from ``clock`` (any
    ``cbop.clock.Clock`` or other ``TimeSource``; ``None`` means ``time.monotonic``).
    All methods are thread-safe (one internal lock).

    To block until a token is available: ``clock.sleep(bucket.reserve())`` with a
    ``cbop.clock.Clock``.

    Raises:
        ValueError: if ``qps`` is NaN, or the bucket is limited and ``burst < 1``
            (such a bucket could never hand out a token).
    """

    def __init__(self, qps: float, burst: int, *, clock: TimeSource | None = None) -> None:
        if math.isnan(qps):
            raise ValueError("TokenBucket qps must be a number, got NaN")
        self._clock: TimeSource = clock if clock is not None else _MonotonicTime()
        self._unlimited = qps <= 0 or math.isinf(qps)
        if not self._unlimited and burst < 1:
            raise ValueError(f"TokenBucket burst must be >= 1 when qps is limited, got {burst}")
        self._qps = float(qps)
        self._burst = burst
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._last = self._clock.now()

    @property
    def qps(self) -> float:
        """Refill rate in tokens per second (as given; <= 0 or inf means unlimited)."""
        return self._qps

    @property
    def burst(self) -> int:
        """Capacity of the bucket in tokens."""
        return self._burst

    def reserve(self) -> float:
        """Take one token now and return how many seconds to wait before using it (>= 0).

        The token is spent even when the bucket is empty: the bucket goes into debt and
        the returned delay grows by ``1 / qps`` for each reservation made in advance, as
        x/time/rate's ``Reserve().Delay()``. Returns ``0.0`` for an unlimited bucket.
        """
        if self._unlimited:
            return 0.0
        with self._lock:
            self._refill_locked()
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self._qps

    def try_take(self) -> bool:
        """Take a token if one is available now; return whether one was taken.

        Never goes into debt and never waits (x/time/rate's ``Allow()``). Always ``True``
        for an unlimited bucket.
        """
        if self._unlimited:
            return True
        with self._lock:
            self._refill_locked()
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False

    def tokens(self) -> float:
        """Return the tokens available now (negative while reservations are outstanding).

        Returns ``math.inf`` for an unlimited bucket.
        """
        if self._unlimited:
            return math.inf
        with self._lock:
            self._refill_locked()
            return self._tokens

    def _refill_locked(self) -> None:
        """Credit the tokens accrued since the last call, capped at ``burst``.

        Called with ``_lock`` held. A clock that appears to go backwards credits nothing.
        """
        now = self._clock.now()
        elapsed = now - self._last
        if elapsed > 0:
            self._tokens = min(float(self._burst), self._tokens + elapsed * self._qps)
            self._last = now
