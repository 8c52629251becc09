"""The basic work queue: deduplication and one-worker-per-item, as client-go's ``Type``.

This module owns the core state machine shared by every cbop queue: a FIFO of items, the
``dirty`` set (items that need processing) and the ``processing`` set (items a worker
holds). An item is pushed to the FIFO only if it is dirty and not processing; ``done``
pushes it again if it became dirty while processing. It also owns shutdown (with and
without drain) and the periodic refresh of the unfinished-work metrics.

Locking follows CPython's ``queue.Queue``: one mutex, several Conditions sharing it.
Subclasses (``cbop.workqueue.delaying``) add their own Conditions on the same mutex and
extend the private hooks, which are all "called with the lock held".
"""

from __future__ import annotations

import threading
from collections import deque
from typing import ClassVar, Generic

from cbop.clock import Clock, RealClock
from cbop.locks import YieldingLock, condition
from cbop.workqueue.interfaces import T
from cbop.workqueue.metrics import (
    UNFINISHED_WORK_UPDATE_PERIOD,
    MetricsProvider,
    QueueMetrics,
    new_queue_metrics,
)

__all__ = ["Queue"]


class Queue(Generic[T]):
    """A thread-safe deduplicating work queue (client-go's ``workqueue.Type``).

    Satisfies ``cbop.workqueue.Interface[T]``. Items must be hashable.

    Args:
        name: the queue's name, used as the metrics' ``name`` and ``controller`` labels;
            ``None`` (the default) means no metrics at all.
        clock: source of time for metrics and delays (``None``: ``RealClock()``).
        metrics_provider: creates the metric hooks; ``None`` means the default set with
            ``cbop.workqueue.set_provider`` at construction time.

    A named queue with a real provider runs a daemon thread refreshing the
    unfinished-work gauges every 0.5 s of ``clock`` time until shutdown; call
    ``shut_down`` (or ``shut_down_with_drain``) when finished with any queue.
    """

    # Whether this kind of queue keeps its depth metric by priority (the priority queue).
    _metrics_by_priority: ClassVar[bool] = False

    def __init__(
        self,
        *,
        name: str | None = None,
        clock: Clock | None = None,
        metrics_provider: MetricsProvider | None = None,
    ) -> None:
        self._name = name
        self._clock: Clock = clock if clock is not None else RealClock()
        # Taken by every worker for every item: a lock that does not convoy (cbop.locks).
        self._mutex = YieldingLock()
        # get() waits while the FIFO is empty and the queue runs; add(), done() (when it
        # re-queues) and the shut-down methods notify.
        self._not_empty = condition(self._mutex)
        # shut_down_with_drain() waits until nothing is processing; done() notifies when
        # processing becomes empty, shut_down() notifies to cancel the drain.
        self._drained = condition(self._mutex)
        # The metrics updater thread waits here (with a clock deadline) between refreshes;
        # the shut-down methods notify.
        self._updater_wake = condition(self._mutex)
        self._queue: deque[T] = deque()
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        self._shutting_down = False
        self._drain = False
        # Number of threads blocked in get(); add() and done() skip notify() when zero.
        self._getters = 0
        self._metrics: QueueMetrics[T] | None = new_queue_metrics(
            name, metrics_provider, self._clock, by_priority=self._metrics_by_priority
        )
        if self._metrics is not None:
            start = self._clock.now()
            threading.Thread(
                target=self._update_unfinished_work_loop,
                args=(self._metrics, start),
                name=f"workqueue-metrics[{name}]",
                daemon=True,
            ).start()

    @property
    def name(self) -> str | None:
        """The queue's name (``None`` for an unnamed, unmeasured queue)."""
        return self._name

    def add(self, item: T) -> None:
        """Mark ``item`` as needing processing.

        Does nothing while shutting down or if ``item`` is already dirty (waiting to be
        handed out, or added again since a worker took it). Otherwise ``item`` becomes
        dirty and joins the FIFO, unless a worker is processing it: then ``done`` will
        queue it. Never blocks for long.
        """
        with self._mutex:
            self._add_locked(item)

    def get(self) -> tuple[T | None, bool]:
        """Block until an item is available and hand it to the caller.

        Returns ``(item, False)``: ``item`` moves from dirty to processing, and the
        caller must call ``done(item)`` when finished with it. Returns ``(None, True)``
        only when the queue is shutting down *and* its FIFO is empty, so items queued
        before shutdown are still handed out.
        """
        with self._mutex:
            while not self._queue and not self._shutting_down:
                self._getters += 1
                try:
                    self._not_empty.wait()
                finally:
                    self._getters -= 1
            if not self._queue:
                return None, True
            item = self._queue.popleft()
            if self._metrics is not None:
                self._metrics.get(item)
            self._processing.add(item)
            self._dirty.discard(item)
            return item, False

    def done(self, item: T) -> None:
        """Mark ``item`` as no longer being processed.

        If ``item`` was added while it was processing, it is pushed to the FIFO again
        now. Calling ``done`` for an item that is not processing is harmless.
        """
        with self._mutex:
            if self._metrics is not None:
                self._metrics.done(item)
            processing = self._processing
            processing.discard(item)
            if item in self._dirty:
                self._queue.append(item)
                if self._getters:
                    self._not_empty.notify()
            if not processing and self._drain:
                self._drained.notify_all()

    def __len__(self) -> int:
        """Return the number of items in the FIFO (not counting those processing)."""
        with self._mutex:
            return len(self._queue)

    def shut_down(self) -> None:
        """Stop accepting adds and wake every blocked ``get``; return at once.

        Items already in the FIFO are still handed out by ``get``. Also cancels a
        ``shut_down_with_drain`` in progress (as client-go's ``ShutDown``) and stops the
        queue's background threads. Idempotent.
        """
        with self._mutex:
            self._drain = False
            self._shut_down_locked()

    def shut_down_with_drain(self) -> None:
        """Stop accepting adds, wake every ``get``, then wait until nothing is processing.

        Returns once every item handed out by ``get`` has been passed to ``done`` (or
        when ``shut_down`` is called meanwhile). Workers must keep calling ``done``;
        calling this from a worker that holds an item deadlocks. As client-go's
        ``ShutDownWithDrain``.
        """
        with self._mutex:
            self._drain = True
            self._shut_down_locked()
            while self._processing and self._drain:
                self._drained.wait()

    def shutting_down(self) -> bool:
        """Return whether either shut-down method has been called."""
        with self._mutex:
            return self._shutting_down

    def update_unfinished_work(self) -> None:
        """Refresh the unfinished-work and longest-running gauges now.

        The background updater does this every 0.5 s of clock time; tests call it to
        read the gauges at a precise fake time. No-op for an unmeasured queue.
        """
        with self._mutex:
            if self._metrics is not None:
                self._metrics.update_unfinished_work()

    def _add_locked(self, item: T) -> None:
        """Apply ``add`` semantics to ``item``. Called with the lock held."""
        if self._shutting_down or item in self._dirty:
            return
        if self._metrics is not None:
            self._metrics.add(item)
        self._dirty.add(item)
        if item in self._processing:
            return
        self._queue.append(item)
        if self._getters:
            self._not_empty.notify()

    def _shut_down_locked(self) -> None:
        """Enter the shutting-down state and wake every waiter. Called with the lock held.

        Subclasses extend this to stop their own background threads.
        """
        self._shutting_down = True
        self._not_empty.notify_all()
        self._drained.notify_all()
        self._updater_wake.notify_all()

    def _update_unfinished_work_loop(self, metrics: QueueMetrics[T], start: float) -> None:
        """Refresh the unfinished-work gauges each period until shutdown (daemon thread).

        Ticks at ``start + k * period`` on the queue's clock; ticks missed because the
        clock jumped are coalesced into one refresh, like a Go ticker dropping ticks.
        """
        period = UNFINISHED_WORK_UPDATE_PERIOD
        next_tick = start + period
        with self._mutex:
            while not self._shutting_down:
                now = self._clock.now()
                if now >= next_tick:
                    metrics.update_unfinished_work()
                    next_tick += period * (int((now - next_tick) // period) + 1)
                else:
                    self._clock.wait_until(self._updater_wake, next_tick)
