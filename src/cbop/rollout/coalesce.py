"""Coalescing: ConfigMaps changed together roll a workload once.

This module owns :class:`ChangeCoalescer`, a bounded trailing-edge debounce per
workload key, and :func:`configmap_mapper`, the map function of the rollout
controllers' ConfigMap watch, which tells the coalescer of each change as it maps a
ConfigMap to the workloads that read it. While changes are that fresh the reconciler
defers its apply (``requeue_after``), so two bundles applied at once, or a ConfigMap
deleted and created again, give one write with the final digest, or none.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from cbop.clock import Clock, RealClock
from cbop.keys import object_key
from cbop.rollout.index import CONFIGMAP_INDEX, configmap_index_value
from cbop.runtime.seams import Lister

__all__ = [
    "DEFAULT_COALESCE_MAX_DELAY",
    "DEFAULT_COALESCE_WINDOW",
    "ChangeCoalescer",
    "configmap_mapper",
]

#: Seconds after the last observed ConfigMap change before a workload is written.
DEFAULT_COALESCE_WINDOW = 1.0
#: Seconds after the first observed change after which it is written regardless.
DEFAULT_COALESCE_MAX_DELAY = 10.0


class ChangeCoalescer:
    """Holds back writes while the ConfigMaps a workload reads are still changing.

    A trailing-edge debounce with a bound: after :meth:`observed` is called for a key,
    :meth:`delay` is positive until ``window`` seconds have passed since the latest
    observation, or ``max_delay`` seconds since the first one, whichever comes first.
    :meth:`settled` forgets the observations a reconcile has acted on. Thread-safe.

    Args:
        window: seconds of quiet before writing.
        max_delay: seconds after the first change after which the write goes ahead.
        clock: the time source (tests: ``FakeClock``).
    """

    def __init__(
        self,
        *,
        window: float = DEFAULT_COALESCE_WINDOW,
        max_delay: float = DEFAULT_COALESCE_MAX_DELAY,
        clock: Clock | None = None,
    ) -> None:
        self._window = window
        self._max_delay = max_delay
        self._clock: Clock = clock or RealClock()
        self._lock = threading.Lock()
        # key -> (first, latest) observation time, on the clock's scale.
        self._pending: dict[str, tuple[float, float]] = {}

    def observed(self, key: str) -> None:
        """Note that a ConfigMap the workload ``key`` reads changed just now."""
        now = self._clock.now()
        with self._lock:
            first, _ = self._pending.get(key, (now, now))
            self._pending[key] = (first, now)

    def delay(self, key: str) -> float:
        """Return seconds to hold back a write for ``key``; 0.0 when it may go now."""
        now = self._clock.now()
        with self._lock:
            pending = self._pending.get(key)
        if pending is None:
            return 0.0
        first, latest = pending
        ready_at = min(latest + self._window, first + self._max_delay)
        return max(0.0, ready_at - now)

    def now(self) -> float:
        """Return the coalescer's clock time (pass it to :meth:`settled`)."""
        return self._clock.now()

    def settled(self, key: str, as_of: float) -> None:
        """Forget ``key``'s observations, unless one came after ``as_of``."""
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None and pending[1] <= as_of:
                del self._pending[key]

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)


def configmap_mapper(
    workloads: Lister, coalescer: ChangeCoalescer | None = None
) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the map function of the ConfigMap watch: ConfigMap -> workload keys.

    Args:
        workloads: the workload informer's lister, with the
            :data:`cbop.rollout.index.CONFIGMAP_INDEX` index.
        coalescer: told about each change for every key returned (None: no coalescing).

    Returns:
        ``fn(configmap) -> ["namespace/name", ...]``, the workloads (of the lister's
        kind) whose pod template references the ConfigMap. Managed or not is not judged
        here: a ConfigMap that stops being managed must wake its readers too.
    """

    def map_configmap(configmap: Mapping[str, Any]) -> list[str]:
        meta = configmap.get("metadata") or {}
        value = configmap_index_value(str(meta.get("namespace") or ""), str(meta.get("name")))
        keys = sorted(object_key(w) for w in workloads.by_index(CONFIGMAP_INDEX, value))
        if coalescer is not None:
            for key in keys:
                coalescer.observed(key)
        return keys

    return map_configmap
