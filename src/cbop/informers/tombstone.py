"""Cache keys of objects and of tombstones: the deleted objects whose end went unseen.

This module owns :class:`DeletedFinalStateUnknown`, the tombstone an informer hands to
``on_delete`` when an object vanished while it was not watching (found missing on a
relist), and :func:`meta_namespace_key`, the cache key of an object or of a tombstone.
Used by the cache (:mod:`cbop.informers.indexer`), the reflector, the event handlers
and every controller that handles deletes (through :mod:`cbop.informers`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cbop.keys import object_key

__all__ = ["DeletedFinalStateUnknown", "meta_namespace_key"]


@dataclass(frozen=True)
class DeletedFinalStateUnknown:
    """Tombstone for an object that was deleted while the informer was not watching.

    Delivered to ``on_delete`` (instead of the object) when a relist no longer contains
    a key the cache held, as client-go's ``cache.DeletedFinalStateUnknown``: the
    deletion happened, but its final state is unknown.

    Attributes:
        key: the cache key (``"namespace/name"``).
        obj: the last state the cache had; it may be stale.
    """

    key: str
    obj: Mapping[str, Any]


def meta_namespace_key(obj: Mapping[str, Any] | DeletedFinalStateUnknown) -> str:
    """Return the cache key of an object (:func:`cbop.keys.object_key`) or a tombstone.

    As client-go's ``DeletionHandlingMetaNamespaceKeyFunc``: a
    :class:`DeletedFinalStateUnknown` yields its own key.

    Raises:
        ValueError: the object has no ``metadata.name``.
    """
    if isinstance(obj, DeletedFinalStateUnknown):
        return obj.key
    return object_key(obj)
