"""The Lease lock: one candidate's reads and writes of the election Lease.

This module owns :class:`LeaseLock` (client-go's ``resourcelock.LeaseLock`` with the
``tryAcquireOrRenew`` and ``release`` steps of its ``LeaderElector``) and
:class:`Attempt`, the outcome of one try. :class:`cbop.leaderelection.LeaderElector`
drives it from its acquire and renew loops; nothing else uses it.

The lock is a ``coordination.k8s.io/v1`` Lease whose spec is the election record
(:mod:`cbop.leaderelection.record`). Every write is an update that carries the
``resourceVersion`` last read, so two candidates can never both succeed: the loser gets
``409 Conflict`` (or ``AlreadyExists`` when both try to create the Lease).

As in client-go, a candidate never trusts the server's ``renewTime``: it measures expiry
on its own monotonic clock from the moment it last saw the record change, against the
``leaseDurationSeconds`` written in that record
(:class:`cbop.leaderelection.observer.LeaseObserver`). Clock skew between nodes
therefore does not matter; only clock *rates* do.

Where it departs from client-go: a Lease deleted by hand is not taken over at once. A
candidate that last saw another holder in it waits until that record expires by its
own clock, as for an unrenewed Lease (client-go creates a missing Lease at once, so its
old holder and the creator may both lead until the old holder's next renewal fails).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from cbop.clock import Clock
from cbop.kube import LEASES, ApiError, KubeInterface
from cbop.leaderelection.metrics import LeaderMetrics
from cbop.leaderelection.observer import LeaseObserver
from cbop.leaderelection.record import (
    RELEASED_LEASE_DURATION_SECONDS,
    int_field,
    now_micro_time,
    record_holder,
)

__all__ = ["Attempt", "LeaseLock"]

log = structlog.get_logger("cbop.leaderelection")


class Attempt(enum.Enum):
    """The outcome of one try at acquiring or renewing the lease."""

    #: The Lease now names this candidate, written with a fresh renewTime.
    SUCCEEDED = "succeeded"
    #: The API call failed (connection, 409, 5xx, ...): try again later.
    FAILED = "failed"
    #: The Lease names someone else: held and unexpired (acquiring), or simply not
    #: this candidate any more (renewing).
    HELD = "held"


class LeaseLock:
    """One candidate's view of the election Lease, and its writes to it.

    Only the elector's :meth:`~cbop.leaderelection.LeaderElector.run` thread may use it.

    Args:
        client: the API client; it needs ``get``, ``create`` and ``update`` on
            ``coordination.k8s.io`` leases in ``namespace``.
        lease_name: name of the Lease.
        namespace: namespace of the Lease.
        identity: this candidate's identity, written as ``holderIdentity``.
        lease_duration: seconds written as ``leaseDurationSeconds`` (truncated to whole
            seconds, as client-go does).
        clock: the monotonic clock the observed record's expiry is measured on.
        metrics: where slow-path renewals are counted.
        request_timeout: called before each request for the seconds it may take.
    """

    def __init__(
        self,
        client: KubeInterface,
        *,
        lease_name: str,
        namespace: str,
        identity: str,
        lease_duration: float,
        clock: Clock,
        metrics: LeaderMetrics,
        request_timeout: Callable[[], float],
    ) -> None:
        self._client = client
        self._lease_name = lease_name
        self._namespace = namespace
        self._identity = identity
        self._lease_duration = lease_duration
        self._clock = clock
        self._metrics = metrics
        self._request_timeout_now = request_timeout
        self._lease: dict[str, Any] | None = None  # last Lease object the server returned
        # Judges the Lease's record by the local clock, as shard membership does.
        self._observer = LeaseObserver(clock)

    def try_acquire_or_renew(self, *, renewing: bool) -> Attempt:
        """Make one attempt at writing this candidate into the Lease.

        As client-go's ``tryAcquireOrRenew``: a leader first updates optimistically from
        the Lease it last wrote; otherwise (or on any error) the Lease is read, created
        if missing, and updated only if it is free, expired by the local clock, or
        already ours. Renewing, a Lease that names anyone else is not taken (``HELD``).
        API errors are logged and answered with ``FAILED``, never raised.
        """
        now = now_micro_time()
        if renewing and self._lease is not None and self.valid():
            spec = self.seen_record()
            try:
                self._write(
                    self._lease,
                    self._record(
                        acquire_time=spec.get("acquireTime") or now,
                        renew_time=now,
                        transitions=int_field(spec, "leaseTransitions"),
                    ),
                )
            except ApiError as err:
                log.debug(
                    "optimistic lease renewal failed; reading the lease",
                    lease=self.describe(),
                    error=str(err),
                )
            else:
                return Attempt.SUCCEEDED

        try:
            lease = self._client.get(
                LEASES, self._namespace, self._lease_name, timeout=self._request_timeout_now()
            )
        except ApiError as err:
            if not err.is_not_found:
                log.warning("cannot read the leader lease", lease=self.describe(), error=str(err))
                return Attempt.FAILED
            holder = self.holder()
            if not renewing and holder not in ("", self._identity) and self.valid():
                # A deleted Lease is not a released one: its holder may still be working
                # until the record it last wrote expires by our clock.
                log.debug(
                    "the leader lease is missing but was held recently; waiting for it to expire",
                    lease=self.describe(),
                    holder=holder,
                )
                return Attempt.HELD
            return self._create(now)

        self._observe(lease)
        old = self.seen_record()
        holder = record_holder(old)
        if holder != self._identity and (renewing or (holder and self.valid())):
            log.debug("the leader lease is held", lease=self.describe(), holder=holder)
            return Attempt.HELD
        if holder == self._identity:
            if renewing:
                # The optimistic renewal above was not possible or failed: count it, as
                # client-go's leader_election_slowpath_total does.
                self._metrics.slowpath_exercised()
            record = self._record(
                acquire_time=old.get("acquireTime") or now,
                renew_time=now,
                transitions=int_field(old, "leaseTransitions"),
            )
        else:
            record = self._record(
                acquire_time=now,
                renew_time=now,
                transitions=int_field(old, "leaseTransitions") + 1,
            )
        try:
            self._write(lease, record)
        except ApiError as err:
            if err.is_conflict:
                log.debug(
                    "another candidate updated the leader lease first",
                    lease=self.describe(),
                )
            else:
                log.warning("cannot update the leader lease", lease=self.describe(), error=str(err))
            return Attempt.FAILED
        return Attempt.SUCCEEDED

    def _create(self, now: str) -> Attempt:
        body = {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": self._lease_name, "namespace": self._namespace},
            "spec": self._record(acquire_time=now, renew_time=now, transitions=0),
        }
        try:
            created = self._client.create(
                LEASES, self._namespace, body, timeout=self._request_timeout_now()
            )
        except ApiError as err:
            if err.is_already_exists:
                log.debug("another candidate created the leader lease", lease=self.describe())
            else:
                log.warning("cannot create the leader lease", lease=self.describe(), error=str(err))
            return Attempt.FAILED
        self._observe(created)
        return Attempt.SUCCEEDED

    def release(self) -> None:
        """Hand the lease back: empty holder, 1 s duration (client-go's ``release``).

        Reads the Lease first and writes only if it still names this candidate, with the
        resourceVersion just read, so a successor's record is never overwritten. API
        errors are logged, never raised. The caller closes its write fence first.
        """
        try:
            lease = self._client.get(
                LEASES, self._namespace, self._lease_name, timeout=self._request_timeout_now()
            )
        except ApiError as err:
            log.warning("cannot release the leader lease", lease=self.describe(), error=str(err))
            return
        self._observe(lease)
        spec = self.seen_record()
        if record_holder(spec) != self._identity:
            log.info(
                "the leader lease is no longer ours; nothing to release",
                lease=self.describe(),
                holder=record_holder(spec) or None,
            )
            return
        now = now_micro_time()
        record = {
            "holderIdentity": "",
            "leaseDurationSeconds": RELEASED_LEASE_DURATION_SECONDS,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": int_field(spec, "leaseTransitions"),
        }
        try:
            self._write(lease, record)
        except ApiError as err:
            log.warning("cannot release the leader lease", lease=self.describe(), error=str(err))
            return
        log.info("released the leader lease", lease=self.describe(), identity=self._identity)

    def _record(self, *, acquire_time: str, renew_time: str, transitions: int) -> dict[str, Any]:
        """Return a Lease spec naming this candidate (client-go's LeaderElectionRecord)."""
        return {
            "holderIdentity": self._identity,
            "leaseDurationSeconds": int(self._lease_duration),
            "acquireTime": acquire_time,
            "renewTime": renew_time,
            "leaseTransitions": transitions,
        }

    def _write(self, lease: Mapping[str, Any], spec: dict[str, Any]) -> None:
        """Update ``lease`` (keeping its metadata, hence resourceVersion) with ``spec``.

        Raises:
            ApiError: ``is_conflict`` when the Lease changed since it was read.
        """
        body = {**lease, "spec": spec}
        updated = self._client.update(
            LEASES, self._namespace, self._lease_name, body, timeout=self._request_timeout_now()
        )
        self._observe(updated)

    def _observe(self, lease: Mapping[str, Any]) -> None:
        """Remember ``lease``; the observer restarts the expiry clock if its record changed."""
        self._lease = dict(lease)
        self._observer.observe(self._lease_name, lease)

    def seen_record(self) -> Mapping[str, Any]:
        """Return the Lease's record as last observed (``{}`` before any read)."""
        seen = self._observer.last(self._lease_name)
        return seen.record if seen is not None else {}

    def holder(self) -> str:
        """Return the holder in the record last observed (``""``: none, or no read yet)."""
        return record_holder(self.seen_record())

    def expires_in(self) -> float:
        """Seconds until the observed record expires on the local clock (<= 0: expired)."""
        seen = self._observer.last(self._lease_name)
        return (seen.expiry if seen is not None else 0.0) - self._clock.now()

    def valid(self) -> bool:
        """Whether the observed record is unexpired on the local clock (client-go's isLeaseValid).

        :class:`cbop.leaderelection.observer.LeaseObserver` judges it: a released lease
        (1 s) expires quickly and one without a duration has expired already.
        """
        return self.expires_in() > 0

    def describe(self) -> str:
        """Return ``namespace/name`` of the Lease, for log lines."""
        return f"{self._namespace}/{self._lease_name}"
