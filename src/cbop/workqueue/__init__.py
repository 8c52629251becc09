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

Callers type against the ``Interface``/``DelayingInterface``/``RateLimitingInterface``
protocols. Metrics go through the ``MetricsProvider`` seam (``metrics`` module); this
package never imports Prometheus or Kubernetes. ``Clock``, ``RealClock`` and
``FakeClock`` are re-exported from ``cbop.clock`` for convenience.

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

from cbop.clock import Clock, FakeClock, RealClock
from cbop.workqueue.delaying import DelayingQueue
from cbop.workqueue.interfaces import DelayingInterface, Interface, RateLimitingInterface
from cbop.workqueue.metrics import (
    CounterMetric,
    GaugeMetric,
    HistogramMetric,
    MetricsProvider,
    NoopMetricsProvider,
    get_provider,
    set_provider,
)
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
    "BucketRateLimiter",
    "Clock",
    "CounterMetric",
    "DelayingInterface",
    "DelayingQueue",
    "FakeClock",
    "GaugeMetric",
    "HistogramMetric",
    "Interface",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "MetricsProvider",
    "NoopMetricsProvider",
    "Queue",
    "RateLimiter",
    "RateLimitingInterface",
    "RateLimitingQueue",
    "RealClock",
    "default_controller_rate_limiter",
    "get_provider",
    "set_provider",
]
