"""Reading kube-apiserver's JSON audit log: who wrote what, and who held the Lease when.

Used with ``ControlPlane(audit_policy=WRITES_AUDIT_POLICY)``: every write to
ConfigBundles, ConfigMaps and Events is logged with its user and the time the API server
received it, every Lease write with the holder it left in the Lease. Times are the API
server's wall clock (seconds since the epoch), comparable with ``time.time()`` in tests
on the same machine.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

#: Audit verbs that change state.
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
#: The resources cbop writes as a controller (the Lease is the election, not the work).
WORK_RESOURCES = frozenset({"configmaps", "configbundles", "events"})


def seconds(stamp: str) -> float:
    """An audit timestamp (RFC 3339, microseconds, UTC) as seconds since the epoch."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Write:
    """One write request as audited: who, what, when it arrived, what it answered."""

    user: str
    verb: str
    resource: str
    name: str
    received: float
    code: int
    namespace: str = ""


@dataclass(frozen=True)
class LeaseChange:
    """A successful Lease write: from ``at`` (commit time) ``holder`` (a user) holds it.

    ``holder`` is None after a release (empty holder) or a deletion.
    """

    at: float
    holder: str | None
    verb: str


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every completed request in the audit log, in log order."""
    if not path.exists():
        return []
    out = []
    with path.open("rb") as f:
        for line in f:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("stage") == "ResponseComplete":
                out.append(event)
    return out


def writes(events: Iterable[dict[str, Any]], users: Iterable[str]) -> list[Write]:
    """Write requests to ConfigBundles, ConfigMaps and Events made by ``users``."""
    wanted = set(users)
    out = []
    for event in events:
        user = (event.get("user") or {}).get("username", "")
        ref = event.get("objectRef") or {}
        if user not in wanted or event.get("verb") not in WRITE_VERBS:
            continue
        if ref.get("resource") not in WORK_RESOURCES:
            continue
        out.append(
            Write(
                user=user,
                verb=str(event["verb"]),
                resource=str(ref.get("resource"))
                + (f"/{ref['subresource']}" if ref.get("subresource") else ""),
                name=str(ref.get("name", "")),
                received=seconds(event["requestReceivedTimestamp"]),
                code=int((event.get("responseStatus") or {}).get("code", 0)),
                namespace=str(ref.get("namespace", "")),
            )
        )
    return sorted(out, key=lambda w: w.received)


def lease_changes(
    events: Iterable[dict[str, Any]],
    namespace: str,
    name: str,
    identities: Mapping[str, str] | None = None,
) -> list[LeaseChange]:
    """Successful writes of one Lease, by commit time, with the user they leave holding it.

    The holder is the user who wrote the Lease; with ``identities`` (holderIdentity ->
    user) it is the user the written ``holderIdentity`` names, so a write of someone
    else's Lease (e.g. adding a label) does not count as taking it.
    """
    out = []
    for event in events:
        ref = event.get("objectRef") or {}
        if ref.get("resource") != "leases" or ref.get("namespace") != namespace:
            continue
        if ref.get("name") != name or event.get("verb") not in WRITE_VERBS:
            continue
        if not 200 <= int((event.get("responseStatus") or {}).get("code", 0)) < 300:
            continue
        holder: str | None = None
        if event["verb"] != "delete":
            spec = (event.get("responseObject") or {}).get("spec") or {}
            if spec.get("holderIdentity"):
                holder = (event.get("user") or {}).get("username")
                if identities is not None:
                    holder = identities.get(spec["holderIdentity"], spec["holderIdentity"])
        out.append(LeaseChange(seconds(event["stageTimestamp"]), holder, str(event["verb"])))
    return sorted(out, key=lambda c: c.at)


def holder_at(changes: Sequence[LeaseChange], when: float) -> str | None:
    """The user holding the Lease at ``when`` (per the last change committed by then)."""
    index = bisect.bisect_right([c.at for c in changes], when) - 1
    return changes[index].holder if index >= 0 else None


def writes_outside_leadership(
    all_writes: Sequence[Write], changes: Sequence[LeaseChange]
) -> list[Write]:
    """Writes that arrived while the Lease named another replica."""
    out = []
    for write in all_writes:
        holder = holder_at(changes, write.received)
        if holder is not None and holder != write.user:
            out.append(write)
    return out


def acquisitions(changes: Sequence[LeaseChange]) -> list[LeaseChange]:
    """The changes at which the Lease passed to a new holder (not renewals)."""
    out = []
    previous: str | None = None
    for change in changes:
        if change.holder is not None and change.holder != previous:
            out.append(change)
        previous = change.holder
    return out
