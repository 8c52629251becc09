"""The informer cache: a thread-safe, indexed store of objects, and its read-only Lister.

This module owns the cache behind every informer, modelled on client-go's
``tools/cache`` ``threadSafeMap`` + ``Indexer`` and the generated listers:

* objects are kept by key (:func:`cbop.keys.object_key`: ``"namespace/name"``, or
  ``"name"`` for cluster-scoped objects; :func:`meta_namespace_key` also takes a tombstone);
* named indexes map an index value to the set of keys whose object yields that value
  (``IndexFunc = Callable[[Mapping], list[str]]``); ``by_namespace`` is always present
  (index names are constants of :mod:`cbop.keys`); :func:`index_by_controller_uid`
  indexes objects by their controller owner's UID;
* :class:`DeletedFinalStateUnknown` is the tombstone handed to ``on_delete`` when an
  object vanished while the informer was not watching (found missing on a relist).

The caching contract: **cached objects are shared, never copied, and must not be
mutated.** ``get``/``list``/``by_index`` return the very dicts the cache holds (and the
handlers receive them too), exactly as client-go's listers do. A caller that wants to
change an object first takes ``copy.deepcopy(obj)``. This costs nothing on the hot
path: no copy per read, no frozen wrapper per nested dict/list (a recursively frozen
object costs about as much memory again as the object and breaks ``json.dumps`` and
``isinstance(x, dict)``; a deep copy per read costs ~30 us per 1 KiB ConfigMap).
The contract is enforced in tests by the cache mutation detector
(:class:`MutationDetector`, like client-go's ``KUBE_CACHE_MUTATION_DETECTOR``): with
``CBOP_CACHE_MUTATION_DETECTOR=true`` in the environment (or ``detect_mutations=True``)
the indexer keeps a private deep copy of every stored object and
:meth:`Indexer.check_mutations` raises :class:`CacheMutationError` naming any object that
was changed in place. It is off by default (it doubles memory).
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import structlog

from cbop.keys import BY_NAMESPACE, CONTROLLER_UID_INDEX, key_of, object_key, split_key
from cbop.locks import YieldingLock

__all__ = [
    "BY_NAMESPACE",
    "CONTROLLER_UID_INDEX",
    "CacheMutationError",
    "DeletedFinalStateUnknown",
    "IndexFunc",
    "IndexStaging",
    "Indexer",
    "Lister",
    "MutationDetector",
    "index_by_controller_uid",
    "index_by_label",
    "index_by_namespace",
    "matches_labels",
    "meta_namespace_key",
    "split_key",
]

log = structlog.get_logger("cbop.informers")

#: An index function: object -> the index values it is filed under (may be empty).
IndexFunc = Callable[[Mapping[str, Any]], list[str]]

_DETECTOR_ENV: Final = "CBOP_CACHE_MUTATION_DETECTOR"

# Aliases for annotations inside classes whose ``list`` method shadows the builtin.
_Objects = list[Mapping[str, Any]]
_Strings = list[str]
_Pairs = list[tuple[str, Mapping[str, Any]]]


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


def index_by_namespace(obj: Mapping[str, Any]) -> list[str]:
    """Index function: ``[metadata.namespace]`` (``[""]`` for cluster-scoped objects)."""
    meta = obj.get("metadata")
    if type(meta) is dict:
        namespace = meta.get("namespace")
        return [namespace if type(namespace) is str else ""]
    meta = meta or {}
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    return [namespace if isinstance(namespace, str) else ""]


def index_by_controller_uid(obj: Mapping[str, Any]) -> list[str]:
    """Index function: the UID of the owner reference with ``controller: true``, if any.

    Lets a controller find the objects it owns from the owner's UID (``by_index(name,
    owner_uid)``), as the ownerReference-based lookups of kube-controller-manager do.
    """
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return []
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return []
    for ref in refs:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            uid = ref.get("uid")
            if isinstance(uid, str) and uid:
                return [uid]
    return []


def index_by_label(label: str) -> IndexFunc:
    """Return an index function filing objects under the value of label ``label``."""

    def index(obj: Mapping[str, Any]) -> list[str]:
        meta = obj.get("metadata")
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        value = labels.get(label) if isinstance(labels, Mapping) else None
        return [value] if isinstance(value, str) else []

    return index


def matches_labels(obj: Mapping[str, Any], selector: Mapping[str, str] | None) -> bool:
    """Return whether every ``key: value`` of ``selector`` is among the object's labels.

    An empty or ``None`` selector matches everything (equality-based selectors only).
    """
    if not selector:
        return True
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(labels, Mapping):
        return False
    return all(labels.get(k) == v for k, v in selector.items())


class CacheMutationError(AssertionError):
    """A cached object was mutated in place (the caching contract was broken)."""


class MutationDetector:
    """Keeps a private deep copy of each cached object to catch in-place mutation.

    As client-go's ``cacheMutationDetector``: memory doubles, so it is meant for tests
    (enable with ``CBOP_CACHE_MUTATION_DETECTOR=true`` or ``Indexer(detect_mutations=True)``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._copies: dict[str, tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
        self._mutated: list[str] = []

    @staticmethod
    def enabled_by_env() -> bool:
        """Return whether ``CBOP_CACHE_MUTATION_DETECTOR`` asks for detection."""
        return os.environ.get(_DETECTOR_ENV, "").lower() in ("1", "true", "yes")

    def _retire_locked(self, key: str) -> None:
        entry = self._copies.pop(key, None)
        if entry is not None and entry[0] != entry[1]:
            self._mutated.append(key)

    def track(self, key: str, obj: Mapping[str, Any]) -> None:
        """Remember ``obj`` (stored under ``key``) and a deep copy of it.

        The object it replaces is compared with its copy first.
        """
        snapshot = copy.deepcopy(obj)
        with self._lock:
            self._retire_locked(key)
            self._copies[key] = (obj, snapshot)

    def forget(self, key: str) -> None:
        """Stop tracking ``key`` (the object left the cache), comparing it a last time."""
        with self._lock:
            self._retire_locked(key)

    def forget_all(self) -> None:
        """Stop tracking every object, comparing each a last time."""
        with self._lock:
            for key in list(self._copies):
                self._retire_locked(key)

    def check(self) -> None:
        """Compare every tracked (and every retired) object with its copy.

        Raises:
            CacheMutationError: naming the keys of mutated objects.
        """
        with self._lock:
            items = list(self._copies.items())
            mutated = list(self._mutated)
        mutated += [key for key, (obj, snap) in items if obj != snap]
        if mutated:
            raise CacheMutationError(
                "cached objects were mutated in place (deepcopy before changing): "
                f"{sorted(set(mutated))}"
            )


class Indexer:
    """A thread-safe store of objects by key, with named indexes (client-go's ``Indexer``).

    Args:
        indexers: extra named index functions; ``by_namespace`` is always added.
        detect_mutations: track deep copies to catch in-place mutation (see
            :class:`MutationDetector`); ``None`` reads ``CBOP_CACHE_MUTATION_DETECTOR``.

    All methods take one internal lock; reads return the stored objects themselves
    (see the module's caching contract). An index function that raises is logged and
    the object is filed under no value of that index.

    Raises:
        ValueError: an index name is given twice or ``by_namespace`` is redefined.
    """

    def __init__(
        self,
        indexers: Mapping[str, IndexFunc] | None = None,
        *,
        detect_mutations: bool | None = None,
    ) -> None:
        # Read by every reconcile (listers): a lock that does not convoy (cbop.locks).
        self._lock = YieldingLock(threading.RLock())
        self._items: dict[str, Mapping[str, Any]] = {}
        self._index_funcs: dict[str, IndexFunc] = {BY_NAMESPACE: index_by_namespace}
        for name, fn in (indexers or {}).items():
            if name in self._index_funcs:
                raise ValueError(f"index {name!r} is already defined")
            self._index_funcs[name] = fn
        # index name -> index value -> keys
        self._indices: dict[str, dict[str, set[str]]] = {n: {} for n in self._index_funcs}
        # key -> index name -> values the object was filed under
        self._filed: dict[str, dict[str, list[str]]] = {}
        self._resource_version = ""
        if detect_mutations is None:
            detect_mutations = MutationDetector.enabled_by_env()
        self._detector = MutationDetector() if detect_mutations else None

    # ------------------------------------------------------------- index plumbing

    def _values(self, name: str, fn: IndexFunc, obj: Mapping[str, Any]) -> _Strings:
        try:
            values = fn(obj)
        except Exception:  # a broken index must not break the cache
            log.exception("index function failed", index=name, key=meta_namespace_key(obj))
            return []
        if len(values) <= 1:
            return values if isinstance(values, list) else list(values)
        return list(dict.fromkeys(values))

    def _file_into(
        self,
        indices: dict[str, dict[str, set[str]]],
        filed_by_key: dict[str, dict[str, list[str]]],
        key: str,
        obj: Mapping[str, Any],
    ) -> None:
        filed: dict[str, list[str]] = {}
        for name, fn in self._index_funcs.items():
            values = self._values(name, fn, obj)
            filed[name] = values
            index = indices[name]
            for value in values:
                keys = index.get(value)
                if keys is None:
                    index[value] = {key}
                else:
                    keys.add(key)
        filed_by_key[key] = filed

    @staticmethod
    def _unfile_from(
        indices: dict[str, dict[str, set[str]]],
        filed_by_key: dict[str, dict[str, list[str]]],
        key: str,
    ) -> None:
        filed = filed_by_key.pop(key, None)
        if not filed:
            return
        for name, values in filed.items():
            index = indices[name]
            for value in values:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _file_locked(self, key: str, obj: Mapping[str, Any]) -> None:
        self._file_into(self._indices, self._filed, key, obj)

    def _unfile_locked(self, key: str) -> None:
        self._unfile_from(self._indices, self._filed, key)

    # ------------------------------------------------------------- writes

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add index functions, indexing the objects already stored.

        Raises:
            ValueError: an index with that name exists.
        """
        with self._lock:
            for name in indexers:
                if name in self._index_funcs:
                    raise ValueError(f"index {name!r} is already defined")
            for name, fn in indexers.items():
                self._index_funcs[name] = fn
                index: dict[str, set[str]] = {}
                self._indices[name] = index
                for key, obj in self._items.items():
                    values = self._values(name, fn, obj)
                    self._filed.setdefault(key, {})[name] = values
                    for value in values:
                        index.setdefault(value, set()).add(key)

    def update(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Store ``obj`` under its key (add or replace); return the previous object or None.

        Raises:
            ValueError: the object has no name.
        """
        key = meta_namespace_key(obj)
        with self._lock:
            old = self._items.get(key)
            if old is not None:
                self._unfile_locked(key)
            self._items[key] = obj
            self._file_locked(key, obj)
        if self._detector is not None:
            self._detector.track(key, obj)
        return old

    add = update

    def delete(
        self, obj_or_key: Mapping[str, Any] | DeletedFinalStateUnknown | str
    ) -> Mapping[str, Any] | None:
        """Remove an object (given as object, tombstone or key); return what was stored."""
        key = obj_or_key if isinstance(obj_or_key, str) else meta_namespace_key(obj_or_key)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._unfile_locked(key)
        if self._detector is not None:
            self._detector.forget(key)
        return old

    def replace(self, objs: Iterable[Mapping[str, Any]], resource_version: str) -> None:
        """Replace the whole content with ``objs`` and record ``resource_version``.

        Indexes are rebuilt. As client-go's ``Indexer.Replace``.

        Raises:
            ValueError: an object has no name.
        """
        self.replace_keyed(((meta_namespace_key(obj), obj) for obj in objs), resource_version)

    def replace_keyed(
        self, pairs: Iterable[tuple[str, Mapping[str, Any]]], resource_version: str
    ) -> None:
        """As :meth:`replace`, with the keys already computed: ``(key, obj)`` pairs."""
        items = dict(pairs)
        with self._lock:
            self._items = items
            self._indices = {name: {} for name in self._index_funcs}
            self._filed = {}
            for key, obj in items.items():
                self._file_locked(key, obj)
            self._resource_version = resource_version
        if self._detector is not None:
            self._detector.forget_all()
            for key, obj in items.items():
                self._detector.track(key, obj)

    def staging(self) -> IndexStaging:
        """Return an empty :class:`IndexStaging` that indexes with this indexer's functions."""
        return IndexStaging(self)

    def swap_in(self, staging: IndexStaging, resource_version: str) -> dict[str, Mapping[str, Any]]:
        """Replace the whole content with a filled :class:`IndexStaging`, atomically.

        Returns:
            The previous content, ``{key: object}``.
        """
        with self._lock:
            previous = self._items
            if staging.index_names != tuple(self._index_funcs):
                # Indexes were added while staging: file everything afresh.
                self._items = {}
                self.replace_keyed(staging.items.items(), resource_version)
            else:
                self._items = staging.items
                self._indices = staging.indices
                self._filed = staging.filed
                self._resource_version = resource_version
                if self._detector is not None:
                    self._detector.forget_all()
                    for key, obj in self._items.items():
                        self._detector.track(key, obj)
        staging.spent = True
        return previous

    def set_resource_version(self, resource_version: str) -> None:
        """Record the resourceVersion the content is current at."""
        with self._lock:
            self._resource_version = resource_version

    # ------------------------------------------------------------- reads

    @property
    def resource_version(self) -> str:
        """The resourceVersion of the last replace (or ``set_resource_version``)."""
        with self._lock:
            return self._resource_version

    def get_by_key(self, key: str) -> Mapping[str, Any] | None:
        """Return the object stored under ``key`` or None (shared; do not mutate)."""
        with self._lock:
            return self._items.get(key)

    def get(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """Return the object ``namespace/name`` (``name`` if namespace is None/empty)."""
        return self.get_by_key(key_of(namespace, name))

    def list(self) -> _Objects:
        """Return all stored objects (a new list of the shared objects)."""
        with self._lock:
            return list(self._items.values())

    def list_keys(self) -> _Strings:
        """Return all keys."""
        with self._lock:
            return list(self._items)

    def items(self) -> _Pairs:
        """Return all ``(key, object)`` pairs."""
        with self._lock:
            return list(self._items.items())

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def index_names(self) -> _Strings:
        """Return the names of the defined indexes."""
        with self._lock:
            return list(self._index_funcs)

    def _index(self, index_name: str) -> dict[str, set[str]]:
        """Return the named index (value -> keys); called with the lock held.

        Raises:
            KeyError: no such index.
        """
        index = self._indices.get(index_name)
        if index is None:
            raise KeyError(f"index {index_name!r} does not exist")
        return index

    def index_keys(self, index_name: str, value: str) -> _Strings:
        """Return the keys filed under ``value`` in index ``index_name``.

        Raises:
            KeyError: no such index.
        """
        with self._lock:
            index = self._index(index_name)
            return sorted(index.get(value, ()))

    def by_index(self, index_name: str, value: str) -> _Objects:
        """Return the objects filed under ``value`` in index ``index_name`` (key order).

        Raises:
            KeyError: no such index.
        """
        with self._lock:
            index = self._index(index_name)
            return [self._items[k] for k in sorted(index.get(value, ()))]

    def list_index_values(self, index_name: str) -> _Strings:
        """Return the values present in index ``index_name``.

        Raises:
            KeyError: no such index.
        """
        with self._lock:
            index = self._index(index_name)
            return sorted(index)

    def check_mutations(self) -> None:
        """Raise :class:`CacheMutationError` if a cached object was mutated in place.

        A no-op unless mutation detection is on.
        """
        if self._detector is not None:
            self._detector.check()


class IndexStaging:
    """The content of an :class:`Indexer` being built aside, to be swapped in at once.

    An informer fills one while a list streams in (indexing each object as it is
    decoded, off the critical path), then :meth:`Indexer.swap_in` replaces the cache
    with it in one step. Not thread-safe: one thread fills it.
    """

    def __init__(self, indexer: Indexer) -> None:
        self._indexer = indexer
        self.index_names = tuple(indexer.index_names())
        self.items: dict[str, Mapping[str, Any]] = {}
        self.indices: dict[str, dict[str, set[str]]] = {n: {} for n in self.index_names}
        self.filed: dict[str, dict[str, list[str]]] = {}
        self.spent = False

    def add(self, key: str, obj: Mapping[str, Any]) -> None:
        """Stage ``obj`` under ``key`` (a later object with the same key wins)."""
        if self.spent:
            raise RuntimeError("this staging was already swapped in")
        if key in self.items:
            Indexer._unfile_from(self.indices, self.filed, key)
        self.items[key] = obj
        self._indexer._file_into(self.indices, self.filed, key, obj)

    def __len__(self) -> int:
        return len(self.items)


class Lister:
    """A read-only view of an :class:`Indexer`, as client-go's generated listers.

    Returned objects are the cached ones: never mutate them (``copy.deepcopy`` first).
    """

    def __init__(self, indexer: Indexer) -> None:
        self._indexer = indexer

    def get(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """Return the object ``namespace/name`` or None (``namespace=None``: cluster-scoped)."""
        return self._indexer.get(namespace, name)

    def list(
        self,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | None = None,
    ) -> _Objects:
        """Return cached objects, optionally of one namespace and matching labels.

        Args:
            namespace: only this namespace (``None``: all namespaces); uses the
                ``by_namespace`` index.
            label_selector: equality selector; every ``key: value`` must be a label of
                the object (``None``/empty: all).
        """
        objs = (
            self._indexer.list()
            if namespace is None
            else self._indexer.by_index(BY_NAMESPACE, namespace)
        )
        if not label_selector:
            return objs
        return [o for o in objs if matches_labels(o, label_selector)]

    def by_index(self, index_name: str, value: str) -> _Objects:
        """Return the objects filed under ``value`` in index ``index_name``.

        Raises:
            KeyError: no such index.
        """
        return self._indexer.by_index(index_name, value)

    def list_keys(self) -> _Strings:
        """Return all cache keys."""
        return self._indexer.list_keys()

    def __len__(self) -> int:
        return len(self._indexer)
