"""Lease-based leader election, after client-go's ``tools/leaderelection``.

Modules:

- ``cbop.leaderelection.elector``: :class:`LeaderElector`, one candidate in an election
  on a ``coordination.k8s.io/v1`` Lease (fencing, and where it departs from client-go,
  are described there).
- ``cbop.leaderelection.lock``: :class:`LeaseLock`, the elector's reads and writes of
  the Lease (acquire or renew, create, release).
- ``cbop.leaderelection.timing``: the rule between the three durations, the acquire
  jitter and the timeouts of renewal requests.
- ``cbop.leaderelection.record``: the election record in the Lease spec and its
  ``MicroTime`` timestamps.
- ``cbop.leaderelection.observer``: :class:`LeaseObserver`, the local-clock judgement of
  a Lease's expiry that the elector and shard membership share (client-go's rule).
- ``cbop.leaderelection.metrics``: :class:`LeaderMetrics`, the seam its metrics go
  through; the Prometheus implementation lives in ``cbop.metrics``.

The package may import only ``cbop.kube``, ``cbop.clock``, ``cbop.api`` and
``cbop.defaults``; never Prometheus or ``cbop.metrics`` (an import-linter contract).
"""

from cbop.leaderelection.elector import LeaderElector
from cbop.leaderelection.metrics import NO_METRICS, LeaderMetrics
from cbop.leaderelection.observer import LeaseObserver, Observation, lease_record
from cbop.leaderelection.record import RELEASED_LEASE_DURATION_SECONDS, micro_time
from cbop.leaderelection.timing import ACQUIRE_JITTER_FACTOR, JITTER_FACTOR

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
