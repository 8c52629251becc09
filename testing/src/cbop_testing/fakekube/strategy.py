"""What the fake API server sets, keeps and refuses in the body of a write.

This module owns the rules that kube-apiserver's create and update strategies (and its
``FillObjectMetaSystemFields``) apply to a body before anything is stored: the fields a
create sets, the metadata an update cannot change, the split between a resource and
its ``status`` subresource, when ``metadata.generation`` grows, and which write changes
nothing. Pure functions over dicts; :class:`~cbop_testing.fakekube.ObjectTracker` calls
them under its lock and stores the outcome.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from cbop.kube import Resource
from cbop_testing.fakekube import errors

__all__ = [
    "deleted_status",
    "next_generation",
    "prepare_create",
    "prepare_update",
    "rfc3339",
    "same_object",
    "validate_create",
]

#: Metadata an update keeps from the stored object, whatever its body says.
_FIXED_ON_UPDATE: Final = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)


def rfc3339(seconds: float) -> str:
    """Return wall-clock ``seconds`` as the API server writes a timestamp (UTC, seconds)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def validate_create(res: Resource, namespace: str | None, meta: Mapping[str, Any]) -> None:
    """Refuse a create whose ``metadata`` the API server refuses.

    Raises:
        ApiError: 422 Invalid without a name; 400 when ``meta``'s namespace differs from
            the request's ``namespace`` or it carries a resourceVersion.
    """
    if not meta.get("name"):
        raise errors.invalid(
            res.kind, "", [("metadata.name", "Required value: name or generateName is required")]
        )
    if res.namespaced and meta.get("namespace") not in (None, "", namespace):
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    if meta.get("resourceVersion"):
        raise errors.bad_request("resourceVersion should not be set on objects to be created")


def prepare_create(
    res: Resource,
    namespace: str | None,
    new: dict[str, Any],
    *,
    uid: str,
    created: float,
    has_status: bool,
) -> None:
    """Set, in place, what a create sets: namespace, uid, creationTimestamp, generation.

    A resource with a ``status`` subresource starts at generation 1 and drops the
    body's ``status``; a deletionTimestamp in the body is dropped.
    """
    meta = new["metadata"]
    if res.namespaced:
        meta["namespace"] = namespace
    meta["uid"] = uid
    meta["creationTimestamp"] = rfc3339(created)
    for transient in ("deletionTimestamp", "deletionGracePeriodSeconds"):
        meta.pop(transient, None)
    if has_status:
        meta["generation"] = 1
        new.pop("status", None)


def prepare_update(
    current: Mapping[str, Any],
    body: dict[str, Any],
    subresource: str | None,
    *,
    has_status: bool,
) -> dict[str, Any]:
    """Return what an update of ``current`` with ``body`` would store (no resourceVersion).

    The ``status`` subresource writes only ``status``; the main resource keeps the
    stored ``status`` when the resource has that subresource, and never changes the
    metadata of :data:`_FIXED_ON_UPDATE`. ``body`` may be changed and returned.
    """
    if subresource == "status":
        new = copy.deepcopy(dict(current))
        if "status" in body:
            new["status"] = body["status"]
        else:
            new.pop("status", None)
        return new
    new = body
    new.setdefault("apiVersion", current.get("apiVersion"))
    new.setdefault("kind", current.get("kind"))
    meta = new.setdefault("metadata", {})
    stored = current["metadata"]
    for fixed in _FIXED_ON_UPDATE:
        if fixed in stored:
            meta[fixed] = stored[fixed]
        else:
            meta.pop(fixed, None)
    if has_status:
        if "status" in current:
            new["status"] = copy.deepcopy(current["status"])
        else:
            new.pop("status", None)
    return new


def same_object(new: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether ``new`` equals ``current`` but for what a write sets by itself.

    (``resourceVersion``, ``managedFields`` and ``generation``.)
    """
    return _comparable(new) == _comparable(current)


def next_generation(new: dict[str, Any], current: Mapping[str, Any], *, has_status: bool) -> None:
    """Grow ``new``'s generation by one, in place, when its spec changed.

    The spec is all but ``metadata`` and ``status``; only resources with a ``status``
    subresource have a generation that grows, as the API server's strategies do.
    """
    if has_status and _spec_of(new) != _spec_of(current):
        new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1


def deleted_status(res: Resource, name: str, uid: str | None) -> dict[str, Any]:
    """Return the ``Status`` of success a DELETE answers when the object is gone."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": res.group, "kind": res.plural, "uid": uid},
    }


def _comparable(obj: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(obj))
    meta = out.get("metadata") or {}
    for key in ("resourceVersion", "managedFields", "generation"):
        meta.pop(key, None)
    return out


def _spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}
