"""The workqueue's typing contracts: the queue protocols, the item type, the priorities.

This module owns the ``typing.Protocol`` classes that callers (the controller) type
against, mirroring client-go's ``workqueue.Interface``, ``DelayingInterface`` and
``RateLimitingInterface`` and controller-runtime's ``PriorityQueue``: each extends the one
before. The concrete classes in ``cbop.workqueue.queue``, ``.delaying``, ``.ratelimiting``
and ``.priority`` satisfy them structurally. It also owns the two priorities cbop uses,
with controller-runtime's values.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol, TypeVar

__all__ = [
    "LOW_PRIORITY",
    "NORMAL_PRIORITY",
    "DelayingInterface",
    "Interface",
    "PriorityInterface",
    "RateLimitingInterface",
    "T",
]

T = TypeVar("T", bound=Hashable)
"""The item type of a queue: any hashable value (cbop uses ``str`` keys "namespace/name")."""

NORMAL_PRIORITY = 0
"""The priority of real changes and of adds that name none (controller-runtime's default 0)."""

LOW_PRIORITY = -100
"""The priority of keys from an informer's initial list or a resync (controller-runtime's
``handler.LowPriority``): work that confirms, rather than changes, the world."""


class Interface(Protocol[T]):
    """A deduplicating work queue, as client-go's ``workqueue.Interface``.

    An item is *dirty* from ``add`` until a worker ``get``s it, then *processing* until
    the worker calls ``done``. Adding a dirty item is a no-op; adding a processing item
    queues it again once ``done`` is called, so one item is never processed by two
    workers at once and no add is lost.
    """

    def add(self, item: T) -> None:
        """Mark ``item`` as needing processing (no-op if already queued or shutting down)."""
        ...

    def get(self) -> tuple[T | None, bool]:
        """Block until an item is available; return ``(item, False)``.

        Returns ``(None, True)`` once the queue is shutting down and empty.
        """
        ...

    def done(self, item: T) -> None:
        """Mark ``item`` as processed; re-queue it if it was added while processing."""
        ...

    def __len__(self) -> int:
        """Return the number of items waiting to be handed out by ``get``."""
        ...

    def shut_down(self) -> None:
        """Stop accepting adds and wake every ``get``; do not wait for workers."""
        ...

    def shut_down_with_drain(self) -> None:
        """Like ``shut_down``, then block until no item is being processed."""
        ...

    def shutting_down(self) -> bool:
        """Return whether ``shut_down`` or ``shut_down_with_drain`` has been called."""
        ...


class DelayingInterface(Interface[T], Protocol[T]):
    """An ``Interface`` that can add items after a delay, as client-go's ``DelayingInterface``."""

    def add_after(self, item: T, delay_seconds: float) -> None:
        """Add ``item`` once ``delay_seconds`` have passed (<= 0: add now)."""
        ...


class RateLimitingInterface(DelayingInterface[T], Protocol[T]):
    """A ``DelayingInterface`` with per-item backoff, as client-go's ``RateLimitingInterface``."""

    def add_rate_limited(self, item: T) -> None:
        """Add ``item`` after the delay its rate limiter decides (a retry after failure)."""
        ...

    def forget(self, item: T) -> None:
        """Clear ``item``'s failure history in the rate limiter (still call ``done``)."""
        ...

    def num_requeues(self, item: T) -> int:
        """Return how many times ``item`` has been rate-limited since it was last forgotten."""
        ...


class PriorityInterface(RateLimitingInterface[T], Protocol[T]):
    """A ``RateLimitingInterface`` with prioritised adds (controller-runtime's ``PriorityQueue``).

    Priorities are ``int``; higher is served first (``NORMAL_PRIORITY`` > ``LOW_PRIORITY``).
    A key keeps the highest priority and the earliest ready time of its adds. Calls without
    a priority behave as the ``RateLimitingInterface`` methods they extend.
    """

    def add(self, item: T, priority: int = NORMAL_PRIORITY) -> None:
        """Mark ``item`` as needing processing at ``priority`` (or higher, if already so)."""
        ...

    def add_after(self, item: T, delay_seconds: float, priority: int | None = None) -> None:
        """Add ``item`` at ``priority`` once ``delay_seconds`` have passed (<= 0: now).

        ``None``: the priority the item was handed out with while a worker holds it,
        else ``NORMAL_PRIORITY``.
        """
        ...

    def add_rate_limited(self, item: T, priority: int | None = None) -> None:
        """Add ``item`` after its rate limiter's delay; ``priority`` as for ``add_after``."""
        ...

    def get_with_priority(self) -> tuple[T | None, int, bool]:
        """As ``get``, also returning the priority the item was handed out with.

        Returns ``(item, priority, False)``, or ``(None, NORMAL_PRIORITY, True)`` once the
        queue is shutting down and empty.
        """
        ...
