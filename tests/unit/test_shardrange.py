"""The shard hash and ranges match the API server's (apimachinery ``sharding``)."""

from __future__ import annotations

import itertools
import random

import pytest

from cbop.shardrange import ShardRange, fnv1a64, shard_of, shard_ranges

# Printed by Go's hash/fnv New64a, which apimachinery's sharding.HashField uses.
GO_FNV1A64 = {
    "": 0xCBF29CE484222325,
    "default": 0xEBADA5168620C5FE,
    "kube-system": 0xDF65C7BC1D82B35E,
    "team-a": 0xDE90A3717D1252D6,
    "ns-0001": 0x2791067B635E866E,
    "élan": 0xBE4E840E64014224,
}


@pytest.mark.parametrize(("value", "expected"), GO_FNV1A64.items())
def test_hash_matches_go(value: str, expected: int) -> None:
    assert fnv1a64(value) == expected


@pytest.mark.parametrize("count", [1, 2, 3, 5, 7, 16])
def test_ranges_tile_the_hash_space(count: int) -> None:
    ranges = shard_ranges(count)
    assert ranges[0].start == 0
    assert ranges[-1].end == 1 << 64
    for left, right in itertools.pairwise(ranges):
        assert left.end == right.start
        assert left.start < left.end


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shard_of_agrees_with_contains(count: int) -> None:
    ranges = shard_ranges(count)
    rng = random.Random(count)
    names = [f"ns-{rng.randrange(10**9)}" for _ in range(500)] + list(GO_FNV1A64)
    for name in names:
        holders = [r.index for r in ranges if r.contains(name)]
        assert holders == [shard_of(name, count)]


def test_selector_uses_the_servers_hex_form() -> None:
    assert ShardRange.of(0, 2).selector() == (
        "shardRange(object.metadata.namespace, '0x0000000000000000', '0x8000000000000000')"
    )
    assert ShardRange.of(1, 2).selector().endswith("'0x8000000000000000', '0x10000000000000000')")
    assert ShardRange.of(0, 1).everything
    assert not ShardRange.of(0, 2).everything


@pytest.mark.parametrize(("index", "count"), [(0, 0), (-1, 2), (2, 2)])
def test_bad_shards_are_refused(index: int, count: int) -> None:
    with pytest.raises(ValueError, match="shard"):
        ShardRange.of(index, count)
