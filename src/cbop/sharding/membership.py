"""Group membership over Leases: who is live, and who holds which shard.

This module owns :class:`Membership`, used by :class:`cbop.sharding.ShardCoordinator`
once per tick. Every replica of a group renews a membership Lease of its own,
``<group>-member-<identity>``; each shard ``i`` has the Lease ``<group>-shard-<i>``
(written by that shard's ``LeaderElector``). All of them carry the label
``cbop.dev/shard-group=<group>`` and ``cbop.dev/shard-role=member|shard``, so one
label-selected LIST per tick reads the whole group.

Liveness is judged by the local clock with the leader elector's own rule
(:class:`cbop.leaderelection.LeaseObserver`, client-go's): a Lease is live while less
than its ``leaseDurationSeconds`` have passed since this process last saw its record
(its spec; every renewal changes ``renewTime``) change. A write to its metadata alone
(a label) keeps no dead member alive; a Lease without a duration has expired. The
server's ``renewTime`` is never compared with the local wall clock, so clock skew
between nodes does not matter. A Lease first seen is given a full duration, as
client-go does.

Every membership Lease also announces its replica's shard count (the annotation
``cbop.dev/shards``). Replicas with different counts cut the namespaces differently
and their shard Leases do not exclude each other, so a replica that sees a live member
announcing another count, whose membership Lease is older than its own (created
earlier; the Lease name breaks ties), or sees the single-leader Lease ``<group>`` held
(a ``--shards 1`` replica of the same id), reports a conflict
(:attr:`GroupView.conflict`), and the coordinator holds no shard until it clears: the
incumbents keep working, the newcomers wait. :class:`ShardedGroupCheck` is the other
side: a single leader does not acquire its Lease while shard 0's Lease is held.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import structlog

from cbop.clock import Clock
from cbop.kube import LEASES, ApiError, KubeClient
from cbop.leaderelection import RELEASED_LEASE_DURATION_SECONDS, LeaseObserver, micro_time
from cbop.sharding.assign import ShardState
from cbop.shardrange import fnv1a64

__all__ = [
    "GROUP_LABEL",
    "MEMBER_ROLE",
    "ROLE_LABEL",
    "SHARDS_ANNOTATION",
    "SHARD_ROLE",
    "GroupView",
    "Membership",
    "ShardedGroupCheck",
    "group_labels",
    "member_lease_name",
    "shard_lease_name",
]

log = structlog.get_logger("cbop.sharding")

#: Label naming the group (the ``--leader-election-id``) on every Lease of the group.
GROUP_LABEL: Final = "cbop.dev/shard-group"
#: Label telling membership Leases from shard Leases.
ROLE_LABEL: Final = "cbop.dev/shard-role"
MEMBER_ROLE: Final = "member"
SHARD_ROLE: Final = "shard"
#: Annotation on a membership Lease: the replica's shard count (``--shards``), decimal.
SHARDS_ANNOTATION: Final = "cbop.dev/shards"
#: Annotation on a membership Lease: the ``creationTimestamp`` of the replica's first
#: membership Lease, kept when the Lease is recreated, so its seniority never changes.
JOINED_ANNOTATION: Final = "cbop.dev/joined"
#: Most shard Leases :class:`ShardedGroupCheck` reads per call.
_MAX_CHECKED_SHARDS: Final = 1024

#: Longest object name the API server accepts for a Lease (a DNS subdomain).
_MAX_NAME: Final = 253
_INVALID = re.compile(r"[^a-z0-9.-]+")


def shard_lease_name(group: str, index: int) -> str:
    """Return the name of shard ``index``'s Lease: ``<group>-shard-<index>``."""
    return f"{group}-shard-{index}"


def member_lease_name(group: str, identity: str) -> str:
    """Return the membership Lease name of ``identity``: ``<group>-member-<identity>``.

    The identity is lower-cased and every run of characters a DNS subdomain may not
    hold becomes ``-``; when that changed anything, or the name would exceed 253
    characters, 16 hex digits of the identity's FNV-1a hash are appended so two
    identities never share a Lease.
    """
    prefix = f"{group}-member-"
    clean = _INVALID.sub("-", identity.lower()).strip("-.")
    if clean == identity and len(prefix) + len(clean) <= _MAX_NAME:
        return prefix + clean
    suffix = f"-{fnv1a64(identity):016x}"
    return prefix + clean[: _MAX_NAME - len(prefix) - len(suffix)].rstrip("-.") + suffix


def group_labels(group: str, role: str) -> dict[str, str]:
    """Return the labels every Lease of ``group`` with ``role`` carries."""
    return {GROUP_LABEL: group, ROLE_LABEL: role}


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


def _spec(lease: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = lease.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _holder(lease: Mapping[str, Any]) -> str:
    holder = _spec(lease).get("holderIdentity")
    return holder if isinstance(holder, str) else ""


def _meta(lease: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = lease.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _announced_shards(lease: Mapping[str, Any]) -> int | None:
    """Return the shard count a membership Lease announces, or None (absent or invalid)."""
    value = (_meta(lease).get("annotations") or {}).get(SHARDS_ANNOTATION)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _seniority(lease: Mapping[str, Any]) -> tuple[str, str]:
    """Order membership Leases oldest first: by the time joined, then by name.

    The time joined is the ``cbop.dev/joined`` annotation, or else ``creationTimestamp``;
    both come from the API server (RFC 3339, UTC, whole seconds), so every replica
    orders the same Leases the same way whatever its clock says.
    """
    meta = _meta(lease)
    joined = (meta.get("annotations") or {}).get(JOINED_ANNOTATION)
    if not isinstance(joined, str) or not joined:
        joined = str(meta.get("creationTimestamp") or "")
    return joined, str(meta.get("name") or "")


class Membership:
    """One replica's membership Lease and its view of the group.

    Args:
        client: API client with get, list, create, update and delete on Leases in
            ``namespace``.
        group: the group name (``--leader-election-id``).
        namespace: where the group's Leases live.
        identity: this replica's identity (the membership Lease's ``holderIdentity``).
        shards: the shard count.
        lease_duration: seconds written as the membership Lease's
            ``leaseDurationSeconds`` (whole seconds) and assumed for Leases without one.
        request_timeout: seconds each request may take.
        clock: the local monotonic clock liveness is measured on.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        group: str,
        namespace: str,
        identity: str,
        shards: int,
        lease_duration: float,
        request_timeout: float,
        clock: Clock,
    ) -> None:
        self._client = client
        self._group = group
        self._namespace = namespace
        self._identity = identity
        self._shards = shards
        self._lease_duration = lease_duration
        self._timeout = request_timeout
        self._clock = clock
        self.lease_name = member_lease_name(group, identity)
        self._lease: dict[str, Any] | None = None  # own Lease as last written
        self._observer = LeaseObserver(clock)
        self._shard_leases: dict[int, dict[str, Any]] = {}  # as last listed
        self._joined: tuple[str, str] | None = None  # own seniority, from the first Lease

    def renew(self) -> bool:
        """Write a fresh ``renewTime`` into the membership Lease, creating it if missing.

        Updates from the Lease last written (its resourceVersion); on a conflict or a
        missing Lease it reads or creates it and writes again. API errors are logged.

        Returns:
            Whether the Lease was renewed.
        """
        now = micro_time(datetime.now(UTC))
        try:
            if self._lease is None:
                self._lease = self._read_or_create(now)
            else:
                self._lease = self._write(self._lease, now)
            return True
        except ApiError as err:
            if err.is_conflict or err.is_not_found:
                self._lease = None
                try:
                    self._lease = self._read_or_create(now)
                    return True
                except ApiError as again:
                    err = again
            log.warning(
                "cannot renew the shard membership lease", lease=self.lease_name, error=str(err)
            )
            return False

    def _read_or_create(self, now: str) -> dict[str, Any]:
        try:
            lease = self._client.get(
                LEASES, self._namespace, self.lease_name, timeout=self._timeout
            )
        except ApiError as err:
            if not err.is_not_found:
                raise
            created = self._client.create(
                LEASES,
                self._namespace,
                {
                    "metadata": {
                        "name": self.lease_name,
                        "namespace": self._namespace,
                        "labels": group_labels(self._group, MEMBER_ROLE),
                        "annotations": self._annotations(),
                    },
                    "spec": self._record(now, now),
                },
                timeout=self._timeout,
            )
            self._remember_joined(created)
            return created
        self._remember_joined(lease)
        return self._write(lease, now)

    def _remember_joined(self, lease: Mapping[str, Any]) -> None:
        """Keep this replica's seniority from the first membership Lease it wrote or read."""
        if self._joined is None:
            self._joined = _seniority(lease)

    def _annotations(self) -> dict[str, str]:
        """Return the annotations this replica writes on its membership Lease."""
        announced = {SHARDS_ANNOTATION: str(self._shards)}
        if self._joined is not None and self._joined[0]:
            announced[JOINED_ANNOTATION] = self._joined[0]
        return announced

    def _write(self, lease: Mapping[str, Any], now: str) -> dict[str, Any]:
        meta = dict(_meta(lease))
        meta["labels"] = {**(meta.get("labels") or {}), **group_labels(self._group, MEMBER_ROLE)}
        meta["annotations"] = {**(meta.get("annotations") or {}), **self._annotations()}
        acquired = _spec(lease).get("acquireTime")
        body = {**lease, "metadata": meta, "spec": self._record(acquired or now, now)}
        return self._client.update(
            LEASES, self._namespace, self.lease_name, body, timeout=self._timeout
        )

    def _record(self, acquire_time: str, renew_time: str) -> dict[str, Any]:
        return {
            "holderIdentity": self._identity,
            "leaseDurationSeconds": max(1, int(self._lease_duration)),
            "acquireTime": acquire_time,
            "renewTime": renew_time,
        }

    def observe(self) -> GroupView | None:
        """LIST the group's Leases once, GET the single-leader Lease, judge them by the local clock.

        Returns:
            The :class:`GroupView`, or ``None`` when a request failed (logged).
        """
        try:
            listed = self._client.list(
                LEASES,
                self._namespace,
                label_selector=f"{GROUP_LABEL}={self._group}",
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
            meta = _meta(lease)
            name = str(meta.get("name", ""))
            seen.add(name)
            expiry = self._observer.observe(name, lease).expiry
            live = now < expiry
            role = (meta.get("labels") or {}).get(ROLE_LABEL)
            holder = _holder(lease)
            if live and holder and holder != self._identity:
                expiries.append(expiry)
            if role == MEMBER_ROLE:
                if live and holder == self._identity:
                    members.add(holder)
                elif live and holder:
                    others.append((holder, _announced_shards(lease), _seniority(lease)))
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
        mine = self._joined
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
        holder = _holder(lease)
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

    def label_shard_lease(self, index: int) -> None:
        """Make sure shard ``index``'s Lease exists and carries the group's labels.

        The ``LeaderElector`` creates a missing Lease without labels and keeps whatever
        metadata it finds, so the Lease is created here first, with labels and an empty
        holder (free), or its labels are added by an update (with the resourceVersion
        read, so the record is untouched) when it exists without them. Only the verbs
        the elector needs anyway (get, create, update) are used.

        Raises:
            ApiError: the Lease could be neither created nor labelled (409 when it
                changed between the read and the update: the next tick tries again).
        """
        name = shard_lease_name(self._group, index)
        labels = group_labels(self._group, SHARD_ROLE)
        try:
            self._client.create(
                LEASES,
                self._namespace,
                {"metadata": {"name": name, "namespace": self._namespace, "labels": labels}},
                timeout=self._timeout,
            )
        except ApiError as err:
            if not err.is_already_exists:
                raise
            lease = self._client.get(LEASES, self._namespace, name, timeout=self._timeout)
            meta = dict(_meta(lease))
            present = meta.get("labels") or {}
            if all(present.get(k) == v for k, v in labels.items()):
                return
            meta["labels"] = {**present, **labels}
            self._client.update(
                LEASES, self._namespace, name, {**lease, "metadata": meta}, timeout=self._timeout
            )

    def clear_expired_shard_lease(self, index: int) -> bool:
        """Empty the holder of shard ``index``'s Lease, found expired by the last LIST.

        A ``LeaderElector`` started now would wait a whole lease duration from its own
        first read before taking an unrenewed Lease over; this process has watched the
        record already. So, as a candidate takes over an expired Lease in client-go,
        the record is overwritten, with the listed ``resourceVersion`` (a renewal since
        then makes the write fail with 409), by a released one: an empty holder and a
        1 s duration, which the elector then takes at once. The caller must have
        judged the record expired (:attr:`ShardState.valid` False) in the last view.

        Returns:
            Whether the Lease now names no holder (False: it changed since the LIST,
            or the write failed; logged).
        """
        lease = self._shard_leases.get(index)
        if lease is None or not _holder(lease):
            return True
        spec = {
            **_spec(lease),
            "holderIdentity": "",
            "leaseDurationSeconds": RELEASED_LEASE_DURATION_SECONDS,
        }
        try:
            self._client.update(
                LEASES,
                self._namespace,
                shard_lease_name(self._group, index),
                {**lease, "spec": spec},
                timeout=self._timeout,
            )
        except ApiError as err:
            log.info(
                "cannot clear the expired shard lease",
                lease=shard_lease_name(self._group, index),
                holder=_holder(lease),
                error=str(err),
            )
            return False
        log.info(
            "cleared an expired shard lease",
            lease=shard_lease_name(self._group, index),
            holder=_holder(lease),
        )
        return True

    def leave(self) -> None:
        """Delete the membership Lease, so the others rebalance at their next tick.

        Deletes only the Lease this replica last wrote (a resourceVersion
        precondition); errors are logged.
        """
        lease = self._lease
        self._lease = None
        preconditions = None
        if lease is not None:
            version = _meta(lease).get("resourceVersion")
            if isinstance(version, str):
                preconditions = {"resourceVersion": version}
        try:
            self._client.delete(
                LEASES,
                self._namespace,
                self.lease_name,
                preconditions=preconditions,
                timeout=self._timeout,
            )
        except ApiError as err:
            if not err.is_not_found:
                log.warning(
                    "cannot delete the shard membership lease",
                    lease=self.lease_name,
                    error=str(err),
                )


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
        client: KubeClient,
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
            holder = _holder(lease)
            if holder and self._clock.now() < expiry:
                held.append(f"{name} by {holder}")
        self._observer.retain(seen)
        if not held:
            return None
        return (
            f"shard Leases in {self._namespace} are held ({', '.join(held)}): "
            "a sharded group (--shards > 1) of this --leader-election-id is at work"
        )
