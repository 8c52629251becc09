"""A reconciler's own recent writes, remembered until its informer cache shows them.

The watch event of a write reaches the cache some time after the write's answer. A
reconcile in between (the key queued again by an earlier event) reads the object as it
was before the write, and would decide, and write, the same thing again: a duplicate
write, and for a status a new ``lastTransitionTime``. :class:`OwnWrites` remembers, per
object key, what the reconciler wrote and the resourceVersions around the write; while
the cached object is the version the write was computed from, or older than the
version the write produced, :meth:`OwnWrites.pending` hands back what was written, and
the reconciler compares with that instead of the stale cache. Once the cache holds the
written version or a newer one, the entry is dropped.

This is client-go's controller expectations idea, keyed by resourceVersion instead of
counts; it relies on resourceVersions being ordered (KEP-5504, Kubernetes 1.35), and
where two cannot be ordered it falls back to the version the write was based on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import cachetools

from cbop.locks import YieldingLock, absent
from cbop.resourceversion import is_older

__all__ = ["DEFAULT_TTL", "OwnWrites"]

#: Seconds a write is remembered at most (a bound on memory: a cache update newer than
#: the write makes the entry moot at once).
DEFAULT_TTL: Final = 300.0

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class _Entry(Generic[V]):
    uid: str
    based_on: str
    written: str
    value: V


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = (obj or {}).get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class OwnWrites(Generic[V]):
    """Remembers the last write per object key until the cache has caught up with it.

    Args:
        ttl: seconds an entry lives at most.
        maxsize: entries at most (least recently used go first).

    Thread-safe. A lookup that misses takes no lock (see :func:`cbop.locks.absent`):
    the common case, every key but the few just written.
    """

    def __init__(self, *, ttl: float = DEFAULT_TTL, maxsize: int = 100_000) -> None:
        self._entries: cachetools.TTLCache[str, _Entry[V]] = cachetools.TTLCache(
            maxsize=maxsize, ttl=ttl
        )
        self._lock = YieldingLock()

    def record(
        self,
        key: str,
        before: Mapping[str, Any],
        written: Mapping[str, Any] | None,
        value: V,
    ) -> None:
        """Remember that ``value`` was written to the object ``key``.

        Args:
            key: the object's key (``namespace/name``).
            before: the cached object the write was decided from (its uid and
                resourceVersion are kept).
            written: the API server's answer to the write (its resourceVersion is
                kept), or None when there is none (a PATCH whose answer was not read).
            value: what was written, as the reconciler wants it back.
        """
        meta = _meta(before)
        entry = _Entry(
            str(meta.get("uid") or ""),
            str(meta.get("resourceVersion") or ""),
            str(_meta(written).get("resourceVersion") or ""),
            value,
        )
        with self._lock:
            self._entries[key] = entry

    def pending(self, key: str, cached: Mapping[str, Any]) -> V | None:
        """Return what was written to ``key`` if ``cached`` does not show it yet, else None.

        Not shown yet: ``cached`` is the same object (uid) and either the very version
        the write was decided from, or older than the version the write produced. An
        entry that no longer applies (the cache caught up, the object was recreated) is
        dropped.
        """
        if absent(self._entries, key):
            return None
        meta = _meta(cached)
        rv = str(meta.get("resourceVersion") or "")
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry.uid == str(meta.get("uid") or "") and (
                (rv and rv == entry.based_on) or (entry.written and is_older(rv, entry.written))
            ):
                return entry.value
            del self._entries[key]
        return None

    def written_version(self, key: str, cached: Mapping[str, Any]) -> str | None:
        """Return the resourceVersion the last write to ``key`` produced, or None.

        Only while ``cached`` is the very version that write was decided from (same
        uid and resourceVersion), and only when the write's answer was read.
        """
        if absent(self._entries, key):
            return None
        meta = _meta(cached)
        with self._lock:
            entry = self._entries.get(key)
        if (
            entry is None
            or entry.uid != str(meta.get("uid") or "")
            or entry.based_on != str(meta.get("resourceVersion") or "")
        ):
            return None
        return entry.written or None

    def forget(self, key: str) -> None:
        """Drop what was remembered of ``key`` (the object is gone)."""
        if absent(self._entries, key):
            return
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
