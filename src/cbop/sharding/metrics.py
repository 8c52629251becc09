"""The shard coordinator's metrics seam, as ``cbop.leaderelection.metrics`` is the elector's.

This module owns :class:`ShardMetrics`, the hook :class:`cbop.sharding.ShardCoordinator`
reports to, and :data:`NO_SHARD_METRICS`, the default that records nothing. The
coordinator never imports Prometheus: ``cbop.metrics.sharding.PrometheusShardMetrics``
implements this protocol with ``cbop_shards_held`` and
``cbop_shard_transitions_total{shard,event}``, and the manager passes it in.
"""

from __future__ import annotations

import enum
from typing import Final, Protocol

__all__ = ["NO_SHARD_METRICS", "ShardEvent", "ShardMetrics"]


class ShardEvent(enum.StrEnum):
    """How a shard changed hands in this process (the ``event`` label; a ``str``)."""

    #: The shard's Lease was won and the handler told to start work.
    ACQUIRED = "acquired"
    #: The handler drained the shard and its Lease was handed back (graceful).
    RELEASED = "released"
    #: The shard's Lease was lost (renewal failed or another holder appeared): work
    #: stopped at once, nothing released.
    LOST = "lost"


class ShardMetrics(Protocol):
    """What one coordinator reports. Called from its thread; must not block or raise."""

    def set_held(self, count: int) -> None:
        """Record how many shards this process holds now (its handler works on)."""
        ...

    def transition(self, shard: int, event: ShardEvent) -> None:
        """Count one transition of shard ``shard`` (its 0-based index)."""
        ...


class _NoShardMetrics:
    """The default :class:`ShardMetrics`: records nothing."""

    def set_held(self, count: int) -> None:
        """Do nothing."""

    def transition(self, shard: int, event: ShardEvent) -> None:
        """Do nothing."""


#: A :class:`ShardMetrics` that records nothing (the coordinator's default).
NO_SHARD_METRICS: Final[ShardMetrics] = _NoShardMetrics()
