"""The election record: what a leader-election Lease's spec holds, and how it is spelled.

This module owns the format of client-go's ``LeaderElectionRecord`` as cbop writes and
reads it in a ``coordination.k8s.io/v1`` Lease spec: ``holderIdentity``,
``leaseDurationSeconds``, ``acquireTime``, ``renewTime`` (MicroTime, RFC 3339 with
microseconds, UTC) and ``leaseTransitions``. The Lease lock
(:mod:`cbop.leaderelection.lock`) builds and reads records with it; shard membership
(``cbop.sharding``) spells its Leases' times with :func:`micro_time` and releases shard
Leases with :data:`RELEASED_LEASE_DURATION_SECONDS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

__all__ = [
    "RELEASED_LEASE_DURATION_SECONDS",
    "int_field",
    "micro_time",
    "now_micro_time",
    "record_holder",
]

#: ``leaseDurationSeconds`` written when the lease is released, so that candidates still
#: honouring a duration wait as little as possible.
RELEASED_LEASE_DURATION_SECONDS: Final = 1


def micro_time(when: datetime) -> str:
    """Format ``when`` as a Kubernetes ``MicroTime``: ``2024-05-01T12:00:00.123456Z``.

    Args:
        when: an aware datetime; it is converted to UTC.

    Raises:
        ValueError: ``when`` is naive (no time zone).
    """
    if when.tzinfo is None:
        raise ValueError("micro_time needs an aware datetime")
    return f"{when.astimezone(UTC):%Y-%m-%dT%H:%M:%S.%f}Z"


def now_micro_time() -> str:
    """Return the current wall-clock time as a ``MicroTime`` string."""
    return micro_time(datetime.now(UTC))


def record_holder(spec: Mapping[str, Any]) -> str:
    """Return the record's ``holderIdentity`` (``""`` when absent or not a string)."""
    holder = spec.get("holderIdentity")
    return holder if isinstance(holder, str) else ""


def int_field(spec: Mapping[str, Any], name: str) -> int:
    """Return the record's integer field ``name`` (0 when absent, a bool, or not an int)."""
    value = spec.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
