"""Judging a Lease by the local clock: the one rule every Lease reader in cbop follows.

This module owns :class:`LeaseObserver`. The leader elector judges the Lease it
competes for with it, and shard membership (``cbop.sharding``) judges every Lease of a
shard group with it, so the two can never disagree about one Lease.

The rule is client-go's (``LeaderElector.isLeaseValid`` with its ``observedRecord`` and
``observedTime``): a Lease's *record* is its spec (``holderIdentity``,
``leaseDurationSeconds``, ``acquireTime``, ``renewTime``, ``leaseTransitions``). The
record expires ``leaseDurationSeconds`` after the moment this process last saw it
*change*, measured on this process's monotonic clock; the server's ``renewTime`` is never
compared with the local wall clock, so skew between nodes does not matter. Consequences:

- a write that changes only metadata (a label, an annotation; its resourceVersion
  changes) does not restart the clock: it does not keep a dead holder alive;
- a record without a ``leaseDurationSeconds`` (or with one that is not a whole number)
  has a duration of 0: it has expired as soon as it is seen, as client-go reads it;
- a record seen for the first time gets its full duration from that moment.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cbop.clock import Clock

__all__ = ["LeaseObserver", "Observation", "lease_record"]


def lease_record(lease: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of ``lease``'s record (its ``spec``; ``{}`` when there is none)."""
    spec = lease.get("spec")
    return dict(spec) if isinstance(spec, Mapping) else {}


@dataclass(frozen=True, slots=True)
class Observation:
    """What a :class:`LeaseObserver` concluded about one Lease.

    Attributes:
        record: the Lease's record (its spec) as last seen.
        holder: ``holderIdentity`` (``""`` when absent or not a string).
        changed_at: clock time at which the record was last seen to change.
        expiry: clock time at which the record expires unless it changes again.
    """

    record: Mapping[str, Any]
    holder: str
    changed_at: float
    expiry: float

    def valid(self, now: float) -> bool:
        """Whether the record is unexpired at clock time ``now`` (client-go's isLeaseValid)."""
        return now < self.expiry

    def held(self, now: float) -> bool:
        """Whether someone holds the Lease at ``now``: a holder and an unexpired record."""
        return bool(self.holder) and self.valid(now)


class LeaseObserver:
    """Remembers when each Lease's record last changed; judges expiry on ``clock``.

    Args:
        clock: the monotonic time source (tests: ``FakeClock``).

    Leases are told apart by a name the caller chooses (the Lease's name). Thread-safe.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, Observation] = {}

    def observe(self, name: str, lease: Mapping[str, Any]) -> Observation:
        """Record ``lease`` as just read under ``name``; return the judgement.

        The expiry clock restarts only when the record differs from the one last
        observed under ``name`` (see the module docstring).
        """
        record = lease_record(lease)
        now = self._clock.now()
        with self._lock:
            last = self._seen.get(name)
            changed_at = now if last is None or last.record != record else last.changed_at
            holder = record.get("holderIdentity")
            seen = Observation(
                record,
                holder if isinstance(holder, str) else "",
                changed_at,
                changed_at + _duration(record),
            )
            self._seen[name] = seen
        return seen

    def last(self, name: str) -> Observation | None:
        """Return the last observation under ``name``, or None."""
        with self._lock:
            return self._seen.get(name)

    def forget(self, name: str) -> None:
        """Drop what was seen under ``name`` (the Lease is gone, or no longer of interest)."""
        with self._lock:
            self._seen.pop(name, None)

    def retain(self, names: Iterable[str]) -> None:
        """Forget every Lease but ``names`` (those a fresh LIST still returned)."""
        keep = set(names)
        with self._lock:
            for name in [n for n in self._seen if n not in keep]:
                del self._seen[name]


def _duration(record: Mapping[str, Any]) -> int:
    """Return ``leaseDurationSeconds``, or 0 when it is missing or not a whole number."""
    value = record.get("leaseDurationSeconds")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
