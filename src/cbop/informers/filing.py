"""Filing objects into index tables: the bookkeeping behind every index of the cache.

This module owns how a cached object's key is filed into a set of named indexes, and
taken out again, as client-go's ``threadSafeMap`` keeps its ``indices``. The tables are
plain dicts held by their owner:

* ``indices`` (:data:`Indices`): index name -> index value -> the keys filed under it
  (a :data:`Bucket`: the one key itself, or a set of two or more: most values of a
  per-object index name one object, and a set costs several times its key);
* ``filed`` (:data:`Filed`): key -> the values that key was filed under, one entry per
  index in the order of ``indices`` (:data:`Filing`: None, the one value, or a tuple),
  so that it can be unfiled without the object (which may have changed since). A
  tuple, not a dict of lists: every cached object has one.

Used by :class:`cbop.informers.indexer.Indexer` for its live tables and by
:class:`cbop.informers.staging.IndexStaging` for the tables of a list being built aside.
Not thread-safe: the owner holds its lock around every call.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import structlog

from cbop.informers.indexfuncs import IndexFunc
from cbop.informers.tombstone import meta_namespace_key

__all__ = [
    "Bucket",
    "Filed",
    "Filing",
    "Indices",
    "bucket_keys",
    "file_into",
    "file_key",
    "filing_of",
    "filing_values",
    "index_values",
    "unfile_from",
]

#: The keys filed under one index value: one key, or a set of two or more.
Bucket = str | set[str]
#: index name -> index value -> keys.
Indices = dict[str, dict[str, Bucket]]
#: The values a key was filed under in one index: none, one, or a tuple of two or more.
Filing = str | tuple[str, ...] | None
#: key -> per index, in the order of :data:`Indices`, the values it was filed under
#: (``()`` when it was filed under none).
Filed = dict[str, tuple[Filing, ...]]

log = structlog.get_logger("cbop.informers")


def filing_values(filing: Filing) -> tuple[str, ...]:
    """Return the values of one index's :data:`Filing` entry, as a tuple."""
    if filing is None:
        return ()
    if isinstance(filing, str):
        return (filing,)
    return filing


def filing_of(values: tuple[str, ...]) -> Filing:
    """Return the :data:`Filing` entry of ``values`` (see :func:`filing_values`)."""
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def bucket_keys(bucket: Bucket | None) -> Collection[str]:
    """Return the keys of an index bucket (``()`` for None), as a collection."""
    if bucket is None:
        return ()
    if isinstance(bucket, str):
        return (bucket,)
    return bucket


def index_values(name: str, fn: IndexFunc, obj: Mapping[str, Any]) -> tuple[str, ...]:
    """Return the values index function ``fn`` (of index ``name``) files ``obj`` under.

    Repeated values are dropped (first occurrence kept); a tuple, smaller than a list.
    An index function that raises is logged and the object is filed under no value of
    that index: a broken index must not break the cache.
    """
    try:
        values = fn(obj)
    except Exception:  # a broken index must not break the cache
        log.exception("index function failed", index=name, key=meta_namespace_key(obj))
        return ()
    if not values:
        return ()
    if len(values) == 1:
        return (values[0],)
    return tuple(dict.fromkeys(values))


def file_key(index: dict[str, Bucket], value: str, key: str) -> None:
    """File ``key`` under ``value`` in ``index`` (one table of :data:`Indices`)."""
    keys = index.get(value)
    if keys is None:
        index[value] = key
    elif isinstance(keys, str):
        if keys != key:
            index[value] = {keys, key}
    else:
        keys.add(key)


def file_into(
    index_funcs: Mapping[str, IndexFunc],
    indices: Indices,
    filed_by_key: Filed,
    key: str,
    obj: Mapping[str, Any],
) -> None:
    """File ``key`` under the values each of ``index_funcs`` gives for ``obj``.

    ``indices`` must have a table for every name of ``index_funcs``, in the same
    order (``KeyError`` otherwise); the values are recorded in ``filed_by_key[key]``,
    replacing what it held (unfile the key first when it was filed already).
    """
    filed: list[Filing] = []
    for name, fn in index_funcs.items():
        values = index_values(name, fn, obj)
        filed.append(filing_of(values))
        index = indices[name]
        for value in values:
            file_key(index, value, key)
    filed_by_key[key] = tuple(filed) if any(v is not None for v in filed) else ()


def unfile_from(indices: Indices, filed_by_key: Filed, key: str) -> None:
    """Take ``key`` out of every index it was filed in, dropping values left without keys.

    A key that was never filed is ignored.
    """
    filed = filed_by_key.pop(key, None)
    if not filed:
        return
    for index, filing in zip(indices.values(), filed, strict=False):
        for value in filing_values(filing):
            keys = index.get(value)
            if keys is None:
                continue
            if isinstance(keys, str):
                if keys == key:
                    del index[value]
                continue
            keys.discard(key)
            if len(keys) == 1:
                index[value] = next(iter(keys))
            elif not keys:
                del index[value]
