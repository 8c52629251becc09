"""The informer cache: a thread-safe store of objects by key, with named indexes.

This module owns :class:`Indexer`, the cache behind every informer, after client-go's
``threadSafeMap`` and ``Indexer``: the shared informer writes it, controllers read it
through a :class:`~cbop.informers.listers.Lister`. Its parts are the modules beside it:
keys (:mod:`cbop.informers.tombstone`), index functions and tables
(:mod:`cbop.informers.indexfuncs`, :mod:`cbop.informers.filing`), and the staging of a
full list (:mod:`cbop.informers.staging`).

The caching contract: **cached objects are shared, never copied, and must not be
mutated** (as client-go's listers): a caller that changes one takes a
``copy.deepcopy`` first. A copy or a frozen wrapper per read would cost more than the
read (about 30 us per 1 KiB ConfigMap). Tests hold the contract with the mutation
detector (:mod:`cbop.informers.mutation`, ``CBOP_CACHE_MUTATION_DETECTOR=true``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from cbop.informers.filing import Filed, Indices, file_into, index_values, unfile_from
from cbop.informers.indexfuncs import IndexFunc, index_by_namespace
from cbop.informers.mutation import MutationDetector
from cbop.informers.staging import IndexStaging
from cbop.informers.tombstone import DeletedFinalStateUnknown, meta_namespace_key
from cbop.keys import BY_NAMESPACE, key_of
from cbop.locks import YieldingLock

__all__ = ["Indexer"]

# Aliases for annotations inside a class whose ``list`` method shadows the builtin.
_Objects = list[Mapping[str, Any]]
_Strings = list[str]
_Pairs = list[tuple[str, Mapping[str, Any]]]


class Indexer:
    """A thread-safe store of objects by key, with named indexes (client-go's ``Indexer``).

    Args:
        indexers: extra named index functions; ``by_namespace`` is always added.
        detect_mutations: track deep copies to catch in-place mutation (see
            :class:`~cbop.informers.mutation.MutationDetector`); ``None`` reads
            ``CBOP_CACHE_MUTATION_DETECTOR``.

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
        self._indices: Indices = {n: {} for n in self._index_funcs}
        # key -> index name -> values the object was filed under
        self._filed: Filed = {}
        self._resource_version = ""
        if detect_mutations is None:
            detect_mutations = MutationDetector.enabled_by_env()
        self._detector = MutationDetector() if detect_mutations else None

    # ------------------------------------------------------------- index plumbing

    def _file_locked(self, key: str, obj: Mapping[str, Any]) -> None:
        file_into(self._index_funcs, self._indices, self._filed, key, obj)

    def _unfile_locked(self, key: str) -> None:
        unfile_from(self._indices, self._filed, key)

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
                    values = index_values(name, fn, obj)
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
        with self._lock:
            return IndexStaging(self._index_funcs)

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

    def index_count(self, index_name: str, value: str) -> int:
        """Return how many objects are filed under ``value`` in index ``index_name``.

        The length of :meth:`index_keys`, without copying or sorting them: a count that
        does not grow with the objects filed.

        Raises:
            KeyError: no such index.
        """
        with self._lock:
            return len(self._index(index_name).get(value, ()))

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
        """Raise ``CacheMutationError`` if a cached object was mutated in place.

        A no-op unless mutation detection is on (:mod:`cbop.informers.mutation`).
        """
        if self._detector is not None:
            self._detector.check()
