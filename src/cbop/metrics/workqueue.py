"""Prometheus export of workqueue metrics, with controller-runtime's names and labels.

This module owns the ``workqueue_*`` metric families and the
``PrometheusWorkqueueMetricsProvider`` that hands their per-queue children to
``cbop.workqueue`` queues (through the ``cbop.workqueue.MetricsProvider`` seam). Families,
all labelled ``name`` and ``controller`` (both the queue's name); ``workqueue_depth`` is
also labelled ``priority``, as controller-runtime: the priority as a decimal number
(``"0"`` normal, ``"-100"`` low) for a priority queue, ``""`` for a plain queue.

==============================================  =========  ==============================
``workqueue_depth``                             gauge      items waiting
``workqueue_adds_total``                        counter    adds of new dirty items
``workqueue_queue_duration_seconds``            histogram  first add -> ``get``
``workqueue_work_duration_seconds``             histogram  ``get`` -> ``done``
``workqueue_unfinished_work_seconds``           gauge      sum of in-progress ages
``workqueue_longest_running_processor_seconds`` gauge      oldest in-progress age
``workqueue_retries_total``                     counter    delayed adds
==============================================  =========  ==============================

Histogram buckets are 1e-8 s to 1e3 s by factors of 10, as controller-runtime's
``ExponentialBuckets(10e-9, 10, 12)``.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from cbop.workqueue import (
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    CounterMetric,
    GaugeMetric,
    HistogramMetric,
    PriorityGaugeMetric,
)

__all__ = ["LATENCY_BUCKETS", "PrometheusWorkqueueMetricsProvider"]

LATENCY_BUCKETS: tuple[float, ...] = (
    1e-8,
    1e-7,
    1e-6,
    1e-5,
    1e-4,
    1e-3,
    1e-2,
    1e-1,
    1.0,
    10.0,
    100.0,
    1000.0,
)
"""Upper bounds in seconds of the two duration histograms' buckets (+Inf is implicit)."""

_LABELS = ("name", "controller")


@dataclass(frozen=True)
class _Families:
    """The seven workqueue metric families registered in one registry."""

    depth: Gauge
    adds: Counter
    latency: Histogram
    work_duration: Histogram
    unfinished_work: Gauge
    longest_running: Gauge
    retries: Counter

    @classmethod
    def register(cls, registry: CollectorRegistry) -> _Families:
        """Create the families in ``registry``.

        Raises:
            ValueError: if ``registry`` already holds a metric with one of these names
                that was not registered through this module.
        """
        return cls(
            depth=Gauge(
                "workqueue_depth",
                "Number of items waiting in the workqueue, by priority.",
                (*_LABELS, "priority"),
                registry=registry,
            ),
            adds=Counter(
                "workqueue_adds_total",
                "Number of adds to the workqueue that queued a new item.",
                _LABELS,
                registry=registry,
            ),
            latency=Histogram(
                "workqueue_queue_duration_seconds",
                "Seconds an item waits in the workqueue between its first add and being "
                "handed to a worker.",
                _LABELS,
                registry=registry,
                buckets=LATENCY_BUCKETS,
            ),
            work_duration=Histogram(
                "workqueue_work_duration_seconds",
                "Seconds a worker spends on an item, from get to done.",
                _LABELS,
                registry=registry,
                buckets=LATENCY_BUCKETS,
            ),
            unfinished_work=Gauge(
                "workqueue_unfinished_work_seconds",
                "Total seconds spent so far on items still being processed; steady growth "
                "suggests stuck workers.",
                _LABELS,
                registry=registry,
            ),
            longest_running=Gauge(
                "workqueue_longest_running_processor_seconds",
                "Seconds the oldest item still being processed has been running.",
                _LABELS,
                registry=registry,
            ),
            retries=Counter(
                "workqueue_retries_total",
                "Number of delayed (retried) adds to the workqueue.",
                _LABELS,
                registry=registry,
            ),
        )


_families_lock = threading.Lock()
_families_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, _Families] = (
    weakref.WeakKeyDictionary()
)


def _families_for(registry: CollectorRegistry) -> _Families:
    """Return the families of ``registry``, registering them on first use."""
    with _families_lock:
        families = _families_by_registry.get(registry)
        if families is None:
            families = _Families.register(registry)
            _families_by_registry[registry] = families
        return families


class _DepthByPriority:
    """The ``workqueue_depth`` children of one priority queue, one per priority seen."""

    __slots__ = ("_children", "_family", "_name")

    def __init__(self, family: Gauge, name: str) -> None:
        self._family = family
        self._name = name
        self._children: dict[int, Gauge] = {}
        for priority in (NORMAL_PRIORITY, LOW_PRIORITY):  # exported at 0 from the start
            self._child(priority)

    def _child(self, priority: int) -> Gauge:
        child = self._children.get(priority)
        if child is None:
            child = self._family.labels(name=self._name, controller=self._name, priority=priority)
            self._children[priority] = child
        return child

    def inc(self, priority: int, /) -> None:
        """Add 1 to the depth of ``priority``."""
        self._child(priority).inc()

    def dec(self, priority: int, /) -> None:
        """Subtract 1 from the depth of ``priority``."""
        self._child(priority).dec()


class PrometheusWorkqueueMetricsProvider:
    """A ``cbop.workqueue.MetricsProvider`` backed by ``prometheus_client``.

    As controller-runtime's ``WorkqueueMetricsProvider`` (a ``PriorityMetricsProvider``
    too). The metric families are
    registered in ``registry`` (``None``: the global ``prometheus_client.REGISTRY``) once
    per registry: every provider and queue using the same registry shares them, and
    each queue gets the children labelled ``name=controller=<queue name>``. Two queues
    with the same name therefore share time series.

    Raises:
        ValueError: if ``registry`` already holds ``workqueue_*`` metrics registered by
            something else (prometheus_client's duplicate-timeseries error).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._registry = registry if registry is not None else REGISTRY
        self._families = _families_for(self._registry)

    @property
    def registry(self) -> CollectorRegistry:
        """The registry holding the metric families."""
        return self._registry

    def new_depth_metric(self, name: str) -> GaugeMetric:
        """Return the ``workqueue_depth`` gauge of plain queue ``name`` (``priority=""``)."""
        return self._families.depth.labels(name=name, controller=name, priority="")

    def new_depth_with_priority_metric(self, name: str) -> PriorityGaugeMetric:
        """Return the ``workqueue_depth`` gauges of priority queue ``name``, by priority."""
        return _DepthByPriority(self._families.depth, name)

    def new_adds_metric(self, name: str) -> CounterMetric:
        """Return the ``workqueue_adds_total`` counter of queue ``name``."""
        return self._families.adds.labels(name=name, controller=name)

    def new_latency_metric(self, name: str) -> HistogramMetric:
        """Return the ``workqueue_queue_duration_seconds`` histogram of queue ``name``."""
        return self._families.latency.labels(name=name, controller=name)

    def new_work_duration_metric(self, name: str) -> HistogramMetric:
        """Return the ``workqueue_work_duration_seconds`` histogram of queue ``name``."""
        return self._families.work_duration.labels(name=name, controller=name)

    def new_unfinished_work_seconds_metric(self, name: str) -> GaugeMetric:
        """Return the ``workqueue_unfinished_work_seconds`` gauge of queue ``name``."""
        return self._families.unfinished_work.labels(name=name, controller=name)

    def new_longest_running_processor_seconds_metric(self, name: str) -> GaugeMetric:
        """Return the ``workqueue_longest_running_processor_seconds`` gauge of ``name``."""
        return self._families.longest_running.labels(name=name, controller=name)

    def new_retries_metric(self, name: str) -> CounterMetric:
        """Return the ``workqueue_retries_total`` counter of queue ``name``."""
        return self._families.retries.labels(name=name, controller=name)
