"""Shard ranges over the API server's shard hash (KEP-5866, ``ShardedListAndWatch``).

Kubernetes 1.36 lets a list or watch ask for a slice of a collection with
``?shardSelector=shardRange(object.metadata.namespace, '0x…', '0x…')``: the server hashes
the named field with 64-bit FNV-1a and keeps objects whose hash ``h`` satisfies
``start <= h < end``; a list answer echoes the selector in ``metadata.shardInfo``.
Bounds are ``0x``-prefixed, zero-padded 16-digit lowercase hex, except the upper bound
2**64, written ``0x10000000000000000`` (as apimachinery's ``sharding.HexLess`` expects).

cbop shards by namespace: a ConfigBundle and the ConfigMap it owns share a namespace, so
they always land in the same shard (a uid shard key would split them). This module is
pure: the same hash serves the server-side selector and the client-side filter used when
a server ignores the selector.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["SHARD_FIELD", "ShardRange", "fnv1a64", "shard_of", "shard_ranges"]

#: The field cbop shards on (one of the two the API server accepts).
SHARD_FIELD = "object.metadata.namespace"

_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1
_SPACE = 1 << 64


def fnv1a64(value: str) -> int:
    """Return the 64-bit FNV-1a hash of ``value``'s UTF-8 bytes (Go's ``hash/fnv`` New64a).

    Returns:
        An int in ``[0, 2**64)``; the API server's ``sharding.HashField`` prints the same
        number as 16 hex digits.
    """
    h = _FNV64_OFFSET
    for byte in value.encode():
        h = ((h ^ byte) * _FNV64_PRIME) & _MASK64
    return h


def _hex(bound: int) -> str:
    return f"0x{bound:016x}"


@dataclass(frozen=True, order=True)
class ShardRange:
    """Shard ``index`` of ``count``: the hash interval ``[start, end)``.

    Attributes:
        index: 0-based shard number.
        count: how many shards the hash space is cut into (>= 1).
        start, end: the interval's bounds, ``0 <= start < end <= 2**64``.
        by_name: the range applies to an object's own *name*, not its namespace (the
            shard's slice of the Namespaces: :meth:`by_object_name`); the API server
            has no selector for that, so no ``shardSelector`` is sent.
    """

    index: int
    count: int
    start: int
    end: int
    by_name: bool = False

    @classmethod
    def of(cls, index: int, count: int) -> ShardRange:
        """Return shard ``index`` of ``count`` equal slices of the hash space.

        Raises:
            ValueError: ``count < 1`` or ``index`` outside ``[0, count)``.
        """
        if count < 1:
            raise ValueError(f"shard count must be at least 1, got {count}")
        if not 0 <= index < count:
            raise ValueError(f"shard index {index} is outside [0, {count})")
        return cls(index, count, index * _SPACE // count, (index + 1) * _SPACE // count)

    def by_object_name(self) -> ShardRange:
        """Return the same range applied to objects' names (a Namespace's own name).

        So a shard holds the Namespace objects of the namespaces it serves: the same
        FNV-1a range, keyed by ``metadata.name``.
        """
        return dataclasses.replace(self, by_name=True)

    @property
    def everything(self) -> bool:
        """Whether the range is the whole hash space (one shard: no selector needed)."""
        return self.start == 0 and self.end == _SPACE

    def selector(self) -> str:
        """Return the ``shardSelector`` query value.

        E.g. ``shardRange(object.metadata.namespace, '0x0000000000000000',
        '0x5555555555555555')`` for shard 0 of 3.
        """
        return f"shardRange({SHARD_FIELD}, '{_hex(self.start)}', '{_hex(self.end)}')"

    def contains(self, namespace: str) -> bool:
        """Whether an object in ``namespace`` belongs to this shard (the client-side filter)."""
        return self.everything or self.start <= fnv1a64(namespace) < self.end

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_ranges(count: int) -> list[ShardRange]:
    """Return the ``count`` shards that together cover the hash space exactly once.

    Raises:
        ValueError: ``count < 1``.
    """
    if count < 1:
        raise ValueError(f"shard count must be at least 1, got {count}")
    return [ShardRange.of(i, count) for i in range(count)]


def shard_of(namespace: str, count: int) -> int:
    """Return the index of the shard of ``count`` that objects in ``namespace`` fall in.

    Raises:
        ValueError: ``count < 1``.
    """
    if count < 1:
        raise ValueError(f"shard count must be at least 1, got {count}")
    return fnv1a64(namespace) * count >> 64
