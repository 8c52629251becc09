"""The staging area of the informer cache: a full list indexed aside, swapped in at once.

This module owns :class:`IndexStaging`, which the reflector fills while a list streams
in (indexing each object as it is decoded, off the critical path) and the shared
informer hands to :meth:`cbop.informers.indexer.Indexer.swap_in`, which replaces the
cache with it in one step (client-go's ``Replace`` builds its new content aside too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cbop.informers.filing import Filed, Indices, file_into, unfile_from
from cbop.informers.indexfuncs import IndexFunc

__all__ = ["IndexStaging"]


class IndexStaging:
    """The content of an :class:`~cbop.informers.indexer.Indexer` being built aside.

    Made by :meth:`Indexer.staging <cbop.informers.indexer.Indexer.staging>`, filled
    with :meth:`add`, then swapped in whole by :meth:`Indexer.swap_in
    <cbop.informers.indexer.Indexer.swap_in>`. Not thread-safe: one thread fills it.

    Args:
        index_funcs: the indexer's index functions (name -> function), the very
            mapping the indexer holds: each :meth:`add` files with the functions it has
            then. The staging has a table for each name it had when made.

    Attributes:
        index_names: the names of the indexes when the staging was made.
        items: the staged objects, ``{key: object}``.
        indices: the staged index tables (see :mod:`cbop.informers.filing`).
        filed: what each staged key was filed under.
        spent: whether it was swapped in (it then takes no more objects).
    """

    def __init__(self, index_funcs: Mapping[str, IndexFunc]) -> None:
        self._index_funcs = index_funcs
        self.index_names = tuple(index_funcs)
        self.items: dict[str, Mapping[str, Any]] = {}
        self.indices: Indices = {n: {} for n in self.index_names}
        self.filed: Filed = {}
        self.spent = False

    def add(self, key: str, obj: Mapping[str, Any]) -> None:
        """Stage ``obj`` under ``key`` (a later object with the same key wins).

        Raises:
            RuntimeError: the staging was already swapped in.
        """
        if self.spent:
            raise RuntimeError("this staging was already swapped in")
        if key in self.items:
            unfile_from(self.indices, self.filed, key)
        self.items[key] = obj
        file_into(self._index_funcs, self.indices, self.filed, key, obj)

    def __len__(self) -> int:
        return len(self.items)
