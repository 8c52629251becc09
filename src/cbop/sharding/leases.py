"""The Leases of a shard group: their names, labels and announcements, and how they read.

This module owns the conventions every Lease of a shard group follows. Every replica
of a group renews a membership Lease of its own, ``<group>-member-<identity>``; each
shard ``i`` has the Lease ``<group>-shard-<i>`` (written by that shard's
``LeaderElector``). All of them carry the label ``cbop.dev/shard-group=<group>`` (the
group as :func:`cbop.api.label_value` gives it: cut and hashed past 63 characters) and
``cbop.dev/shard-role=member|shard``, so one label-selected LIST reads the whole group.
A membership Lease also announces its replica's shard count (``cbop.dev/shards``) and
when the replica joined (``cbop.dev/joined``).

The membership writer (:mod:`cbop.sharding.membership`), the group view
(:mod:`cbop.sharding.view`), the single leader's check (:mod:`cbop.sharding.check`)
and the shard coordinator name and read the Leases with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from cbop.api import label_value
from cbop.shardrange import fnv1a64

__all__ = [
    "GROUP_LABEL",
    "JOINED_ANNOTATION",
    "MEMBER_ROLE",
    "ROLE_LABEL",
    "SHARDS_ANNOTATION",
    "SHARD_ROLE",
    "announced_shards",
    "group_labels",
    "group_selector",
    "lease_holder",
    "lease_meta",
    "lease_seniority",
    "lease_spec",
    "member_lease_name",
    "shard_lease_name",
]

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
    """Return the labels every Lease of ``group`` with ``role`` carries.

    The group (a Lease name, up to 253 characters) goes through
    :func:`cbop.api.label_value`, so any ``--leader-election-id`` makes valid labels.
    """
    return {GROUP_LABEL: label_value(group), ROLE_LABEL: role}


def group_selector(group: str) -> str:
    """Return the label selector of every Lease of ``group`` (as :func:`group_labels` labels)."""
    return f"{GROUP_LABEL}={label_value(group)}"


def lease_spec(lease: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return the Lease's spec (``{}`` when it has none)."""
    spec = lease.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def lease_holder(lease: Mapping[str, Any]) -> str:
    """Return the Lease's ``spec.holderIdentity`` (``""`` when absent or not a string)."""
    holder = lease_spec(lease).get("holderIdentity")
    return holder if isinstance(holder, str) else ""


def lease_meta(lease: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return the Lease's metadata (``{}`` when it has none)."""
    meta = lease.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def announced_shards(lease: Mapping[str, Any]) -> int | None:
    """Return the shard count a membership Lease announces, or None (absent or invalid)."""
    value = (lease_meta(lease).get("annotations") or {}).get(SHARDS_ANNOTATION)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def lease_seniority(lease: Mapping[str, Any]) -> tuple[str, str]:
    """Order membership Leases oldest first: by the time joined, then by name.

    The time joined is the ``cbop.dev/joined`` annotation, or else ``creationTimestamp``;
    both come from the API server (RFC 3339, UTC, whole seconds), so every replica
    orders the same Leases the same way whatever its clock says.
    """
    meta = lease_meta(lease)
    joined = (meta.get("annotations") or {}).get(JOINED_ANNOTATION)
    if not isinstance(joined, str) or not joined:
        joined = str(meta.get("creationTimestamp") or "")
    return joined, str(meta.get("name") or "")
