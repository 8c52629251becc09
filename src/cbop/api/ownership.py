"""Owner references to ConfigBundles: how any controller tells a ConfigMap cbop manages.

A ConfigMap is kept by a bundle when its controller owner reference (``controller:
true``) names a ConfigBundle: group ``cbop.dev`` and kind ``ConfigBundle``, whatever the
version (references written as ``cbop.dev/v1alpha1`` stay valid under every served
version, as the garbage collector resolves them). Pure functions on parsed JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cbop.api.types import API_VERSION, GROUP, KIND

__all__ = ["controller_reference", "is_bundle_reference", "owner_reference_to"]


def controller_reference(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Return the owner reference with ``controller: true`` of ``obj``, or None."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def is_bundle_reference(ref: Mapping[str, Any]) -> bool:
    """Whether an owner reference points at a ConfigBundle (group and kind; any version)."""
    group = str(ref.get("apiVersion", "")).partition("/")[0]
    return group == GROUP and ref.get("kind") == KIND


def owner_reference_to(owner: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """Return a controller owner reference (a new dict) to ``owner``, a ``cbop.dev`` object.

    Args:
        owner: the owning object as parsed JSON (``metadata.name`` and ``metadata.uid``
            are read).
        kind: the owner's kind (``ConfigBundle``, ``ClusterConfigBundle``).

    The reference names :data:`cbop.api.types.API_VERSION` and sets
    ``blockOwnerDeletion``: a foreground deletion of the owner waits for the dependent,
    and the writer needs ``update`` on the owner's ``finalizers`` subresource (as the
    OwnerReferencesPermissionEnforcement admission plugin checks).

    Raises:
        KeyError: ``owner`` has no ``metadata.name`` or ``metadata.uid``.
    """
    meta = owner["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
