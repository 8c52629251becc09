"""cbop's work queue: a Python port of client-go's ``util/workqueue``.

This package owns how reconcile requests are queued between the informers' event handlers
and the controller's workers. Layers, one concept per module, each built on the one
before:

- ``queue.Queue``: deduplication (an item waits at most once), one worker per item
  (an item added while processing is re-queued on ``done``), and shutdown.
- ``delaying.DelayingQueue``: ``add_after(item, seconds)``, driven by a ``Clock``.
- ``ratelimiting.RateLimitingQueue``: ``add_rate_limited``/``forget``/``num_requeues``
  through a ``ratelimiters.RateLimiter`` (default: per-item exponential backoff and an
  overall token bucket, as controller-runtime).
- ``priority.PriorityQueue``: a ``RateLimitingQueue`` whose adds carry a priority
  (``NORMAL_PRIORITY`` for real changes, ``LOW_PRIORITY`` for an initial list or a
  resync), FIFO within a priority, with ageing so low keys are never starved; as
  controller-runtime's ``priorityqueue``.

Callers type against the ``Interface``/``DelayingInterface``/``RateLimitingInterface``/
``PriorityInterface`` protocols. Metrics go through the ``MetricsProvider`` seam
(``metrics`` module); this package never imports Prometheus or Kubernetes. ``Clock`` and
``RealClock`` are re-exported from ``cbop.clock`` for convenience (tests drive the queues
with ``cbop_testing.clock.FakeClock``).

Typical worker loop::

    while True:
        key, shutdown = queue.get()
        if shutdown:
            return
        try:
            reconcile(key)
        except Exception:
            queue.add_rate_limited(key)
        else:
            queue.forget(key)
        finally:
            queue.done(key)
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
