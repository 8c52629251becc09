"""The cache mutation detector: catches cached objects changed in place.

This module owns :class:`MutationDetector` and the :class:`CacheMutationError` it
raises, which enforce the caching contract of :mod:`cbop.informers.indexer` (cached
objects are shared and must never be mutated) in tests, like client-go's
``KUBE_CACHE_MUTATION_DETECTOR``: with ``CBOP_CACHE_MUTATION_DETECTOR=true`` in the
environment (or ``Indexer(detect_mutations=True)``) the
:class:`~cbop.informers.indexer.Indexer` keeps a private deep copy of every stored
object, and :meth:`~cbop.informers.indexer.Indexer.check_mutations` names any object
that was changed in place. It is off by default (it doubles memory).
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["CacheMutationError", "MutationDetector"]

_DETECTOR_ENV: Final = "CBOP_CACHE_MUTATION_DETECTOR"


class CacheMutationError(AssertionError):
    """A cached object was mutated in place (the caching contract was broken)."""


class MutationDetector:
    """Keeps a private deep copy of each cached object to catch in-place mutation.

    As client-go's ``cacheMutationDetector``: memory doubles, so it is meant for tests
    (enable with ``CBOP_CACHE_MUTATION_DETECTOR=true`` or ``Indexer(detect_mutations=True)``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._copies: dict[str, tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
        self._mutated: list[str] = []

    @staticmethod
    def enabled_by_env() -> bool:
        """Return whether ``CBOP_CACHE_MUTATION_DETECTOR`` asks for detection."""
        return os.environ.get(_DETECTOR_ENV, "").lower() in ("1", "true", "yes")

    def _retire_locked(self, key: str) -> None:
        entry = self._copies.pop(key, None)
        if entry is not None and entry[0] != entry[1]:
            self._mutated.append(key)

    def track(self, key: str, obj: Mapping[str, Any]) -> None:
        """Remember ``obj`` (stored under ``key``) and a deep copy of it.

        The object it replaces is compared with its copy first.
        """
        snapshot = copy.deepcopy(obj)
        with self._lock:
            self._retire_locked(key)
            self._copies[key] = (obj, snapshot)

    def forget(self, key: str) -> None:
        """Stop tracking ``key`` (the object left the cache), comparing it a last time."""
        with self._lock:
            self._retire_locked(key)

    def forget_all(self) -> None:
        """Stop tracking every object, comparing each a last time."""
        with self._lock:
            for key in list(self._copies):
                self._retire_locked(key)

    def check(self) -> None:
        """Compare every tracked (and every retired) object with its copy.

        Raises:
            CacheMutationError: naming the keys of mutated objects.
        """
        with self._lock:
            items = list(self._copies.items())
            mutated = list(self._mutated)
        mutated += [key for key, (obj, snap) in items if obj != snap]
        if mutated:
            raise CacheMutationError(
                "cached objects were mutated in place (deepcopy before changing): "
                f"{sorted(set(mutated))}"
            )
