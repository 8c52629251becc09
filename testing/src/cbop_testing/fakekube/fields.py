"""A minimal model of ``metadata.managedFields``: who owns which field, and apply conflicts.

This module owns :class:`FieldOwnership`, what :class:`cbop_testing.fakekube.ObjectTracker`
keeps per object, as the API server's field manager (``structured-merge-diff``) does in
outline: an ``Update`` (create, update, patch) takes the fields it changed from every
other manager; an ``Apply`` (server-side apply) owns exactly the fields it sent, fails
with a conflict when it would change a field another manager owns unless forced, and
removes fields it stopped applying that nobody else owns. Fields are leaf paths of the
object (maps are walked, lists are leaves); ``apiVersion``, ``kind``, ``status`` on the
main resource and ``metadata`` other than labels and annotations are not tracked.
Written into ``metadata.managedFields`` as ``FieldsV1`` (``{"f:data": {"f:key": {}}}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["FieldOwnership", "Path", "leaf_paths"]

Path = tuple[str, ...]

_UNTRACKED_TOP = frozenset({"apiVersion", "kind"})
_TRACKED_META = frozenset({"labels", "annotations"})


def leaf_paths(obj: Mapping[str, Any], *, subresource: str | None = None) -> dict[Path, Any]:
    """Return the object's tracked leaf paths with their values.

    Args:
        obj: the object (or an applied configuration).
        subresource: ``"status"`` tracks only ``status``; else ``status`` is left out.
    """
    out: dict[Path, Any] = {}

    def walk(prefix: Path, value: Any) -> None:
        if isinstance(value, Mapping) and value:
            for k, v in value.items():
                walk((*prefix, str(k)), v)
        else:
            out[prefix] = value

    for key, value in obj.items():
        if key in _UNTRACKED_TOP:
            continue
        if (key == "status") != (subresource == "status"):
            continue
        if key == "metadata":
            for mk in _TRACKED_META:
                if isinstance(value, Mapping) and value.get(mk):
                    walk(("metadata", mk), value[mk])
            continue
        walk((key,), value)
    return out


def _to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return root


class FieldOwnership:
    """The managers of one object and the fields each owns, by operation.

    Entries are keyed by ``(manager, operation)`` with operation ``Update`` or ``Apply``,
    as in ``managedFields``.
    """

    def __init__(self) -> None:
        self.owners: dict[tuple[str, str], set[Path]] = {}

    def copy(self) -> FieldOwnership:
        """Return an independent copy."""
        other = FieldOwnership()
        other.owners = {k: set(v) for k, v in self.owners.items()}
        return other

    def _take(self, manager: str, operation: str, paths: set[Path]) -> None:
        for key in self.owners:
            if key != (manager, operation):
                self.owners[key] = self.owners[key] - paths
        self.owners.setdefault((manager, operation), set()).update(paths)
        self.owners = {k: v for k, v in self.owners.items() if v}

    def record_update(
        self,
        manager: str,
        old: Mapping[str, Any] | None,
        new: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> None:
        """Record an Update by ``manager``: it takes every field whose value it set or changed."""
        before = leaf_paths(old or {}, subresource=subresource)
        after = leaf_paths(new, subresource=subresource)
        changed = {p for p, v in after.items() if p not in before or before[p] != v}
        # Fields that disappeared are owned by nobody any more.
        gone = set(before) - set(after)
        for key in self.owners:
            self.owners[key] = self.owners[key] - gone
        if changed:
            self._take(manager, "Update", changed)
        self.owners = {k: v for k, v in self.owners.items() if v}

    def conflicts(
        self,
        manager: str,
        current: Mapping[str, Any],
        applied: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> list[tuple[str, str]]:
        """Return ``(other manager, ".dotted.path")`` for fields the apply would take."""
        have = leaf_paths(current, subresource=subresource)
        want = leaf_paths(applied, subresource=subresource)
        found: list[tuple[str, str]] = []
        for path, value in sorted(want.items()):
            if path in have and have[path] == value:
                continue
            for (other, _op), owned in sorted(self.owners.items()):
                if other != manager and path in owned:
                    found.append((other, "." + ".".join(path)))
        return found

    def record_apply(
        self, manager: str, applied: Mapping[str, Any], *, subresource: str | None = None
    ) -> set[Path]:
        """Record an Apply by ``manager``; return the paths it dropped that nobody else owns.

        The caller removes those paths from the object, as server-side apply does.
        """
        want = set(leaf_paths(applied, subresource=subresource))
        before = self.owners.get((manager, "Apply"), set())
        dropped = before - want
        self.owners.pop((manager, "Apply"), None)
        self._take(manager, "Apply", want)
        if want:
            self.owners[(manager, "Apply")] = want
        others = set().union(*self.owners.values()) if self.owners else set()
        return dropped - others

    def managed_fields(self, api_version: str) -> list[dict[str, Any]]:
        """Return the ``metadata.managedFields`` entries (sorted by manager, operation)."""
        return [
            {
                "manager": manager,
                "operation": operation,
                "apiVersion": api_version,
                "fieldsType": "FieldsV1",
                "fieldsV1": _to_fields_v1(paths),
            }
            for (manager, operation), paths in sorted(self.owners.items())
        ]


def remove_path(obj: dict[str, Any], path: Path) -> None:
    """Delete ``path`` from ``obj``, and the maps it leaves empty."""
    nodes: list[dict[str, Any]] = [obj]
    for part in path[:-1]:
        child = nodes[-1].get(part)
        if not isinstance(child, dict):
            return
        nodes.append(child)
    nodes[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):
        if not nodes[depth]:
            nodes[depth - 1].pop(path[depth - 1], None)
