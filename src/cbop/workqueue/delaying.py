"""The delaying queue: ``add_after``, as client-go's ``delayingType``.

This module owns delayed adds. Items waiting for their ready time sit in a min-heap
ordered by ready time (ties in arrival order) beside a dict from item to its live heap
entry, so each item waits at most once; re-adding a waiting item can only move its ready
time earlier. A single daemon thread, the *waiting loop*, sleeps on a Condition until the
earliest ready time on the queue's clock (``Clock.wait_until``) or until ``add_after``
creates a new earliest entry, then adds every ready item to the underlying queue in
ready-time order. With a ``FakeClock`` the loop is driven entirely by ``FakeClock.step``.

The heap and the loop share the base queue's single mutex, so releasing a batch of ready
items is atomic with respect to ``get``.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading

from cbop.clock import Clock
from cbop.locks import condition
from cbop.workqueue.interfaces import T
from cbop.workqueue.metrics import MetricsProvider
from cbop.workqueue.queue import Queue

__all__ = ["DelayingQueue"]


class DelayingQueue(Queue[T]):
    """A ``Queue`` whose items can be added after a delay (client-go's ``DelayingInterface``).

    Satisfies ``cbop.workqueue.DelayingInterface[T]``. Arguments are those of ``Queue``.
    Starts the waiting-loop daemon thread; shutting the queue down stops it and drops
    the items still waiting.
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        clock: Clock | None = None,
        metrics_provider: MetricsProvider | None = None,
    ) -> None:
        super().__init__(name=name, clock=clock, metrics_provider=metrics_provider)
        # The waiting loop waits here until the earliest ready time (a deadline on the
        # queue's clock); add_after() notifies when it creates a new earliest entry, the
        # shut-down methods notify to stop the loop.
        self._waiting_changed = condition(self._mutex)
        # Min-heap of (ready_at, sequence, item); entries that were superseded by an
        # earlier ready time stay in the heap and are skipped when popped.
        self._waiting: list[tuple[float, int, T]] = []
        # item -> its live heap entry.
        self._waiting_entries: dict[T, tuple[float, int, T]] = {}
        self._sequence = itertools.count()
        self._waiting_thread = threading.Thread(
            target=self._waiting_loop,
            name=f"workqueue-waiting-loop[{name or hex(id(self))}]",
            daemon=True,
        )
        self._waiting_thread.start()

    def add_after(self, item: T, delay_seconds: float) -> None:
        """Add ``item`` once ``delay_seconds`` seconds of the queue's clock have passed.

        ``delay_seconds <= 0`` is an immediate ``add``. Otherwise ``item`` waits until
        ``now + delay_seconds``; if it is already waiting, it keeps the earlier of its two
        ready times. Dropped while shutting down.

        Each delayed call (``delay_seconds > 0``, not shutting down) counts one retry in
        the metrics. client-go's ``AddAfter`` also counts immediate ones; cbop counts only
        adds that actually wait, so that retries mean backoffs.

        Raises:
            ValueError: if ``delay_seconds`` is NaN.
        """
        if delay_seconds <= 0:
            self.add(item)
            return
        if math.isnan(delay_seconds):
            raise ValueError("add_after delay must be a number of seconds, got NaN")
        with self._mutex:
            if self._shutting_down:
                return
            if self._metrics is not None:
                self._metrics.retry()
            self._wait_locked(item, self._clock.now() + delay_seconds)

    def waiting_len(self) -> int:
        """Return the number of distinct items waiting for their ready time."""
        with self._mutex:
            return len(self._waiting_entries)

    def _wait_locked(self, item: T, ready_at: float) -> None:
        """Make ``item`` wait until ``ready_at``, or keep its earlier ready time.

        Called with the lock held, not shutting down.
        """
        existing = self._waiting_entries.get(item)
        if existing is not None and existing[0] <= ready_at:
            return
        entry = (ready_at, next(self._sequence), item)
        self._waiting_entries[item] = entry
        heap = self._waiting
        heapq.heappush(heap, entry)
        if existing is not None and len(heap) > 2 * len(self._waiting_entries) + 64:
            self._compact_waiting_locked()
            heap = self._waiting
        if heap[0] is entry:
            self._waiting_changed.notify()

    def _release_locked(self, item: T) -> None:
        """Add ``item``, whose ready time has come. Called with the lock held.

        Subclasses override this to release with more than the item (a priority).
        """
        self._add_locked(item)

    def _shut_down_locked(self) -> None:
        """Also wake the waiting loop so it exits. Called with the lock held."""
        super()._shut_down_locked()
        self._waiting_changed.notify_all()

    def _compact_waiting_locked(self) -> None:
        """Drop superseded entries from the heap. Called with the lock held."""
        self._waiting = list(self._waiting_entries.values())
        heapq.heapify(self._waiting)

    def _waiting_loop(self) -> None:
        """Move items whose ready time has come into the queue, until shutdown (thread)."""
        clock = self._clock
        with self._mutex:
            while not self._shutting_down:
                now = clock.now()
                heap = self._waiting
                entries = self._waiting_entries
                while heap and heap[0][0] <= now:
                    entry = heapq.heappop(heap)
                    item = entry[2]
                    if entries.get(item) is entry:
                        del entries[item]
                        self._release_locked(item)
                clock.wait_until(self._waiting_changed, heap[0][0] if heap else None)
