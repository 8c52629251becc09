"""freeze_caches: what is alive at the cache sync is no longer scanned, and still freed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from cbop.gcpolicy import freeze_caches


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
