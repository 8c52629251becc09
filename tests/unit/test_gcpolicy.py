"""freeze_caches: what is alive at the cache sync is no longer scanned, and still freed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from cbop.gcpolicy import freeze_caches, freeze_startup


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


class Entry:
    """A cached object (weak-referenceable)."""


def test_objects_alive_at_the_sync_are_frozen_and_later_ones_are_not() -> None:
    cache = [{"metadata": {"name": f"b{i}"}} for i in range(1000)]
    freeze_caches()
    frozen = gc.get_freeze_count()
    assert frozen >= len(cache)
    later = [{"n": [i]} for i in range(10)]
    scanned = {id(o) for generation in range(3) for o in gc.get_objects(generation=generation)}
    assert not any(id(x) in scanned for x in cache)
    assert all(id(x) in scanned for x in later)
    assert gc.get_freeze_count() == frozen


def test_a_frozen_object_is_still_freed_when_its_last_reference_goes() -> None:
    entry = Entry()
    gone: list[bool] = []
    weakref.finalize(entry, gone.append, True)
    freeze_caches()
    del entry
    assert gone == [True]


class Node:
    """One half of a reference cycle."""

    other: Node | None = None


def _garbage_cycle(gone: list[bool]) -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a
    weakref.finalize(a, gone.append, True)


@pytest.mark.parametrize("collect", [True, False])
def test_the_collection_before_the_freeze_can_be_skipped(collect: bool) -> None:
    gone: list[bool] = []
    was_enabled = gc.isenabled()
    gc.disable()  # no automatic collection between making the garbage and the freeze
    try:
        _garbage_cycle(gone)
        freeze_caches(collect=collect)
        gc.collect()
    finally:
        if was_enabled:
            gc.enable()
    # Collected before the freeze, or frozen with it and then out of every collection's
    # reach: the price of skipping the collection, which only a fresh start pays.
    assert gone == ([True] if collect else [])


def test_freeze_startup_collects_and_freezes_what_is_alive() -> None:
    gone: list[bool] = []
    gc.disable()
    try:
        _garbage_cycle(gone)
        kept = [{"imported": i} for i in range(100)]
        freeze_startup()
    finally:
        gc.enable()
    assert gone == [True]
    assert gc.get_freeze_count() >= len(kept)
