"""The priority queue: a rate-limiting queue whose adds carry a priority.

This module owns ``PriorityQueue``, after controller-runtime's ``priorityqueue``: an
informer's initial list and resyncs add keys at ``LOW_PRIORITY``, real changes at
``NORMAL_PRIORITY``, so that after a restart a bundle someone just changed is reconciled
before ten thousand that only need a look. Ready items wait in one FIFO per priority; a
key waits at most once, with the highest priority and the earliest ready time of its
adds.

Why ageing: strict priority starves low keys while normal ones keep coming faster than
the workers finish them (controller-runtime issue #3496). Here, once the head of a lower
FIFO has been ready for ``max_wait`` seconds, every other hand-out goes to the
longest-waiting such head, so a low key waits at most ``max_wait`` plus two hand-outs
per key ahead of it. Everything shares the base queue's single mutex.
"""

from __future__ import annotations

import math
from collections import deque

from cbop.clock import Clock
from cbop.workqueue.interfaces import NORMAL_PRIORITY, T
from cbop.workqueue.metrics import MetricsProvider
from cbop.workqueue.ratelimiters import RateLimiter
from cbop.workqueue.ratelimiting import RateLimitingQueue

__all__ = ["DEFAULT_MAX_WAIT", "PriorityQueue"]

DEFAULT_MAX_WAIT = 10.0
"""Seconds a lower-priority key waits, once ready, before it shares the workers (ageing)."""


class PriorityQueue(RateLimitingQueue[T]):
    """A ``RateLimitingQueue`` whose adds carry a priority (controller-runtime's ``PriorityQueue``).

    Satisfies ``cbop.workqueue.PriorityInterface[T]`` and, with every priority left at
    its default, behaves as a ``RateLimitingQueue``: the same deduplication, one worker
    per item (an item added while processing is queued again by ``done``), ``add_after``,
    ``add_rate_limited``/``forget``/``num_requeues``, both shut-downs and the same metric
    hooks. With a provider that has ``new_depth_with_priority_metric`` (cbop's Prometheus
    provider) the depth gauge is kept by priority.

    Priorities are ints, higher first: ``NORMAL_PRIORITY`` (0, the default of ``add``) and
    ``LOW_PRIORITY`` (-100) are the two cbop uses. ``add_after`` and ``add_rate_limited``
    default to the priority the item was handed out with while a worker holds it (so a
    retry of a low-priority key stays low, as controller-runtime's controller re-adds with
    the priority ``GetWithPriority`` returned), else to ``NORMAL_PRIORITY``.

    One difference from ``DelayingQueue``, as controller-runtime: a key has at most one
    pending add. ``add_after`` of a key that is already queued (or added again while it is
    processing) only raises its priority, since it will be handed out no later than the
    delay asks; a plain ``add`` of a key waiting for its delay makes it ready now.

    Args:
        rate_limiter, name, clock, metrics_provider: as for ``RateLimitingQueue``.
        max_wait: seconds a ready key of a lower priority waits before every other
            hand-out is given to it (see the module docstring); ``None`` disables ageing
            (strict priority, which can starve low keys).

    Raises:
        ValueError: if ``max_wait`` is negative or NaN.
    """

    _metrics_by_priority = True

    def __init__(
        self,
        rate_limiter: RateLimiter[T] | None = None,
        *,
        name: str | None = None,
        clock: Clock | None = None,
        metrics_provider: MetricsProvider | None = None,
        max_wait: float | None = DEFAULT_MAX_WAIT,
    ) -> None:
        if max_wait is not None and not max_wait >= 0:
            raise ValueError(f"max_wait must be a non-negative number of seconds, got {max_wait}")
        self._max_wait = max_wait
        # priority -> its FIFO of ready (item, ready_since) entries, oldest first, and the
        # number of live (not stale) entries in it; only priorities with a live entry are keys.
        self._fifos: dict[int, deque[tuple[T, float]]] = {}
        self._live: dict[int, int] = {}
        # Queued (ready, not processing) item -> its live FIFO entry.
        self._entries: dict[T, tuple[T, float]] = {}
        # Dirty item (queued, or added again while processing) -> its priority. Plays the
        # part of the base queue's ``_dirty`` set, which this class leaves empty.
        self._priorities: dict[T, int] = {}
        # Processing item -> the priority it was handed out with.
        self._handed_out: dict[T, int] = {}
        # Item waiting for its delay -> the highest priority of its delayed adds.
        self._waiting_priorities: dict[T, int] = {}
        self._ready = 0
        # Whether the last hand-out went to an aged lower-priority item.
        self._aged_last = False
        super().__init__(rate_limiter, name=name, clock=clock, metrics_provider=metrics_provider)

    def add(self, item: T, priority: int = NORMAL_PRIORITY) -> None:
        """Mark ``item`` as needing processing at ``priority``.

        A dirty item keeps the higher of its priority and ``priority``; an item waiting
        for a delay becomes ready now, at the higher of its delayed adds' priorities and
        ``priority``. Dropped while shutting down. Otherwise as ``Queue.add``.
        """
        with self._mutex:
            self._add_locked(item, priority)

    def add_after(self, item: T, delay_seconds: float, priority: int | None = None) -> None:
        """Add ``item`` once ``delay_seconds`` seconds of the queue's clock have passed.

        ``delay_seconds <= 0`` is an immediate ``add``. ``priority=None`` means the priority
        ``item`` was handed out with if a worker holds it, else ``NORMAL_PRIORITY``. A
        waiting item keeps the earliest ready time and the highest priority of its delayed
        adds; a dirty item only has its priority raised. Each delayed call counts one
        retry in the metrics, as ``DelayingQueue.add_after``. Dropped while shutting down.

        Raises:
            ValueError: if ``delay_seconds`` is NaN.
        """
        if math.isnan(delay_seconds):
            raise ValueError("add_after delay must be a number of seconds, got NaN")
        with self._mutex:
            if priority is None:
                priority = self._handed_out.get(item, NORMAL_PRIORITY)
            if delay_seconds <= 0:
                self._add_locked(item, priority)
                return
            if self._shutting_down:
                return
            if self._metrics is not None:
                self._metrics.retry()
            current = self._priorities.get(item)
            if current is not None:
                if priority > current:
                    self._raise_locked(item, current, priority)
                return
            waiting = self._waiting_priorities.get(item)
            if waiting is None or priority > waiting:
                self._waiting_priorities[item] = priority
            self._wait_locked(item, self._clock.now() + delay_seconds)

    def add_rate_limited(self, item: T, priority: int | None = None) -> None:
        """Add ``item`` after ``rate_limiter.when(item)`` seconds; ``priority`` as ``add_after``."""
        self.add_after(item, self._rate_limiter.when(item), priority)

    def get(self) -> tuple[T | None, bool]:
        """As ``Queue.get``: the next item in priority order (see the class docstring)."""
        item, _, shutdown = self.get_with_priority()
        return item, shutdown

    def get_with_priority(self) -> tuple[T | None, int, bool]:
        """Block until an item is ready; hand it out with the priority it had.

        Returns ``(item, priority, False)``, the caller then calls ``done(item)``; or
        ``(None, NORMAL_PRIORITY, True)`` once shutting down with nothing ready. As
        controller-runtime's ``GetWithPriority``.
        """
        with self._mutex:
            while not self._ready and not self._shutting_down:
                self._getters += 1
                try:
                    self._not_empty.wait()
                finally:
                    self._getters -= 1
            if not self._ready:
                return None, NORMAL_PRIORITY, True
            fifos = self._fifos
            if len(fifos) == 1:
                priority = next(iter(fifos))
                self._aged_last = False
            else:
                priority = self._choose_locked()
            entries = self._entries
            queued = fifos[priority]
            entry = queued.popleft()
            item = entry[0]
            while entries.get(item) is not entry:  # skip stale entries of promoted items
                entry = queued.popleft()
                item = entry[0]
            del entries[item]
            self._ready -= 1
            live = self._live[priority] - 1
            if live:
                self._live[priority] = live
            else:
                del fifos[priority]
                del self._live[priority]
            del self._priorities[item]
            if self._metrics is not None:
                self._metrics.get(item, priority)
            self._processing.add(item)
            self._handed_out[item] = priority
            return item, priority, False

    def done(self, item: T) -> None:
        """As ``Queue.done``; an item added while processing is queued at its priority."""
        with self._mutex:
            if self._metrics is not None:
                self._metrics.done(item)
            processing = self._processing
            if item in processing:
                processing.discard(item)
                del self._handed_out[item]
                priority = self._priorities.get(item)
                if priority is not None:
                    self._push_locked(item, priority, self._clock.now())
            if not processing and self._drain:
                self._drained.notify_all()

    def __len__(self) -> int:
        """Return the number of items ready to be handed out (not processing, not waiting)."""
        with self._mutex:
            return self._ready

    def ready_by_priority(self) -> dict[int, int]:
        """Return how many items are ready at each priority (priorities with none omitted)."""
        with self._mutex:
            return dict(self._live)

    def _add_locked(self, item: T, priority: int = NORMAL_PRIORITY) -> None:
        """Apply ``add`` semantics to ``item`` at ``priority``. Called with the lock held."""
        if self._shutting_down:
            return
        current = self._priorities.get(item)
        if current is not None:
            if priority > current:
                self._raise_locked(item, current, priority)
            return
        if self._waiting_entries and self._waiting_entries.pop(item, None) is not None:
            # Ready now: its stale heap entry is skipped when popped.
            priority = max(priority, self._waiting_priorities.pop(item))
        if self._metrics is not None:
            self._metrics.add(item, priority)
        self._priorities[item] = priority
        if item not in self._processing:
            self._push_locked(item, priority, self._clock.now())

    def _release_locked(self, item: T) -> None:
        """Add a waiting item whose time has come, at its priority. Called with the lock held."""
        self._add_locked(item, self._waiting_priorities.pop(item, NORMAL_PRIORITY))

    def _push_locked(self, item: T, priority: int, ready_since: float) -> None:
        """Append ``item`` to the FIFO of ``priority``. Called with the lock held."""
        entry = (item, ready_since)
        self._entries[item] = entry
        fifo = self._fifos.get(priority)
        if fifo is None:
            self._fifos[priority] = deque((entry,))
            self._live[priority] = 1
        else:
            fifo.append(entry)
            self._live[priority] += 1
        self._ready += 1
        if self._getters:
            self._not_empty.notify()

    def _raise_locked(self, item: T, old: int, new: int) -> None:
        """Raise dirty ``item`` from priority ``old`` to ``new``. Called with the lock held."""
        self._priorities[item] = new
        if self._metrics is not None:
            self._metrics.reprioritize(old, new)
        entry = self._entries.get(item)
        if entry is None:
            return  # processing: done() queues it at the new priority
        self._ready -= 1
        self._live[old] -= 1
        if not self._live[old]:
            del self._fifos[old]
            del self._live[old]
        self._push_locked(item, new, entry[1])

    def _choose_locked(self) -> int:
        """Return the priority whose FIFO serves the next hand-out. Lock held, 2+ FIFOs.

        The top priority, except that every other hand-out goes to the lower FIFO whose
        head has been ready longest, once that is ``max_wait`` seconds or more.
        """
        fifos = self._fifos
        top = max(fifos)
        if self._max_wait is None or self._aged_last:
            self._aged_last = False
            return top
        oldest, oldest_since = top, math.inf
        for priority, fifo in fifos.items():
            if priority != top:
                since = self._head_locked(fifo)[1]
                if since < oldest_since:
                    oldest, oldest_since = priority, since
        self._aged_last = self._clock.now() - oldest_since >= self._max_wait
        return oldest if self._aged_last else top

    def _head_locked(self, queued: deque[tuple[T, float]]) -> tuple[T, float]:
        """Drop the FIFO's stale head entries and return its live head. Lock held."""
        entries = self._entries
        while entries.get(queued[0][0]) is not queued[0]:
            queued.popleft()
        return queued[0]
