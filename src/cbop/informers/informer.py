"""SharedInformer: list+watch one resource into an indexed cache and notify handlers.

This module owns the informer loop, after client-go's ``DeltaFIFO`` and
``sharedIndexInformer`` (with controller-runtime's defaults), over a
:class:`~cbop.informers.reflector.Reflector` that lists and watches. Each full list
replaces the cache in one step (keys it lacks are delivered as deletions of a
:class:`DeletedFinalStateUnknown`, cached ones as updates, as client-go); each watch
event updates the cache, then the handlers, in order; every ``resync_period`` every
cached object is re-delivered as an update, without an API call.

Why a thread and an unbounded FIFO between the reflector and the handlers: a slow
handler delays delivery (and grows memory), never the watch, so the API server never
sees a stalled reader. Handler exceptions are logged and never stop the informer.
Cached objects are shared, never copied (the contract is :mod:`cbop.informers.indexer`'s),
and stripped of ``managedFields`` by default (:func:`strip_managed_fields`).
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, Final

import structlog

from cbop import defaults
from cbop.clock import Clock, RealClock
from cbop.informers.backoff import Backoff
from cbop.informers.handlers import ResourceEventHandler
from cbop.informers.indexer import Indexer
from cbop.informers.indexfuncs import IndexFunc
from cbop.informers.listers import Lister
from cbop.informers.problems import ListWatchProblem
from cbop.informers.reflector import (
    LIST_PAGE_SIZE,
    MIN_WATCH_TIMEOUT,
    ListWatchClient,
    Reflector,
    Transform,
    strip_managed_fields,
)
from cbop.informers.staging import IndexStaging
from cbop.informers.tombstone import DeletedFinalStateUnknown
from cbop.kube import Resource
from cbop.kube.jsonstream import paused_gc
from cbop.locks import YieldingLock, condition
from cbop.shardrange import ShardRange
from cbop.stop import StopSignal

__all__ = [
    "DEFAULT_RESYNC_PERIOD",
    "ListWatchClient",
    "SharedInformer",
    "Transform",
    "strip_managed_fields",
    "wait_for_cache_sync",
]

log = structlog.get_logger("cbop.informers")

#: controller-runtime's default SyncPeriod: 10 hours, in seconds.
DEFAULT_RESYNC_PERIOD: Final = defaults.RESYNC_PERIOD
_JOIN_TIMEOUT: Final = 10.0


class SharedInformer:
    """Keeps an indexed cache of one resource in sync with the API server.

    Args:
        client: a :class:`cbop.kube.KubeClient` (or anything with its ``list``/``watch``).
        resource: the collection to mirror.
        namespace: one namespace, or ``None`` for all.
        label_selector: server-side label selector string (``"a=b,c"``); objects that do
            not match never enter the cache.
        field_selector: server-side field selector string.
        resync_period: seconds between resyncs (jittered x[0.9, 1.1)); ``<= 0`` disables.
        read_timeout: seconds a watch may stay completely silent before it is declared
            dead and re-opened; keep it above the bookmark interval (~60 s).
        clock: time source for backoff, resync and health (tests: ``FakeClock``).
        indexers: extra named index functions (``by_namespace`` is built in).
        name: name used in logs (default: resource, namespace and selector).
        transform: applied to each object before caching (default
            :func:`strip_managed_fields`; ``None`` keeps objects unchanged).
        unhealthy_after: seconds the watch may be down (or the first list failing)
            before :meth:`healthy` turns ``False``.
        rng: random source for watch timeouts, resync and backoff jitter.
        page_size: list page size (500).
        min_watch_timeout: each watch asks for ``timeoutSeconds`` drawn uniformly from
            ``[min_watch_timeout, 2 * min_watch_timeout)`` (300 s, as client-go). The API
            server also sends a bookmark 2 s before that deadline.
        backoff: retry schedule (default: 0.8 s doubling to 30 s, reset after 2 min).
        shard: cache only this shard of the collection: objects whose namespace hashes
            into the range (``shardSelector`` on every list and watch, and a client-side
            check; see :mod:`cbop.informers.shardfilter`). ``None`` (or the whole hash
            space): everything, as an unsharded informer.
    """

    def __init__(
        self,
        client: ListWatchClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resync_period: float = DEFAULT_RESYNC_PERIOD,
        read_timeout: float = defaults.WATCH_READ_TIMEOUT,
        clock: Clock | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        name: str | None = None,
        transform: Transform | None = strip_managed_fields,
        unhealthy_after: float = 60.0,
        rng: random.Random | None = None,
        page_size: int = LIST_PAGE_SIZE,
        min_watch_timeout: float = MIN_WATCH_TIMEOUT,
        backoff: Backoff | None = None,
        shard: ShardRange | None = None,
    ) -> None:
        self._resource = resource
        self._resync_period = resync_period
        self._clock: Clock = clock if clock is not None else RealClock()
        self._unhealthy_after = unhealthy_after
        self._rng = rng if rng is not None else random.Random()
        self._indexer = Indexer(indexers)
        self._lister = Lister(self._indexer)
        if name is None:
            name = str(resource)
            if namespace:
                name += f"/{namespace}"
            if label_selector:
                name += f"[{label_selector}]"
        self.name = name
        self._log = log.bind(informer=name)

        # Processing side: FIFO of work items, guarded by _cond. The reflector takes its
        # lock for every event: a YieldingLock keeps the two threads off a lock convoy
        # (cbop.locks), and it notifies only when the processing thread waits.
        self._cond = condition(YieldingLock())
        self._consumer_waiting = False
        self._queue: deque[tuple[Any, ...]] = deque()
        self._handlers: list[ResourceEventHandler] = []
        self._resync_due: float | None = None
        self._synced = threading.Event()

        # List/watch side: the reflector feeds the FIFO from its own thread.
        self._reflector = Reflector(
            client,
            resource,
            indexer=self._indexer,
            on_replace=self._enqueue_replace,
            on_event=self._enqueue_event,
            name=name,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            read_timeout=read_timeout,
            clock=self._clock,
            rng=self._rng,
            transform=transform,
            page_size=page_size,
            min_watch_timeout=min_watch_timeout,
            backoff=backoff,
            shard=shard,
        )

        # Lifecycle.
        self._lifecycle = threading.Lock()
        self._running = False
        self._stopping = False
        self._reflector_thread: threading.Thread | None = None
        self._thread: threading.Thread | None = None
        self._own_stop = StopSignal()

    # ------------------------------------------------------------------ public API

    @property
    def resource(self) -> Resource:
        """The mirrored resource."""
        return self._resource

    def add_event_handler(self, handler: ResourceEventHandler) -> None:
        """Register a handler; it is called on the informer thread, in event order.

        A handler added while the informer runs first receives ``on_add`` for every
        object already cached (as client-go's ``AddEventHandler``), then live events.
        """
        with self._cond:
            if not self._running:
                self._handlers.append(handler)
                return
            self._queue.append(("handler", handler))
            self._cond.notify_all()

    def lister(self) -> Lister:
        """Return a read-only view of the cache (objects are shared: do not mutate them)."""
        return self._lister

    def indexer(self) -> Indexer:
        """Return the cache itself; callers outside this package should only read from it."""
        return self._indexer

    def object_count(self) -> int:
        """Return how many objects the cache holds now (for gauges such as objects per shard)."""
        return len(self._indexer)

    @property
    def server_side_sharding(self) -> bool | None:
        """Whether the API server filters this sharded informer's lists and watches.

        ``True`` once a list answer confirmed the shard selector (``metadata.shardInfo``);
        ``False`` once one did not: the server ignored the selector (its
        ``ShardedListAndWatch`` gate is off), rejected it (400), or did not say (custom
        resources on Kubernetes 1.36 are filtered without ``shardInfo``), and the informer
        filters client-side. ``None`` before the first list, and for an unsharded informer.
        """
        return self._reflector.server_side_sharding

    @property
    def shard_dropped(self) -> int:
        """Objects of other shards the client-side check has dropped so far (0 unsharded)."""
        return self._reflector.shard_dropped

    def has_synced(self) -> bool:
        """Whether the first full list has been stored and delivered to the handlers."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until :meth:`has_synced` (``timeout`` in real seconds); return it."""
        return self._synced.wait(timeout)

    def last_sync_resource_version(self) -> str:
        """Return the resourceVersion of the last list or watch event seen (``""`` before any)."""
        return self._reflector.last_sync_resource_version()

    def alive(self) -> bool:
        """Return whether the informer runs: started, not stopping, its reflector thread alive.

        For liveness: says nothing of the API server. The reflector never blocks for
        longer than the watch read timeout, so a live reflector keeps making attempts.
        """
        if not self._running or self._stopping:
            return False
        reflector = self._reflector_thread
        return reflector is None or reflector.is_alive()

    def healthy(self) -> bool:
        """Return whether the informer is running and its watch is (recently) up.

        ``False`` if the informer is not running, a thread died, or the watch has been
        down (failing, backing off, or the first list failing) for more than
        ``unhealthy_after`` seconds, unless the current failure is a refusal (404 or 403:
        see :attr:`ListWatchProblem.refused`), which only the cluster can cure. For
        liveness probes.
        """
        if not self._running or self._stopping:
            return False
        reflector = self._reflector_thread
        if reflector is not None and not reflector.is_alive():
            return False
        down = self._reflector.down_since
        if down is None:
            return True
        problem = self._reflector.problem()
        if problem is not None and problem.refused:
            return True
        return self._clock.now() - down <= self._unhealthy_after

    def problem(self) -> ListWatchProblem | None:
        """Return why the list or watch is failing right now, or ``None``.

        Set by every failed list or watch attempt, cleared when a watch is established.
        ``None`` also while the first list is still in progress without a failure.
        """
        return self._reflector.problem()

    def start(self) -> None:
        """Run the informer on a daemon thread; returns at once. Stop it with :meth:`stop`.

        Raises:
            RuntimeError: it is already running.
        """
        with self._lifecycle:
            if self._thread is not None and self._thread.is_alive():
                raise RuntimeError(f"informer {self.name} is already running")
            self._own_stop = StopSignal()
            self._thread = threading.Thread(
                target=self.run, args=(self._own_stop,), name=f"informer-{self.name}", daemon=True
            )
            self._mark_running()
            self._thread.start()

    def stop(self, timeout: float = _JOIN_TIMEOUT) -> None:
        """Stop the informer (started with :meth:`start` or :meth:`run`) and wait for it.

        Args:
            timeout: real seconds to wait for the informer thread to finish.
        """
        self._own_stop.set()
        self._begin_shutdown()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def run(self, stop: StopSignal) -> None:
        """Run until ``stop`` is set: list, watch, and deliver events on this thread.

        Setting ``stop`` wakes the processing loop and stops the reflector at once.

        Raises:
            RuntimeError: the informer is already running on another thread.
        """
        with self._lifecycle:
            started_here = threading.current_thread() is not self._thread
            if started_here:
                if self._running:
                    raise RuntimeError(f"informer {self.name} is already running")
                self._own_stop = stop
                self._mark_running()
        reflector = threading.Thread(
            target=self._reflector.run, name=f"reflector-{self.name}", daemon=True
        )
        self._reflector_thread = reflector
        reflector.start()
        unregister = stop.on_set(self._begin_shutdown)
        try:
            self._process_loop()
        except Exception:
            self._log.exception("informer processing loop crashed")
            raise
        finally:
            unregister()
            self._begin_shutdown()
            reflector.join(_JOIN_TIMEOUT)
            with self._lifecycle:
                self._running = False

    # ------------------------------------------------------------------ lifecycle

    def _mark_running(self) -> None:
        self._running = True
        self._stopping = False
        with self._cond:
            self._queue.clear()
        self._reflector.reset()

    def _begin_shutdown(self) -> None:
        self._stopping = True
        with self._cond:
            self._cond.notify_all()
        self._reflector.stop()

    # ------------------------------------------------------------------ processing

    def _process_loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    due = self._resync_due
                    if due is not None and self._clock.now() >= due:
                        break
                    self._consumer_waiting = True
                    try:
                        self._clock.wait_until(self._cond, due)
                    finally:
                        self._consumer_waiting = False
                if self._stopping:
                    return
                item = self._queue.popleft() if self._queue else None
            if item is None:
                self._resync()
            else:
                self._apply(item)

    def _schedule_resync(self) -> None:
        if self._resync_period <= 0:
            self._resync_due = None
            return
        factor = 0.9 + self._rng.random() / 5.0
        with self._cond:
            self._resync_due = self._clock.now() + self._resync_period * factor

    def _resync(self) -> None:
        objs = self._indexer.list()
        self._log.debug("resync", objects=len(objs))
        for obj in objs:
            self._dispatch("update", obj, obj)
        self._schedule_resync()

    def _apply(self, item: tuple[Any, ...]) -> None:
        kind = item[0]
        if kind == "event":
            _, typ, obj = item
            try:
                if typ == "DELETED":
                    self._indexer.delete(obj)
                    self._dispatch("delete", obj)
                    return
                old = self._indexer.update(obj)
            except ValueError:
                self._log.warning("dropping an object without a name", watch_event=typ)
                return
            if old is None:
                self._dispatch("add", obj)
            else:
                self._dispatch("update", old, obj)
        elif kind == "replace":
            _, staging, rv = item
            self._apply_replace(staging, rv)
        elif kind == "handler":
            handler = item[1]
            for obj in self._indexer.list():
                self._call(handler, "add", obj)
            self._handlers.append(handler)

    def _apply_replace(self, staging: IndexStaging, rv: str) -> None:
        # A relist touches every object; the collector would rescan the whole cache.
        with paused_gc():
            self._replace_and_notify(staging, rv)

    def _replace_and_notify(self, staging: IndexStaging, rv: str) -> None:
        previous = self._indexer.swap_in(staging, rv)
        for key, obj in staging.items.items():
            old = previous.pop(key, None)
            if old is None:
                self._dispatch("add", obj)
            else:
                self._dispatch("update", old, obj)
        for key, old in previous.items():
            self._dispatch("delete", DeletedFinalStateUnknown(key, old))
        if not self._synced.is_set():
            self._synced.set()
            self._schedule_resync()
            self._log.info("cache synced", objects=len(staging), resource_version=rv)
        elif previous:
            self._log.info("relist found deletions", deleted=len(previous))

    def _dispatch(self, what: str, *args: Any) -> None:
        for handler in tuple(self._handlers):
            self._call(handler, what, *args)

    def _call(self, handler: ResourceEventHandler, what: str, *args: Any) -> None:
        try:
            if what == "add":
                handler.on_add(args[0])
            elif what == "update":
                handler.on_update(args[0], args[1])
            else:
                handler.on_delete(args[0])
        except Exception:  # noqa: BLE001 - a handler must not kill the informer
            self._log.exception("event handler failed", handler=repr(handler), notification=what)

    def _enqueue(self, item: tuple[Any, ...]) -> None:
        with self._cond:
            self._queue.append(item)
            if self._consumer_waiting:
                self._cond.notify()

    def _enqueue_replace(self, staging: IndexStaging, resource_version: str) -> None:
        """Queue a full list for :meth:`_apply_replace` (called on the reflector thread)."""
        self._enqueue(("replace", staging, resource_version))

    def _enqueue_event(self, event_type: str, obj: dict[str, Any]) -> None:
        """Queue one watch event for :meth:`_apply` (called on the reflector thread)."""
        self._enqueue(("event", event_type, obj))


def wait_for_cache_sync(*informers: SharedInformer, timeout: float, poll: float = 0.1) -> bool:
    """Wait until every informer :meth:`~SharedInformer.has_synced`.

    As client-go's ``WaitForCacheSync``.

    Args:
        informers: the informers to wait for.
        timeout: real seconds to wait at most.
        poll: real seconds between checks of the deadline (each informer's sync is
            awaited on an event, not polled).

    Returns:
        ``True`` once all have synced, ``False`` if ``timeout`` passed first.
    """
    deadline = time.monotonic() + timeout
    for informer in informers:
        while not informer.wait_for_sync(max(0.0, min(poll, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                return False
    return True
