"""Event handler interfaces of the informers (client-go's ``ResourceEventHandler``).

This module owns the shape of what an informer calls: :class:`ResourceEventHandler`
(a Protocol with ``on_add``, ``on_update``, ``on_delete``) and :class:`FuncHandler`,
which adapts plain callables (client-go's ``ResourceEventHandlerFuncs``).

Objects passed to handlers are the cached objects (``Mapping[str, Any]`` decoded from
JSON) and must not be mutated; see :mod:`cbop.informers.indexer`. ``on_delete`` receives
either the object's final state or a
:class:`~cbop.informers.tombstone.DeletedFinalStateUnknown` tombstone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from cbop.informers.tombstone import DeletedFinalStateUnknown

__all__ = ["DeleteArg", "FuncHandler", "ResourceEventHandler"]

#: What ``on_delete`` receives: the final object, or a tombstone.
DeleteArg = Mapping[str, Any] | DeletedFinalStateUnknown


class ResourceEventHandler(Protocol):
    """Receives an informer's notifications, on the informer's thread, in order.

    ``on_update`` is also called with ``old is new`` on every resync, and with the
    cached and the listed object on a relist (as client-go); compare
    ``metadata.resourceVersion`` to tell real changes apart.
    """

    def on_add(self, obj: Mapping[str, Any]) -> None:
        """Handle an object that appeared (initial list, watch ADDED, relist)."""
        ...

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """Handle a change (watch MODIFIED, relist) or a resync (``old is new``)."""
        ...

    def on_delete(self, obj: DeleteArg) -> None:
        """Handle a deletion: the final state, or a tombstone if found gone on relist."""
        ...


class FuncHandler:
    """A :class:`ResourceEventHandler` built from optional callables.

    Args:
        on_add: ``(obj) -> None``.
        on_update: ``(old, new) -> None``.
        on_delete: ``(obj_or_tombstone) -> None``.

    Missing callables ignore their notifications.
    """

    def __init__(
        self,
        on_add: Callable[[Mapping[str, Any]], None] | None = None,
        on_update: Callable[[Mapping[str, Any], Mapping[str, Any]], None] | None = None,
        on_delete: Callable[[DeleteArg], None] | None = None,
    ) -> None:
        self._on_add = on_add
        self._on_update = on_update
        self._on_delete = on_delete

    def on_add(self, obj: Mapping[str, Any]) -> None:
        """Call the ``on_add`` callable, if any."""
        if self._on_add is not None:
            self._on_add(obj)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """Call the ``on_update`` callable, if any."""
        if self._on_update is not None:
            self._on_update(old, new)

    def on_delete(self, obj: DeleteArg) -> None:
        """Call the ``on_delete`` callable, if any."""
        if self._on_delete is not None:
            self._on_delete(obj)
