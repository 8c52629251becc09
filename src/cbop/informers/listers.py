"""Listers: the read-only views of the informer cache that controllers read from.

This module owns :class:`Lister`, the view of one informer's
:class:`~cbop.informers.indexer.Indexer` (as client-go's generated listers), and
:class:`MultiNamespaceLister`, one view over several informers. An operator restricted
to some namespaces runs one informer per namespace (a list/watch in each), as
controller-runtime's multi-namespace cache; :class:`MultiNamespaceLister` puts their
:class:`Lister` s behind the same ``get``, ``list`` and ``by_index`` a single lister
offers. Informers hand out the first (:meth:`cbop.informers.SharedInformer.lister`),
:class:`cbop.informers.SharedInformerFactory` the second. The objects are the cached
ones: do not mutate them (see :mod:`cbop.informers.indexer`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from cbop.informers.indexer import Indexer
from cbop.informers.indexfuncs import matches_labels
from cbop.keys import BY_NAMESPACE

__all__ = ["Lister", "MultiNamespaceLister", "NamespaceLister"]

# Aliases for annotations inside a class whose ``list`` method shadows the builtin.
_Objects = list[Mapping[str, Any]]
_Strings = list[str]


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

    def index_keys(self, index_name: str, value: str) -> _Strings:
        """Return the keys (``namespace/name``) filed under ``value`` in ``index_name``, sorted.

        Raises:
            KeyError: no such index.
        """
        return self._indexer.index_keys(index_name, value)

    def index_count(self, index_name: str, value: str) -> int:
        """Return how many objects are filed under ``value`` in index ``index_name``.

        Raises:
            KeyError: no such index.
        """
        return self._indexer.index_count(index_name, value)

    def list_keys(self) -> _Strings:
        """Return all cache keys."""
        return self._indexer.list_keys()

    def __len__(self) -> int:
        return len(self._indexer)


class NamespaceLister(Protocol):
    """What :class:`MultiNamespaceLister` reads of each lister (a ``Lister`` has it)."""

    def get(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """Return the cached object or None."""
        ...

    def by_index(self, index_name: str, value: str) -> list[Mapping[str, Any]]:
        """Return the cached objects filed under ``value`` in index ``index_name``."""
        ...

    def index_keys(self, index_name: str, value: str) -> list[str]:
        """Return the keys filed under ``value`` in index ``index_name``."""
        ...

    def index_count(self, index_name: str, value: str) -> int:
        """Return how many objects are filed under ``value`` in index ``index_name``."""
        ...

    def list(self) -> list[Mapping[str, Any]]:
        """Return every cached object."""
        ...


class MultiNamespaceLister:
    """One read-only view over the listers of several per-namespace informers.

    Args:
        listers: namespace -> lister; the key ``None`` stands for "all namespaces"
            (the informer of a cluster-wide scope).
    """

    def __init__(self, listers: Mapping[str | None, NamespaceLister]) -> None:
        self._listers = dict(listers)

    def get(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """Return the cached object or None (also when the namespace is out of scope)."""
        lister = self._listers.get(namespace) or self._listers.get(None)
        if lister is None:
            return None
        return lister.get(namespace, name)

    def by_index(self, index_name: str, value: str) -> list[Mapping[str, Any]]:
        """Return objects of every namespace whose index ``index_name`` yields ``value``.

        Raises:
            KeyError: a lister has no index ``index_name``.
        """
        out: list[Mapping[str, Any]] = []
        for lister in self._listers.values():
            out.extend(lister.by_index(index_name, value))
        return out

    def index_keys(self, index_name: str, value: str) -> list[str]:
        """Return the keys of every namespace filed under ``value`` in index ``index_name``.

        Raises:
            KeyError: a lister has no index ``index_name``.
        """
        out: list[str] = []
        for lister in self._listers.values():
            out.extend(lister.index_keys(index_name, value))
        return out

    def index_count(self, index_name: str, value: str) -> int:
        """Return how many objects of every namespace are filed under ``value`` in ``index_name``.

        Raises:
            KeyError: a lister has no index ``index_name``.
        """
        return sum(lister.index_count(index_name, value) for lister in self._listers.values())

    def list(self) -> list[Mapping[str, Any]]:
        """Return every cached object of every namespace."""
        out: list[Mapping[str, Any]] = []
        for lister in self._listers.values():
            out.extend(lister.list())
        return out
