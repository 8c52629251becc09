"""Event handlers that map informer events to workqueue keys (the controller's sources).

As controller-runtime's ``handler`` package: a :class:`MapFunc` turns an object into the
keys of the objects to reconcile; :func:`enqueue_object` maps an object to its own key
(``For``), :func:`enqueue_controller_owner` to the key of its controller owner of one
group and kind (``Owns``), and any other function serves ``Watches``.
:class:`EnqueueHandler` is the informer event handler that puts those keys on a queue.

Priorities, as controller-runtime's handlers on its priority queue: an add delivered
before the informer reports synced comes from the initial list (client-go's
``isInInitialList``); those, and updates that change nothing (a resync, or a relist
finding the same resourceVersion) go in at ``LOW_PRIORITY``, so that a restart's
thousands of converged objects do not delay the one someone just changed.

Beyond controller-runtime: a ``For`` watch may say which listed objects are already
converged (``converged``, e.g. a status whose ``observedGeneration`` is the object's
``generation``). Listed objects that are not (created or changed while no replica ran,
or never reconciled) then go in at ``NORMAL_PRIORITY``, ahead of the converged rest, so
a restart over ten thousand converged objects serves the one new object first even when
it was created before the initial list was read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cbop.informers import DeleteArg, DeletedFinalStateUnknown
from cbop.keys import key_of, object_key
from cbop.runtime.predicates import Predicate
from cbop.workqueue import LOW_PRIORITY, PriorityQueue, RateLimitingQueue

__all__ = [
    "ConvergedFunc",
    "EnqueueHandler",
    "MapFunc",
    "enqueue_controller_owner",
    "enqueue_object",
]

#: Maps a (cached, read-only) object to the keys of the objects to reconcile.
MapFunc = Callable[[Mapping[str, Any]], Iterable[str]]

#: Whether a (cached, read-only) object needs no reconcile beyond a look: its status
#: already tells of its current spec.
ConvergedFunc = Callable[[Mapping[str, Any]], bool]


def enqueue_object(obj: Mapping[str, Any]) -> list[str]:
    """Map an object to its own key (controller-runtime's ``EnqueueRequestForObject``)."""
    return [object_key(obj)]


def enqueue_controller_owner(group: str, kind: str) -> MapFunc:
    """Return a map function from a dependent to its controller owner's key.

    As controller-runtime's ``EnqueueRequestForOwner`` with ``OnlyControllerOwner``: the
    owner reference with ``controller: true`` whose group and kind are ``group`` and
    ``kind`` (version ignored), in the dependent's own namespace (owners never live in
    another namespace).

    Args:
        group: the owner's API group (``""`` for the core group).
        kind: the owner's kind.
    """

    def owner(obj: Mapping[str, Any]) -> list[str]:
        meta = obj.get("metadata") or {}
        for ref in meta.get("ownerReferences") or ():
            if not ref.get("controller"):
                continue
            api_version = str(ref.get("apiVersion", ""))
            ref_group = api_version.partition("/")[0] if "/" in api_version else ""
            if ref_group == group and ref.get("kind") == kind and ref.get("name"):
                return [key_of(meta.get("namespace"), str(ref["name"]))]
            return []
        return []

    return owner


class EnqueueHandler:
    """An informer event handler putting the keys ``map_func`` yields on ``queue``.

    Args:
        queue: the controller's queue; on a ``PriorityQueue`` unchanged objects and the
            initial list go in at ``LOW_PRIORITY``.
        map_func: object -> keys to enqueue.
        synced: the informer's ``has_synced`` (None: every add is a real change).
        converged: for an object of the initial list, whether it is converged; those
            that are not go in at normal priority (None: every listed object is low).
        predicates: an event enqueues keys only when every predicate passes it
            (:mod:`cbop.runtime.predicates`); none by default.

    On an update, the keys of both the new and the old object are enqueued (a dependent
    whose owner changed wakes both owners). A tombstone is mapped through the last
    state it carries.
    """

    def __init__(
        self,
        queue: RateLimitingQueue[str],
        map_func: MapFunc,
        *,
        synced: Callable[[], bool] | None = None,
        converged: ConvergedFunc | None = None,
        predicates: Sequence[Predicate] = (),
    ) -> None:
        self._queue = queue
        self._predicates = tuple(predicates)
        self._map = map_func
        self._synced = synced
        self._converged = converged
        self._add_low: Callable[[str], None] = (
            functools.partial(queue.add, priority=LOW_PRIORITY)
            if isinstance(queue, PriorityQueue)
            else queue.add
        )

    def _keys(self, obj: DeleteArg) -> list[str]:
        if isinstance(obj, DeletedFinalStateUnknown):
            if obj.obj is None:
                return []
            obj = obj.obj
        return list(self._map(obj))

    def _add(self, keys: Iterable[str], *, low: bool = False) -> None:
        add = self._add_low if low else self._queue.add
        for key in keys:
            add(key)

    def on_add(self, obj: Mapping[str, Any]) -> None:
        """Enqueue the keys of an added object.

        From the initial list they go in low, unless ``converged`` says it is not.
        """
        if not all(p.create(obj) for p in self._predicates):
            return
        listed = self._synced is not None and not self._synced()
        self._add(self._keys(obj), low=listed and (self._converged is None or self._converged(obj)))

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """Enqueue the new object's keys (low if unchanged) and those only the old yields."""
        if not all(p.update(old, new) for p in self._predicates):
            return
        unchanged = old is new or _resource_version(old) == _resource_version(new)
        new_keys = self._keys(new)
        self._add(new_keys, low=unchanged)
        if old is not new:
            self._add(k for k in self._keys(old) if k not in new_keys)

    def on_delete(self, obj: DeleteArg) -> None:
        """Enqueue the keys of a deleted object (tombstones included)."""
        if self._predicates:
            last = obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj
            if last is not None and not all(p.delete(last) for p in self._predicates):
                return
        self._add(self._keys(obj))


def _resource_version(obj: Mapping[str, Any]) -> str | None:
    rv: str | None = obj.get("metadata", {}).get("resourceVersion")
    return rv
