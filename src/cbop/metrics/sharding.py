"""The shard coordinator's metrics: shards held and shard transitions.

``cbop_shards_held`` (gauge: shards this replica works on now) and
``cbop_shard_transitions_total{shard,event}`` (counter; ``shard`` is the 0-based index,
``event`` one of acquired, released, lost). Implements
``cbop.sharding.ShardMetrics`` structurally (this layer does not import the
coordinator).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["SHARD_EVENTS", "PrometheusShardMetrics"]

#: The values of the ``event`` label (``cbop.sharding.ShardEvent``).
SHARD_EVENTS = ("acquired", "released", "lost")


class PrometheusShardMetrics:
    """Shard metrics of one coordinator, registered in ``registry``.

    Args:
        registry: where to register; one instance per registry.
        shards: the shard count; every ``{shard, event}`` series of the ``N`` shards
            is created at 0, so rates work from the first scrape.
    """

    def __init__(self, registry: CollectorRegistry, *, shards: int) -> None:
        self._held = Gauge(
            "cbop_shards_held",
            "Number of shards this replica holds the Lease of and works on.",
            registry=registry,
        )
        self._transitions = Counter(
            "cbop_shard_transitions",
            "Shard Lease transitions of this replica, by shard index and event "
            "(acquired, released gracefully, lost).",
            ("shard", "event"),
            registry=registry,
        )
        for shard in range(shards):
            for event in SHARD_EVENTS:
                self._transitions.labels(str(shard), event)

    def set_held(self, count: int) -> None:
        """Set ``cbop_shards_held``."""
        self._held.set(count)

    def transition(self, shard: int, event: str) -> None:
        """Count one ``event`` of shard index ``shard``."""
        self._transitions.labels(str(shard), str(event)).inc()
