"""The cyclic garbage collector and long-lived informer caches.

A full (generation 2) collection visits every container object the process tracks. An
operator's informer caches are most of them (10,000 bundles and 10,000 ConfigMaps are
about 600,000 dicts and lists) and live as long as the process, so every full collection
rescans them to find nothing. :func:`freeze_caches` moves everything alive after the
initial cache sync into the collector's permanent generation (``gc.freeze()``), which
collections never scan: a full collection then costs what the objects created since
cost. Reference counting still frees frozen objects (a cache entry replaced by a watch
event is freed as before); only a reference cycle among frozen objects would outlive
its last reference, and decoded API objects have none.
"""

from __future__ import annotations

import gc
import time

import structlog

log = structlog.get_logger("cbop.gc")


def freeze_caches() -> float:
    """Collect once, then freeze every object alive into the permanent generation.

    Call it once the informer caches have synced (a process keeps what it has then for
    long). Later objects are collected as usual.

    Returns:
        The seconds the collection and the freeze took.
    """
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    took = time.perf_counter() - started
    log.debug("froze the synced caches", objects=gc.get_freeze_count(), seconds=round(took, 3))
    return took
