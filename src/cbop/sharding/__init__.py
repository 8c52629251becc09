"""Sharding the work across replicas: one Lease per shard, balanced over live replicas.

Modules:

- ``cbop.sharding.coordinator``: :class:`ShardCoordinator`, which holds this replica's
  share of the shard Leases and tells a :class:`ShardHandler` when to start, drain or
  drop a shard's work.
- ``cbop.sharding.assign``: the pure balancing decision (no client, no threads).
- ``cbop.sharding.membership``: this replica's membership Lease and the upkeep of the
  shard Leases; ``cbop.sharding.view``: the group as one LIST per tick shows it;
  ``cbop.sharding.leases``: the names, labels and annotations of the group's Leases.
- ``cbop.sharding.check``: :class:`ShardedGroupCheck`, which keeps a single leader
  from acquiring while a sharded group of its id is at work.
- ``cbop.sharding.metrics``: :class:`ShardMetrics`, the seam its metrics go through;
  the Prometheus implementation lives in ``cbop.metrics.sharding``.

The package may import ``cbop.leaderelection``, ``cbop.informers``, ``cbop.kube`` and the
pure layers below them, never Prometheus or ``cbop.metrics``; the runtime builds on it
(import-linter contracts).
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
