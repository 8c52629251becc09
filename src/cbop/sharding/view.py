"""The shard group as one LIST shows it, judged by the local clock.

This module owns :class:`GroupView`, what a replica knows of its group at one tick
(live members, each shard's holder, a conflict that must keep it idle), and
:class:`GroupReader`, which makes it from one label-selected LIST of the group's Leases
and a GET of the single-leader Lease, for :class:`cbop.sharding.membership.Membership`.

Liveness uses the leader elector's rule (:class:`cbop.leaderelection.LeaseObserver`,
client-go's): a Lease is live while less than its duration has passed since this
process saw its record change, so clock skew between nodes does not matter. Why a
conflict: replicas with different shard counts cut the namespaces differently and their
shard Leases do not exclude each other, so a replica that sees an older member with
another count, or the single-leader Lease held, holds no shard until that clears.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from cbop.clock import Clock
from cbop.kube import LEASES, ApiError, KubeInterface
from cbop.leaderelection import LeaseObserver
from cbop.sharding.assign import ShardState
from cbop.sharding.leases import (
    MEMBER_ROLE,
    ROLE_LABEL,
    SHARD_ROLE,
    announced_shards,
    group_selector,
    lease_holder,
    lease_meta,
    lease_seniority,
    shard_lease_name,
)

__all__ = ["GroupReader", "GroupView"]

log = structlog.get_logger("cbop.sharding")


@dataclass(frozen=True)
class GroupView:
    """One LIST of the group, judged by the local clock.

    Attributes:
        members: identities whose membership Lease is live.
        shards: one :class:`ShardState` per shard index (``ShardState()`` where the
            shard has no Lease).
        labelled: indices of the shards whose Lease exists with the group's labels.
        next_expiry: the earliest clock time at which a Lease of another member that
            is valid now (membership or shard) expires unless renewed, or ``None``.
        conflict: why this replica must hold no shard now (an older live member
            announces another shard count, or the single-leader Lease is held), or
            ``None``. Members announcing another count are not in ``members``.
    """

    members: frozenset[str]
    shards: tuple[ShardState, ...]
    labelled: frozenset[int]
    next_expiry: float | None = None
    conflict: str | None = None


class GroupReader:
    """Reads one replica's shard group and judges it by the local clock.

    Args:
        client: API client with get and list on Leases in ``namespace``.
        group: the group name (``--leader-election-id``).
        namespace: where the group's Leases live.
        identity: this replica's identity (its own membership Lease's holder).
        shards: the shard count.
        request_timeout: seconds each request may take.
        clock: the local monotonic clock liveness is measured on.
    """

    def __init__(
        self,
        client: KubeInterface,
        *,
        group: str,
        namespace: str,
        identity: str,
        shards: int,
        request_timeout: float,
        clock: Clock,
    ) -> None:
        self._client = client
        self._group = group
        self._namespace = namespace
        self._identity = identity
        self._shards = shards
        self._timeout = request_timeout
        self._clock = clock
        self._observer = LeaseObserver(clock)
        self._shard_leases: dict[int, dict[str, Any]] = {}  # as last listed

    def shard_lease(self, index: int) -> dict[str, Any] | None:
        """Return shard ``index``'s Lease as the last successful LIST returned it, or None."""
        return self._shard_leases.get(index)

    def observe(self, joined: tuple[str, str] | None) -> GroupView | None:
        """LIST the group's Leases once, GET the single-leader Lease, judge them by the local clock.

        Args:
            joined: this replica's seniority (:func:`cbop.sharding.leases.lease_seniority`
                of its first membership Lease), or ``None`` before it wrote one; a live
                member announcing another shard count is a conflict when it is older.

        Returns:
            The :class:`GroupView`, or ``None`` when a request failed (logged).
        """
        try:
            listed = self._client.list(
                LEASES,
                self._namespace,
                label_selector=group_selector(self._group),
                timeout=self._timeout,
            )
        except ApiError as err:
            log.warning("cannot list the shard group's leases", group=self._group, error=str(err))
            return None
        now = self._clock.now()
        seen: set[str] = set()
        members: set[str] = set()
        shards = [ShardState()] * self._shards
        labelled: set[int] = set()
        expiries: list[float] = []
        conflicts: list[str] = []
        others: list[tuple[str, int | None, tuple[str, str]]] = []  # live, not this one
        self._shard_leases = {}
        for lease in listed.get("items") or ():
            meta = lease_meta(lease)
            name = str(meta.get("name", ""))
            seen.add(name)
            expiry = self._observer.observe(name, lease).expiry
            live = now < expiry
            role = (meta.get("labels") or {}).get(ROLE_LABEL)
            holder = lease_holder(lease)
            if live and holder and holder != self._identity:
                expiries.append(expiry)
            if role == MEMBER_ROLE:
                if live and holder == self._identity:
                    members.add(holder)
                elif live and holder:
                    others.append((holder, announced_shards(lease), lease_seniority(lease)))
            elif role == SHARD_ROLE:
                index = self._shard_index(name)
                if index is not None:
                    shards[index] = ShardState(holder, live and bool(holder))
                    labelled.add(index)
                    self._shard_leases[index] = dict(lease)
        # Members announcing another count are never counted; one announcing this count
        # is not counted either while an older member announces another: it yields and
        # holds nothing, so its share would go unserved. An unannounced count is taken
        # for this one (a replica from before the annotation).
        foreign = [(h, c, s) for h, c, s in others if c is not None and c != self._shards]
        for holder, count, seniority in others:
            if (count is None or count == self._shards) and not any(
                older < seniority for _, _, older in foreign
            ):
                members.add(holder)
        mine = joined
        for holder, count, seniority in foreign:
            if mine is None or seniority < mine:
                conflicts.append(f"the older member {holder} runs with --shards {count}")
        single = self._single_leader(now, seen)
        if single is None:
            return None
        if single:
            conflicts.append(
                f"the single-leader Lease {self._namespace}/{self._group} is held by {single}"
            )
        self._observer.retain(seen)
        return GroupView(
            frozenset(members),
            tuple(shards),
            frozenset(labelled),
            min(expiries, default=None),
            "; ".join(conflicts) or None,
        )

    def _single_leader(self, now: float, seen: set[str]) -> str | None:
        """GET the single-leader Lease ``<group>``; return its valid holder, ``""``, or None.

        ``""`` when it is missing, released or expired by the local clock; ``None``
        when the GET failed (logged). Records what it saw in ``seen``.
        """
        try:
            lease = self._client.get(LEASES, self._namespace, self._group, timeout=self._timeout)
        except ApiError as err:
            if err.is_not_found:
                return ""
            log.warning(
                "cannot read the single-leader lease",
                lease=f"{self._namespace}/{self._group}",
                error=str(err),
            )
            return None
        seen.add(self._group)
        expiry = self._observer.observe(self._group, lease).expiry
        holder = lease_holder(lease)
        return holder if holder and now < expiry else ""

    def _shard_index(self, name: str) -> int | None:
        prefix = shard_lease_name(self._group, 0)[:-1]
        rest = name[len(prefix) :] if name.startswith(prefix) else ""
        if not rest.isdigit():
            return None
        index = int(rest)
        return (
            index if index < self._shards and name == shard_lease_name(self._group, index) else None
        )
