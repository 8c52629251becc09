"""``cbop_rollouts_total{kind}``: the Prometheus side of the rollout controllers' seam.

:class:`RolloutMetrics` implements :class:`cbop.rollout.RolloutObserver`; one instance
serves the Deployment, StatefulSet and DaemonSet reconcilers of a registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

#: The ``kind`` label values, initialised to 0 so that dashboards see every series.
ROLLOUT_KINDS = ("Deployment", "StatefulSet", "DaemonSet")


class RolloutMetrics:
    """Counts the pod template annotation writes that roll a workload, by kind.

    Args:
        registry: where to register; one RolloutMetrics per registry.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.rollouts = Counter(
            "cbop_rollouts",
            "Workloads rolled by cbop (cbop.dev/config-hash written), by kind",
            ("kind",),
            registry=registry,
        )
        for kind in ROLLOUT_KINDS:
            self.rollouts.labels(kind)

    def rolled_out(self, kind: str) -> None:
        """Count one rollout of a workload of ``kind`` (e.g. ``Deployment``)."""
        self.rollouts.labels(kind).inc()
