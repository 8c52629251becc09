"""The single leader's check for a sharded group of its id at work.

This module owns :class:`ShardedGroupCheck`, the other side of the shard-count
conflict that :mod:`cbop.sharding.view` reports: the runtime manager passes it to the
single leader's (``--shards 1``) :class:`cbop.leaderelection.LeaderElector` as
``may_acquire``, so that it does not acquire its Lease while shard 0's Lease (or any
other shard's) is held.
"""

from __future__ import annotations

from typing import Final

import structlog

from cbop.clock import Clock
from cbop.kube import LEASES, ApiError, KubeInterface
from cbop.leaderelection import LeaseObserver
from cbop.sharding.leases import lease_holder, shard_lease_name

__all__ = ["ShardedGroupCheck"]

log = structlog.get_logger("cbop.sharding")

#: Most shard Leases :class:`ShardedGroupCheck` reads per call.
_MAX_CHECKED_SHARDS: Final = 1024


class ShardedGroupCheck:
    """Tells a single leader (``--shards 1``) whether a sharded group of its id is at work.

    Passed as the ``may_acquire`` of the single-leader
    :class:`cbop.leaderelection.LeaderElector`: before each attempt to acquire the
    Lease ``<group>``, it GETs the shard Leases ``<group>-shard-0``, ``-1``, ... until
    one is missing (at most 1,024), and judges each by the local clock; a group is at
    work while any of them has a valid holder. Only ``get`` on Leases is needed, which
    the single leader has anyway (no ``list``): ``N + 1`` requests per attempt.

    Args:
        client: API client with ``get`` on Leases in ``namespace``.
        group: the group's name (``--leader-election-id``).
        namespace: the Leases' namespace.
        request_timeout: seconds each GET may take.
        clock: the local monotonic clock validity is judged on
            (:class:`cbop.leaderelection.LeaseObserver`).
    """

    def __init__(
        self,
        client: KubeInterface,
        *,
        group: str,
        namespace: str,
        request_timeout: float,
        clock: Clock,
    ) -> None:
        self._client = client
        self._group = group
        self._namespace = namespace
        self._timeout = request_timeout
        self._clock = clock
        self._observer = LeaseObserver(clock)

    def __call__(self) -> str | None:
        """Return why the single leader must not acquire now, or None.

        A failed GET (other than 404) is logged at debug and answers None: the check
        narrows the overlap of a shard-count change, and an API server that cannot be
        read will not grant the Lease either.
        """
        seen: set[str] = set()
        held: list[str] = []
        for index in range(_MAX_CHECKED_SHARDS):
            name = shard_lease_name(self._group, index)
            try:
                lease = self._client.get(LEASES, self._namespace, name, timeout=self._timeout)
            except ApiError as err:
                if not err.is_not_found:
                    log.debug("cannot read a shard lease", lease=name, error=str(err))
                    self._observer.retain(())
                    return None
                break
            seen.add(name)
            expiry = self._observer.observe(name, lease).expiry
            holder = lease_holder(lease)
            if holder and self._clock.now() < expiry:
                held.append(f"{name} by {holder}")
        self._observer.retain(seen)
        if not held:
            return None
        return (
            f"shard Leases in {self._namespace} are held ({', '.join(held)}): "
            "a sharded group (--shards > 1) of this --leader-election-id is at work"
        )
