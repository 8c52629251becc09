"""Group membership over Leases: this replica's membership Lease, and its view of the group.

This module owns :class:`Membership`, used by :class:`cbop.sharding.ShardCoordinator`
once per tick: it renews this replica's membership Lease
(``<group>-member-<identity>``, announcing its shard count and when it joined), reads
the group through :class:`cbop.sharding.view.GroupReader`, makes sure each shard
Lease it is about to compete for carries the group's labels, clears a shard Lease the
last view found expired, and deletes the membership Lease when the replica leaves. The
names, labels and annotations of the group's Leases are in
:mod:`cbop.sharding.leases`; the single leader's check in :mod:`cbop.sharding.check`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import structlog

from cbop.clock import Clock
from cbop.kube import LEASES, ApiError, KubeInterface
from cbop.leaderelection import RELEASED_LEASE_DURATION_SECONDS, micro_time
from cbop.sharding.check import ShardedGroupCheck
from cbop.sharding.leases import (
    GROUP_LABEL,
    JOINED_ANNOTATION,
    MEMBER_ROLE,
    ROLE_LABEL,
    SHARD_ROLE,
    SHARDS_ANNOTATION,
    group_labels,
    lease_holder,
    lease_meta,
    lease_seniority,
    lease_spec,
    member_lease_name,
    shard_lease_name,
)
from cbop.sharding.view import GroupReader, GroupView

# The Lease names and labels, the group view and the single leader's check used to
# live here: still importable.
__all__ = [
    "GROUP_LABEL",
    "JOINED_ANNOTATION",
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
        client: KubeInterface,
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
        self.lease_name = member_lease_name(group, identity)
        self._lease: dict[str, Any] | None = None  # own Lease as last written
        self._joined: tuple[str, str] | None = None  # own seniority, from the first Lease
        self._reader = GroupReader(
            client,
            group=group,
            namespace=namespace,
            identity=identity,
            shards=shards,
            request_timeout=request_timeout,
            clock=clock,
        )

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
            self._joined = lease_seniority(lease)

    def _annotations(self) -> dict[str, str]:
        """Return the annotations this replica writes on its membership Lease."""
        announced = {SHARDS_ANNOTATION: str(self._shards)}
        if self._joined is not None and self._joined[0]:
            announced[JOINED_ANNOTATION] = self._joined[0]
        return announced

    def _write(self, lease: Mapping[str, Any], now: str) -> dict[str, Any]:
        meta = dict(lease_meta(lease))
        meta["labels"] = {**(meta.get("labels") or {}), **group_labels(self._group, MEMBER_ROLE)}
        meta["annotations"] = {**(meta.get("annotations") or {}), **self._annotations()}
        acquired = lease_spec(lease).get("acquireTime")
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
        """Read the group once and judge it by the local clock (:meth:`GroupReader.observe`).

        Returns:
            The :class:`GroupView`, or ``None`` when a request failed (logged).
        """
        return self._reader.observe(self._joined)

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
            meta = dict(lease_meta(lease))
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
        lease = self._reader.shard_lease(index)
        if lease is None or not lease_holder(lease):
            return True
        spec = {
            **lease_spec(lease),
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
                holder=lease_holder(lease),
                error=str(err),
            )
            return False
        log.info(
            "cleared an expired shard lease",
            lease=shard_lease_name(self._group, index),
            holder=lease_holder(lease),
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
            version = lease_meta(lease).get("resourceVersion")
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
