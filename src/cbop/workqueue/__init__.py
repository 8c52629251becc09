"""cbop's work queue: a Python port of client-go's ``util/workqueue``.

This package owns how reconcile requests wait between the informers' event handlers and
the controller's workers, in layers each built on the one before: deduplication and one
worker per item (:mod:`.queue`), ``add_after`` on a :class:`~cbop.clock.Clock`
(:mod:`.delaying`), ``add_rate_limited``/``forget`` through a rate limiter
(:mod:`.ratelimiting`, :mod:`.ratelimiters`), and priorities with ageing, as
controller-runtime's ``priorityqueue`` (:mod:`.priority`). Callers type against the
``Interface`` protocols (:mod:`.interfaces`). It never imports Prometheus or Kubernetes:
metrics go through the ``MetricsProvider`` seam (:mod:`.metrics`).
"""

from cbop.clock import Clock, RealClock
from cbop.workqueue.delaying import DelayingQueue
from cbop.workqueue.interfaces import (
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    DelayingInterface,
    Interface,
    PriorityInterface,
    RateLimitingInterface,
)
from cbop.workqueue.metrics import (
    CounterMetric,
    GaugeMetric,
    HistogramMetric,
    MetricsProvider,
    NoopMetricsProvider,
    PriorityGaugeMetric,
    PriorityMetricsProvider,
    get_provider,
    set_provider,
)
from cbop.workqueue.priority import DEFAULT_MAX_WAIT, PriorityQueue
from cbop.workqueue.queue import Queue
from cbop.workqueue.ratelimiters import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from cbop.workqueue.ratelimiting import RateLimitingQueue

__all__ = [
    "DEFAULT_MAX_WAIT",
    "LOW_PRIORITY",
    "NORMAL_PRIORITY",
    "BucketRateLimiter",
    "Clock",
    "CounterMetric",
    "DelayingInterface",
    "DelayingQueue",
    "GaugeMetric",
    "HistogramMetric",
    "Interface",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "MetricsProvider",
    "NoopMetricsProvider",
    "PriorityGaugeMetric",
    "PriorityInterface",
    "PriorityMetricsProvider",
    "PriorityQueue",
    "Queue",
    "RateLimiter",
    "RateLimitingInterface",
    "RateLimitingQueue",
    "RealClock",
    "default_controller_rate_limiter",
    "get_provider",
    "set_provider",
]
