"""Patches as the API server applies them: JSON merge patch, JSON patch, strategic merge.

This module owns :func:`merge_patch` (RFC 7386), :func:`json_patch` (RFC 6902) and
:func:`apply_patch`, the dispatcher the fake API server uses. Strategic merge patches are
applied as merge patches: exact for maps (labels, annotations, data), which is all cbop
patches; lists are replaced whole instead of merged by key.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["JsonPatchError", "apply_patch", "json_patch", "merge_patch"]


class JsonPatchError(ValueError):
    """A JSON patch that cannot be applied (the server answers 422, or 409 for ``test``).

    Attributes:
        failed_test: a ``test`` operation found another value.
    """

    def __init__(self, message: str, *, failed_test: bool = False) -> None:
        super().__init__(message)
        self.failed_test = failed_test


def merge_patch(target: Any, patch: Any) -> Any:
    """Return ``target`` with the RFC 7386 merge ``patch`` applied (inputs untouched).

    ``None`` values delete keys; a non-object patch replaces the target.
    """
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: dict[str, Any] = dict(copy.deepcopy(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise JsonPatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise JsonPatchError(f"path segment {part!r} not found")
    return node


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts)
    last = parts[-1]
    try:
        return parent[int(last)] if isinstance(parent, list) else parent[last]
    except (KeyError, IndexError, ValueError):
        raise JsonPatchError(f"path {path!r} not found") from None


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent = _parent(doc, parts)
    last = parts[-1]
    try:
        return parent.pop(int(last)) if isinstance(parent, list) else parent.pop(last)
    except (KeyError, IndexError, ValueError):
        raise JsonPatchError(f"path {path!r} not found") from None


def _add(doc: Any, path: str, value: Any, *, replace: bool) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if replace:
            parent[index] = value
        else:
            parent.insert(index, value)
    elif isinstance(parent, dict):
        if replace and last not in parent:
            raise JsonPatchError(f"path {path!r} not found")
        parent[last] = value
    else:
        raise JsonPatchError(f"cannot add to {path!r}")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """Return ``target`` with the RFC 6902 ``operations`` applied (inputs untouched).

    Raises:
        JsonPatchError: a malformed operation, a missing path, or a failed ``test``
            (its ``failed_test`` is then True).
    """
    if not isinstance(operations, list):
        raise JsonPatchError("a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        kind = op.get("op")
        path = op.get("path", "")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")), replace=False)
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op.get("value")), replace=True)
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise JsonPatchError(f"testing value {path} failed", failed_test=True)
        elif kind in ("move", "copy"):
            value = _get(doc, op["from"])
            if kind == "move":
                _remove(doc, op["from"])
            doc = _add(doc, path, copy.deepcopy(value), replace=False)
        else:
            raise JsonPatchError(f"unknown JSON patch operation {kind!r}")
    return doc


def apply_patch(target: Mapping[str, Any], body: Any, patch_type: str) -> dict[str, Any]:
    """Apply a PATCH body of ``patch_type`` (``merge``, ``strategic``, ``json``, ``apply``).

    ``apply`` (server-side apply) is merged as a merge patch; field ownership is
    :mod:`cbop_testing.fakekube.fields`' business.

    Raises:
        JsonPatchError: see :func:`json_patch`.
        ValueError: an unknown ``patch_type``.
    """
    if patch_type == "json":
        result = json_patch(target, body)
    elif patch_type in ("merge", "strategic", "apply"):
        result = merge_patch(target, body)
    else:
        raise ValueError(f"unknown patch type {patch_type!r}")
    if not isinstance(result, dict):
        raise JsonPatchError("a patch must leave an object")
    return result
