"""The rate-limiting queue: retries with backoff, as client-go's ``rateLimitingType``.

This module owns only the glue between a ``DelayingQueue`` and a ``RateLimiter``:
``add_rate_limited(x)`` is ``add_after(x, limiter.when(x))``; ``forget`` and
``num_requeues`` delegate to the limiter. The limiters themselves live in
``cbop.workqueue.ratelimiters``.
"""

from __future__ import annotations

from cbop.clock import Clock
from cbop.workqueue.delaying import DelayingQueue
from cbop.workqueue.interfaces import T
from cbop.workqueue.metrics import MetricsProvider
from cbop.workqueue.ratelimiters import RateLimiter, default_controller_rate_limiter

__all__ = ["RateLimitingQueue"]


class RateLimitingQueue(DelayingQueue[T]):
    """A ``DelayingQueue`` that delays retries with a ``RateLimiter``.

    Satisfies ``cbop.workqueue.RateLimitingInterface[T]``, as client-go's
    ``NewRateLimitingQueueWithConfig``.

    Args:
        rate_limiter: decides each retry's delay; ``None`` means
            ``default_controller_rate_limiter(clock)`` on this queue's clock.
        name, clock, metrics_provider: as for ``Queue``.
    """

    def __init__(
        self,
        rate_limiter: RateLimiter[T] | None = None,
        *,
        name: str | None = None,
        clock: Clock | None = None,
        metrics_provider: MetricsProvider | None = None,
    ) -> None:
        super().__init__(name=name, clock=clock, metrics_provider=metrics_provider)
        self._rate_limiter: RateLimiter[T] = (
            rate_limiter
            if rate_limiter is not None
            else default_controller_rate_limiter(clock=self._clock)
        )

    @property
    def rate_limiter(self) -> RateLimiter[T]:
        """The limiter deciding retry delays."""
        return self._rate_limiter

    def add_rate_limited(self, item: T) -> None:
        """Add ``item`` after ``rate_limiter.when(item)`` seconds (a retry after failure).

        The limiter is consulted even while shutting down (so its failure count and
        token bucket advance), as in client-go; the add itself is then dropped.
        """
        self.add_after(item, self._rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """Clear ``item``'s failure history in the limiter; the caller still calls ``done``."""
        self._rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        """Return the limiter's failure count for ``item`` (0 after ``forget``)."""
        return self._rate_limiter.num_requeues(item)
