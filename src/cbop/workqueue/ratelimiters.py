"""Rate limiters: how long a failed item waits before its retry, as client-go's ``RateLimiter``.

This module owns retry-delay policy. A ``RateLimiter`` answers ``when(item)`` with a delay
in seconds (and records the failure), ``forget(item)`` clears an item's history and
``num_requeues(item)`` reads it. Provided:

- ``ItemExponentialFailureRateLimiter``: per-item ``base * 2**failures``, capped.
- ``BucketRateLimiter``: one token bucket shared by all items (``cbop.tokenbucket``).
- ``MaxOfRateLimiter``: the longest delay of several limiters.
- ``default_controller_rate_limiter``: client-go's ``DefaultControllerRateLimiter``.

All limiters are thread-safe.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from cbop.clock import Clock
from cbop.locks import YieldingLock
from cbop.tokenbucket import TokenBucket
from cbop.workqueue.interfaces import T

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "default_controller_rate_limiter",
]

T_contra = TypeVar("T_contra", contravariant=True)

# 2.0 ** _MAX_EXPONENT is finite (about 1e301), so base * 2 ** exponent never raises; a
# large base makes it inf at worst, which the max_delay cap then absorbs.
_MAX_EXPONENT = 1000


class RateLimiter(Protocol[T_contra]):
    """Decides how long an item waits before it is retried (client-go's ``RateLimiter``)."""

    def when(self, item: T_contra) -> float:
        """Record a failure of ``item``; return the seconds to wait before retrying it (>= 0)."""
        ...

    def forget(self, item: T_contra) -> None:
        """Stop tracking ``item``: its next ``when`` starts from scratch."""
        ...

    def num_requeues(self, item: T_contra) -> int:
        """Return how many failures of ``item`` are being tracked."""
        ...


class ItemExponentialFailureRateLimiter(Generic[T]):
    """Per-item exponential backoff (client-go's ``ItemExponentialFailureRateLimiter``).

    The n-th ``when(item)`` since the last ``forget(item)`` (n = 0, 1, ...) returns
    ``min(base_delay * 2**n, max_delay)`` seconds; the controller default gives 5 ms,
    10 ms, 20 ms, ... capped at 1000 s. The exponent is capped so that very long
    failure streaks never overflow a float.

    Args:
        base_delay: delay in seconds of the first retry (>= 0).
        max_delay: upper bound in seconds of any delay (>= 0).

    Raises:
        ValueError: if either delay is negative or NaN.
    """

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        if not (base_delay >= 0 and max_delay >= 0):
            raise ValueError(
                f"delays must be non-negative seconds, got base={base_delay!r} max={max_delay!r}"
            )
        self._base_delay = float(base_delay)
        self._max_delay = float(max_delay)
        self._lock = YieldingLock()  # forget() runs after every reconcile
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        """Count a failure of ``item`` and return its backoff in seconds."""
        with self._lock:
            exponent = self._failures.get(item, 0)
            self._failures[item] = exponent + 1
        backoff = self._base_delay * 2.0 ** min(exponent, _MAX_EXPONENT)
        return min(backoff, self._max_delay)

    def forget(self, item: T) -> None:
        """Reset ``item``'s failure count to zero."""
        with self._lock:
            self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        """Return ``item``'s failure count since it was last forgotten."""
        with self._lock:
            return self._failures.get(item, 0)


class BucketRateLimiter(Generic[T]):
    """An overall rate limit shared by all items (client-go's ``BucketRateLimiter``).

    Each ``when`` reserves a token from a ``cbop.tokenbucket.TokenBucket`` holding
    ``burst`` tokens refilled at ``qps`` per second, and returns the seconds until that
    token is available: 0 for the first ``burst`` calls, then ``1/qps`` apart. It keeps
    no per-item state: ``forget`` does nothing and ``num_requeues`` is always 0.

    Args:
        qps: tokens per second (<= 0 or inf: unlimited).
        burst: bucket capacity in tokens.
        clock: time source of the bucket (``None``: ``RealClock()``).

    Raises:
        ValueError: as ``TokenBucket`` (``burst < 1`` with a finite positive ``qps``).
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, *, clock: Clock | None = None) -> None:
        self._bucket = TokenBucket(qps, burst, clock=clock)

    @property
    def bucket(self) -> TokenBucket:
        """The underlying token bucket."""
        return self._bucket

    def when(self, item: T) -> float:
        """Reserve one token and return the seconds to wait for it (``item`` is ignored)."""
        return self._bucket.reserve()

    def forget(self, item: T) -> None:
        """Do nothing: the bucket is shared, not per item."""

    def num_requeues(self, item: T) -> int:
        """Return 0: the bucket does not track items."""
        return 0


class MaxOfRateLimiter(Generic[T]):
    """The strictest of several limiters (client-go's ``MaxOfRateLimiter``).

    ``when`` asks *every* limiter (so each records the failure, and a bucket always
    spends a token) and returns the longest delay; with no limiters it returns 0.
    ``num_requeues`` is the largest of the limiters' counts; ``forget`` forgets in all.
    """

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        self._limiters: tuple[RateLimiter[T], ...] = limiters

    @property
    def limiters(self) -> tuple[RateLimiter[T], ...]:
        """The combined limiters, in construction order."""
        return self._limiters

    def when(self, item: T) -> float:
        """Return the longest of the limiters' delays for ``item``, in seconds."""
        longest = 0.0
        for limiter in self._limiters:
            longest = max(longest, limiter.when(item))
        return longest

    def forget(self, item: T) -> None:
        """Forget ``item`` in every limiter."""
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        """Return the largest failure count any limiter tracks for ``item``."""
        return max((limiter.num_requeues(item) for limiter in self._limiters), default=0)


def default_controller_rate_limiter(clock: Clock | None = None) -> MaxOfRateLimiter[T]:
    """Return client-go's ``DefaultControllerRateLimiter`` on ``clock``.

    The max of ``ItemExponentialFailureRateLimiter(0.005, 1000.0)`` (per item: 5 ms
    doubling up to 1000 s) and ``BucketRateLimiter(qps=10.0, burst=100)`` (overall: 10
    retries per second after a burst of 100). ``clock`` drives the bucket (``None``:
    ``RealClock()``).
    """
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter[T](0.005, 1000.0),
        BucketRateLimiter[T](10.0, 100, clock=clock),
    )
