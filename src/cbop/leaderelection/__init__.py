"""Lease-based leader election, after client-go's ``tools/leaderelection``.

:class:`LeaderElector` is one candidate in an election on a ``coordination.k8s.io/v1``
Lease (its fence, and where it departs from client-go, are described in
:mod:`cbop.leaderelection.elector`); :class:`LeaseObserver` is the local-clock judgement
of a Lease's expiry that the elector and shard membership share. The package never
imports Prometheus: its metrics go through the :class:`LeaderMetrics` seam
(import-linter contracts). See docs/leader-election.md.
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
