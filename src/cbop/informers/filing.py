"""Filing objects into index tables: the bookkeeping behind every index of the cache.

This module owns how a cached object's key is filed into a set of named indexes, and
taken out again, as client-go's ``threadSafeMap`` keeps its ``indices``. The tables are
plain dicts held by their owner:

* ``indices`` (:data:`Indices`): index name -> index value -> the keys filed under it;
* ``filed`` (:data:`Filed`): key -> index name -> the values that key was filed under,
  so that it can be unfiled without the object (which may have changed since).

Used by :class:`cbop.informers.indexer.Indexer` for its live tables and by
:class:`cbop.informers.staging.IndexStaging` for the tables of a list being built aside.
Not thread-safe: the owner holds its lock around every call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from cbop.informers.indexfuncs import IndexFunc
from cbop.informers.tombstone import meta_namespace_key

__all__ = ["Filed", "Indices", "file_into", "index_values", "unfile_from"]

#: index name -> index value -> keys.
Indices = dict[str, dict[str, set[str]]]
#: key -> index name -> values the object was filed under.
Filed = dict[str, dict[str, list[str]]]

log = structlog.get_logger("cbop.informers")


def index_values(name: str, fn: IndexFunc, obj: Mapping[str, Any]) -> list[str]:
    """Return the values index function ``fn`` (of index ``name``) files ``obj`` under.

    Repeated values are dropped (first occurrence kept). An index function that raises
    is logged and the object is filed under no value of that index: a broken index must
    not break the cache.
    """
    try:
        values = fn(obj)
    except Exception:  # a broken index must not break the cache
        log.exception("index function failed", index=name, key=meta_namespace_key(obj))
        return []
    if len(values) <= 1:
        return values if isinstance(values, list) else list(values)
    return list(dict.fromkeys(values))


def file_into(
    index_funcs: Mapping[str, IndexFunc],
    indices: Indices,
    filed_by_key: Filed,
    key: str,
    obj: Mapping[str, Any],
) -> None:
    """File ``key`` under the values each of ``index_funcs`` gives for ``obj``.

    ``indices`` must have a table for every name of ``index_funcs`` (``KeyError``
    otherwise); the values are recorded in ``filed_by_key[key]``, replacing what it
    held (unfile the key first when it was filed already).
    """
    filed: dict[str, list[str]] = {}
    for name, fn in index_funcs.items():
        values = index_values(name, fn, obj)
        filed[name] = values
        index = indices[name]
        for value in values:
            keys = index.get(value)
            if keys is None:
                index[value] = {key}
            else:
                keys.add(key)
    filed_by_key[key] = filed


def unfile_from(indices: Indices, filed_by_key: Filed, key: str) -> None:
    """Take ``key`` out of every index it was filed in, dropping values left without keys.

    A key that was never filed is ignored.
    """
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
