"""Listers over several informers: one read-only view of a resource across scopes.

An operator restricted to some namespaces runs one informer per namespace (a list/watch
in each), as controller-runtime's multi-namespace cache; :class:`MultiNamespaceLister`
puts their :class:`~cbop.informers.indexer.Lister` s behind the same ``get``,
``list`` and ``by_index`` a single lister offers. The objects are the cached ones: do
not mutate them (see :mod:`cbop.informers.indexer`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["MultiNamespaceLister", "NamespaceLister"]


class NamespaceLister(Protocol):
    """What :class:`MultiNamespaceLister` reads of each lister (a ``Lister`` has it)."""

    def get(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """Return the cached object or None."""
        ...

    def by_index(self, index_name: str, value: str) -> list[Mapping[str, Any]]:
        """Return the cached objects filed under ``value`` in index ``index_name``."""
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

    def list(self) -> list[Mapping[str, Any]]:
        """Return every cached object of every namespace."""
        out: list[Mapping[str, Any]] = []
        for lister in self._listers.values():
            out.extend(lister.list())
        return out
