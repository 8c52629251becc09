"""The workqueue's metrics seam: hook protocols, providers, and per-queue bookkeeping.

This module owns *what* a queue measures and *when* (client-go's
``defaultQueueMetrics``, under controller-runtime's names: depth, adds, latency, work
duration, unfinished work, longest running processor, retries), not how it is exported:
it never imports Prometheus. A ``MetricsProvider`` (client-go's
``workqueue.MetricsProvider``) makes the hooks of each named queue; the Prometheus one is
``cbop.metrics.workqueue``. Queues made without one use the process-wide default
(``set_provider``, client-go's ``SetProvider``), the no-op provider at first.
"""

from __future__ import annotations

import threading
from typing import Generic, Protocol, final

from cbop.clock import Clock
from cbop.workqueue.interfaces import NORMAL_PRIORITY, T

__all__ = [
    "UNFINISHED_WORK_UPDATE_PERIOD",
    "CounterMetric",
    "GaugeMetric",
    "HistogramMetric",
    "MetricsProvider",
    "NoopMetricsProvider",
    "PriorityGaugeMetric",
    "PriorityMetricsProvider",
    "QueueMetrics",
    "get_provider",
    "new_queue_metrics",
    "set_provider",
]

UNFINISHED_WORK_UPDATE_PERIOD = 0.5
"""Seconds between refreshes of the unfinished-work gauges (client-go: 500 ms)."""


class GaugeMetric(Protocol):
    """A gauge hook (client-go's ``GaugeMetric`` plus ``SettableGaugeMetric``)."""

    def inc(self) -> None:
        """Add 1 to the gauge."""
        ...

    def dec(self) -> None:
        """Subtract 1 from the gauge."""
        ...

    def set(self, value: float, /) -> None:
        """Set the gauge to ``value``."""
        ...


class CounterMetric(Protocol):
    """A monotonically increasing counter hook (client-go's ``CounterMetric``)."""

    def inc(self) -> None:
        """Add 1 to the counter."""
        ...


class HistogramMetric(Protocol):
    """A distribution hook (client-go's ``HistogramMetric``); values are seconds here."""

    def observe(self, value: float, /) -> None:
        """Record one observation of ``value``."""
        ...


class PriorityGaugeMetric(Protocol):
    """A gauge kept per priority (controller-runtime's ``DepthMetricWithPriority``)."""

    def inc(self, priority: int, /) -> None:
        """Add 1 to the gauge of ``priority``."""
        ...

    def dec(self, priority: int, /) -> None:
        """Subtract 1 from the gauge of ``priority``."""
        ...


class MetricsProvider(Protocol):
    """Creates the metric hooks of one named queue (client-go's ``MetricsProvider``).

    Each method is called once per queue, at construction, with the queue's name, and
    returns an object that the queue calls with its own lock held (so hooks must be
    quick and must not call back into the queue). A provider may be shared by many
    queues.
    """

    def new_depth_metric(self, name: str) -> GaugeMetric:
        """Return the gauge of items waiting in queue ``name``."""
        ...

    def new_adds_metric(self, name: str) -> CounterMetric:
        """Return the counter of adds to queue ``name``."""
        ...

    def new_latency_metric(self, name: str) -> HistogramMetric:
        """Return the histogram of seconds items wait in queue ``name`` before ``get``."""
        ...

    def new_work_duration_metric(self, name: str) -> HistogramMetric:
        """Return the histogram of seconds from ``get`` to ``done`` in queue ``name``."""
        ...

    def new_unfinished_work_seconds_metric(self, name: str) -> GaugeMetric:
        """Return the gauge of seconds of in-progress work in queue ``name``."""
        ...

    def new_longest_running_processor_seconds_metric(self, name: str) -> GaugeMetric:
        """Return the gauge of the age in seconds of the oldest in-progress item."""
        ...

    def new_retries_metric(self, name: str) -> CounterMetric:
        """Return the counter of delayed (retried) adds to queue ``name``."""
        ...


class PriorityMetricsProvider(MetricsProvider, Protocol):
    """A provider that can also keep a priority queue's depth by priority.

    As controller-runtime's ``MetricsProviderWithPriority``. A priority queue uses
    ``new_depth_with_priority_metric`` *instead of* ``new_depth_metric`` when its provider
    has it; plain queues never call it.
    """

    def new_depth_with_priority_metric(self, name: str) -> PriorityGaugeMetric:
        """Return the gauge of items waiting in priority queue ``name``, by priority."""
        ...


@final
class _NoopMetric:
    """A hook that is a gauge, a counter and a histogram, and ignores everything."""

    __slots__ = ()

    def inc(self) -> None:
        """Do nothing."""

    def dec(self) -> None:
        """Do nothing."""

    def set(self, value: float, /) -> None:
        """Do nothing."""

    def observe(self, value: float, /) -> None:
        """Do nothing."""


_NOOP = _NoopMetric()


@final
class NoopMetricsProvider:
    """A provider whose hooks discard everything (client-go's ``noopMetricsProvider``).

    A queue given this provider skips metric bookkeeping entirely, as if unnamed.
    """

    def new_depth_metric(self, name: str) -> GaugeMetric:
        """Return a no-op gauge."""
        return _NOOP

    def new_adds_metric(self, name: str) -> CounterMetric:
        """Return a no-op counter."""
        return _NOOP

    def new_latency_metric(self, name: str) -> HistogramMetric:
        """Return a no-op histogram."""
        return _NOOP

    def new_work_duration_metric(self, name: str) -> HistogramMetric:
        """Return a no-op histogram."""
        return _NOOP

    def new_unfinished_work_seconds_metric(self, name: str) -> GaugeMetric:
        """Return a no-op gauge."""
        return _NOOP

    def new_longest_running_processor_seconds_metric(self, name: str) -> GaugeMetric:
        """Return a no-op gauge."""
        return _NOOP

    def new_retries_metric(self, name: str) -> CounterMetric:
        """Return a no-op counter."""
        return _NOOP


_provider_lock = threading.Lock()
_provider: MetricsProvider = NoopMetricsProvider()


def set_provider(provider: MetricsProvider | None) -> MetricsProvider:
    """Set the default provider for queues created later; return the previous one.

    ``None`` restores the no-op provider. Queues already constructed keep the provider
    they were built with. Unlike client-go's ``SetProvider``, which only honours its
    first call, the last call wins, so tests can install a provider and restore the
    previous one.
    """
    global _provider  # noqa: PLW0603 - the process-wide default is the point of this API
    with _provider_lock:
        previous = _provider
        _provider = provider if provider is not None else NoopMetricsProvider()
        return previous


def get_provider() -> MetricsProvider:
    """Return the current default provider (initially a ``NoopMetricsProvider``)."""
    with _provider_lock:
        return _provider


class QueueMetrics(Generic[T]):
    """The metric bookkeeping of one named queue (client-go's ``defaultQueueMetrics``).

    Holds the seven hooks, the time of each dirty item's first add and the time each
    processing item was handed out. Times come from ``clock`` (seconds). Every method
    is called by the queue with the queue's lock held, which is what makes this class
    thread-safe; it has no lock of its own.

    With ``by_priority`` (a priority queue) and a provider that has
    ``new_depth_with_priority_metric``, depth is kept by priority; otherwise the
    ``priority`` arguments are ignored.
    """

    __slots__ = (
        "_add_times",
        "_adds",
        "_clock",
        "_depth",
        "_depth_by_priority",
        "_latency",
        "_longest_running",
        "_processing_starts",
        "_retries",
        "_unfinished_work",
        "_work_duration",
        "name",
    )

    def __init__(
        self, name: str, provider: MetricsProvider, clock: Clock, *, by_priority: bool = False
    ) -> None:
        self.name = name
        self._clock = clock
        factory = getattr(provider, "new_depth_with_priority_metric", None) if by_priority else None
        self._depth_by_priority: PriorityGaugeMetric | None = (
            factory(name) if factory is not None else None
        )
        self._depth: GaugeMetric = (
            provider.new_depth_metric(name) if self._depth_by_priority is None else _NOOP
        )
        self._adds = provider.new_adds_metric(name)
        self._latency = provider.new_latency_metric(name)
        self._work_duration = provider.new_work_duration_metric(name)
        self._unfinished_work = provider.new_unfinished_work_seconds_metric(name)
        self._longest_running = provider.new_longest_running_processor_seconds_metric(name)
        self._retries = provider.new_retries_metric(name)
        self._add_times: dict[T, float] = {}
        self._processing_starts: dict[T, float] = {}

    def add(self, item: T, priority: int = NORMAL_PRIORITY) -> None:
        """Count an add that created a new dirty entry. Called with the queue lock held."""
        self._adds.inc()
        by_priority = self._depth_by_priority
        if by_priority is None:
            self._depth.inc()
        else:
            by_priority.inc(priority)
        if item not in self._add_times:
            self._add_times[item] = self._clock.now()

    def reprioritize(self, old: int, new: int) -> None:
        """Move a dirty item's depth from priority ``old`` to ``new``. Lock held."""
        by_priority = self._depth_by_priority
        if by_priority is not None:
            by_priority.dec(old)
            by_priority.inc(new)

    def get(self, item: T, priority: int = NORMAL_PRIORITY) -> None:
        """Record ``item`` being handed to a worker. Called with the queue lock held."""
        by_priority = self._depth_by_priority
        if by_priority is None:
            self._depth.dec()
        else:
            by_priority.dec(priority)
        now = self._clock.now()
        added = self._add_times.pop(item, None)
        if added is not None:
            self._latency.observe(now - added)
        self._processing_starts[item] = now

    def done(self, item: T) -> None:
        """Record the end of ``item``'s processing. Called with the queue lock held."""
        started = self._processing_starts.pop(item, None)
        if started is not None:
            self._work_duration.observe(self._clock.now() - started)

    def retry(self) -> None:
        """Count a delayed add. Called with the queue lock held."""
        self._retries.inc()

    def update_unfinished_work(self) -> None:
        """Set both unfinished-work gauges from the items in processing now.

        Called with the queue lock held.
        """
        now = self._clock.now()
        total = 0.0
        longest = 0.0
        for started in self._processing_starts.values():
            age = now - started
            total += age
            longest = max(longest, age)
        self._unfinished_work.set(total)
        self._longest_running.set(longest)


def new_queue_metrics(
    name: str | None,
    provider: MetricsProvider | None,
    clock: Clock,
    *,
    by_priority: bool = False,
) -> QueueMetrics[T] | None:
    """Return the bookkeeping for a queue called ``name``, or ``None`` for no metrics.

    ``None`` when ``name`` is ``None`` (unnamed queues are never measured, as in
    client-go) or when the effective provider (``provider``, else the default from
    ``set_provider``) is a ``NoopMetricsProvider`` (nothing would be recorded, so the
    queue takes its fast path).
    """
    if name is None:
        return None
    effective = provider if provider is not None else get_provider()
    if isinstance(effective, NoopMetricsProvider):
        return None
    return QueueMetrics(name, effective, clock, by_priority=by_priority)
