"""Unified diffs of ConfigMaps, for ``cbop --once --dry-run``."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import yaml

_SERVER_FIELDS = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation")


def _as_yaml(obj: Mapping[str, Any] | None) -> list[str]:
    if obj is None:
        return []
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in _SERVER_FIELDS}
    shown = {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}
    shown["metadata"] = meta
    text = yaml.safe_dump(shown, sort_keys=True, default_flow_style=False, allow_unicode=True)
    return text.splitlines(keepends=True)


def configmap_diff(current: Mapping[str, Any] | None, desired: Mapping[str, Any] | None) -> str:
    """Return a unified diff (str) from ``current`` to ``desired`` ConfigMap bodies.

    Server-set metadata (resourceVersion, uid, managedFields, ...) is left out; either
    side may be None (creation, or nothing to write). Returns "" when nothing changes.
    """
    if desired is None:
        return ""
    name = desired.get("metadata", {}).get("name", "configmap")
    return "".join(
        difflib.unified_diff(
            _as_yaml(current),
            _as_yaml(desired),
            fromfile=f"configmap/{name} (live)" if current is not None else "/dev/null",
            tofile=f"configmap/{name} (desired)",
        )
    )
