"""Lease-based leader election, after client-go's ``tools/leaderelection``.

Modules:

- ``cbop.leaderelection.elector``: :class:`LeaderElector`, one candidate in an election
  on a ``coordination.k8s.io/v1`` Lease (timings, fencing, and where it departs from
  client-go are described there).
- ``cbop.leaderelection.observer``: :class:`LeaseObserver`, the local-clock judgement of
  a Lease's expiry that the elector and shard membership share (client-go's rule).
- ``cbop.leaderelection.metrics``: :class:`LeaderMetrics`, the seam its metrics go
  through; the Prometheus implementation lives in ``cbop.metrics``.

The package may import only ``cbop.kube``, ``cbop.clock``, ``cbop.api`` and
``cbop.defaults``; never Prometheus or ``cbop.metrics`` (an import-linter contract).
"""

from cbop.leaderelection.elector import (
    ACQUIRE_JITTER_FACTOR,
    JITTER_FACTOR,
    RELEASED_LEASE_DURATION_SECONDS,
    LeaderElector,
    micro_time,
)
from cbop.leaderelection.metrics import NO_METRICS, LeaderMetrics
from cbop.leaderelection.observer import LeaseObserver, Observation, lease_record

__all__ = [
    "ACQUIRE_JITTER_FACTOR",
    "JITTER_FACTOR",
    "NO_METRICS",
    "RELEASED_LEASE_DURATION_SECONDS",
    "LeaderElector",
    "LeaderMetrics",
    "LeaseObserver",
    "Observation",
    "lease_record",
    "micro_time",
]
