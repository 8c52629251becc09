"""Sharding the work across replicas: one Lease per shard, balanced over live replicas.

The :class:`ShardCoordinator` holds this replica's share of the shard Leases and tells a
:class:`ShardHandler` (the runtime) when to start, drain or drop a shard's work; the
balancing decision is pure (:mod:`cbop.sharding.assign`). The package never imports
Prometheus: its metrics go through the :class:`ShardMetrics` seam (import-linter
contracts). See docs/sharding.md.
"""

from cbop.sharding.assign import Decision, ShardState, decide
from cbop.sharding.check import ShardedGroupCheck
from cbop.sharding.coordinator import ShardCoordinator, ShardHandler
from cbop.sharding.leases import (
    GROUP_LABEL,
    JOINED_ANNOTATION,
    MEMBER_ROLE,
    ROLE_LABEL,
    SHARD_ROLE,
    SHARDS_ANNOTATION,
    member_lease_name,
    shard_lease_name,
)
from cbop.sharding.metrics import NO_SHARD_METRICS, ShardEvent, ShardMetrics

__all__ = [
    "GROUP_LABEL",
    "JOINED_ANNOTATION",
    "MEMBER_ROLE",
    "NO_SHARD_METRICS",
    "ROLE_LABEL",
    "SHARDS_ANNOTATION",
    "SHARD_ROLE",
    "Decision",
    "ShardCoordinator",
    "ShardEvent",
    "ShardHandler",
    "ShardMetrics",
    "ShardState",
    "ShardedGroupCheck",
    "decide",
    "member_lease_name",
    "shard_lease_name",
]
