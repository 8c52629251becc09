"""Owner references to ConfigBundles: how any controller tells a ConfigMap cbop manages.

A ConfigMap is kept by a bundle when its controller owner reference (``controller:
true``) names a ConfigBundle: group ``cbop.dev`` and kind ``ConfigBundle``, whatever the
version (references written as ``cbop.dev/v1alpha1`` stay valid under every served
version, as the garbage collector resolves them). Pure functions on parsed JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cbop.api.types import GROUP, KIND

__all__ = ["controller_reference", "is_bundle_reference"]


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
