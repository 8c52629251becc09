"""SharedInformer: list+watch one resource into an indexed cache and notify handlers.

This module owns the informer loop, a Python rendering of client-go's ``tools/cache``
``Reflector`` + ``DeltaFIFO`` + ``sharedIndexInformer`` (controller-runtime defaults):

* **List.** The first list asks for ``resourceVersion=0`` (may be served from the API
  server's watch cache), paged with ``limit=500``; the server may ignore the limit for
  RV 0 and answer in one page, and both are handled. A ``continue`` token that expires
  mid-way (410) falls back to one unpaged list, as client-go's pager does. The body is
  decoded while it streams in (:mod:`cbop.kube.jsonstream`); each object is transformed
  and indexed into an :class:`~cbop.informers.indexer.IndexStaging` as soon as it is
  decoded, and the staging replaces the cache in one step on the informer thread.
* **Watch.** From the list's resourceVersion with ``allowWatchBookmarks=true`` and
  ``timeoutSeconds`` drawn uniformly from [300, 600). Every event, bookmarks included,
  advances :meth:`SharedInformer.last_sync_resource_version`. A watch that ends (its
  timeout) is re-opened at once from that RV, without a list.
* **410 Gone / Expired** (an ``ERROR`` event or an error answer): after a short pause
  (its own backoff schedule, so that a 410 right after an outage does not wait out the
  outage's long delays) relist with ``resourceVersion=""``, a consistent read, as
  client-go does after ``isLastSyncResourceVersionUnavailable``. Keys the cache holds
  that the relist lacks are delivered as deletions of a :class:`DeletedFinalStateUnknown`
  tombstone; listed objects already cached are delivered as updates (old = cached,
  new = listed, even if unchanged, as client-go), the others as adds.
* **404 NotFound** (the resource is not served: its CRD is not installed yet, or was
  deleted): back off on a short schedule of its own (0.8 s doubling to 5 s) and list
  again (after a watch's 404, with ``resourceVersion=""``); a CRD that appears (again) is
  picked up within seconds, and objects that went with the old one are delivered as
  deletions.
* **403 Forbidden** (RBAC): back off as below and retry: RBAC is often granted after
  the operator starts. These *refusals* (see :mod:`cbop.informers.problems`) never make
  :meth:`SharedInformer.healthy` false: the informer is alive and waiting for the
  cluster to change, which a restart cannot speed up.
* **Transport failures, 429, 5xx** (and any other watch error): back off
  (:class:`~cbop.informers.backoff.Backoff`: 0.8 s doubling to 30 s, jittered, reset
  after 2 min of health; at least ``Retry-After``) and re-watch from the last RV,
  **without** relisting. A watch that ends at once with no event counts as a failure
  (client-go's "very short watch").
* **Reporting.** Each failed attempt is logged in one line (the failure and the delay
  before the next attempt); :meth:`SharedInformer.problem` tells what is failing while
  the list/watch is down, for readiness probes and ``cbop --once``.
* **Silent watches.** Every socket read has ``read_timeout`` seconds (default 90: a
  real API server sends a bookmark about once a minute); a dead TCP connection is noticed
  after that long and re-watched like any transport failure.
* **Resync.** Every ``resync_period`` seconds (default 10 h, each period jittered by a
  factor in [0.9, 1.1) as controller-runtime's ``SyncPeriod``; 0 disables), every cached
  object is re-delivered as ``on_update(obj, obj)``. No API call is made.

Threads: :meth:`SharedInformer.run` runs the processing loop (cache writes and handler
calls, in order) on the calling thread (the "informer thread"); the list/watch loop runs
on a second thread and feeds it through a FIFO; a third waits for the stop event and
interrupts blocking reads. Handler exceptions are logged and never stop the informer.
The FIFO is unbounded: slow handlers delay delivery (and grow memory), never the watch,
so the server never sees a stalled reader.

Cached objects are parsed JSON dicts, shared with the handlers and listers, never
copied: see the caching contract in :mod:`cbop.informers.indexer`. By default each
object passes through :func:`strip_managed_fields` before it is cached
(client-go's ``SetTransform``): ``metadata.managedFields`` is large and cbop never reads
it. Pass ``transform=None`` to keep objects exactly as served.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, Protocol

import structlog

from cbop import defaults
from cbop.clock import Clock, RealClock
from cbop.informers.backoff import Backoff
from cbop.informers.handlers import ResourceEventHandler
from cbop.informers.indexer import (
    DeletedFinalStateUnknown,
    Indexer,
    IndexFunc,
    IndexStaging,
    Lister,
    meta_namespace_key,
)
from cbop.informers.problems import ListWatchProblem
from cbop.kube import ApiError, Resource
from cbop.kube.jsonstream import intern_keys, paused_gc

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
#: Page size of lists, as client-go's reflector (``pager.PageSize`` 500).
LIST_PAGE_SIZE: Final = 500
#: Watch timeouts are drawn from [MIN, 2*MIN) seconds, as client-go's reflector.
MIN_WATCH_TIMEOUT: Final = 300.0
#: A watch that ends sooner than this with no event is treated as a failure.
SHORT_WATCH: Final = 1.0
#: Longest pause, seconds, between attempts while the resource is not served (404).
ABSENT_BACKOFF_CAP: Final = 5.0
_STOP_POLL: Final = 0.2
_JOIN_TIMEOUT: Final = 10.0

#: ``transform(obj) -> obj``, applied to each object before it is cached.
Transform = Callable[[dict[str, Any]], dict[str, Any]]


def strip_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop ``metadata.managedFields`` (server-side apply bookkeeping) in place; return ``obj``.

    The default transform of cbop's informers: the field is often larger than the rest
    of a small object and nothing in cbop reads it.
    """
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class ListWatchClient(Protocol):
    """The two calls an informer makes (satisfied by :class:`cbop.kube.KubeClient`)."""

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        resource_version: str | None = None,
        item_hook: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """LIST one page (see :meth:`cbop.kube.KubeClient.list`), ``item_hook`` per item."""
        ...

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int,
        allow_bookmarks: bool = True,
        read_timeout: float,
    ) -> Iterator[dict[str, Any]]:
        """Open a WATCH (see :meth:`cbop.kube.KubeClient.watch`); may have ``close()``."""
        ...


class _Stopped(Exception):  # noqa: N818 - control flow, not an error
    """Internal: the informer is stopping."""


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
    ) -> None:
        self._client = client
        self._resource = resource
        self._namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._resync_period = resync_period
        self._read_timeout = read_timeout
        self._clock: Clock = clock if clock is not None else RealClock()
        self._transform = transform
        self._unhealthy_after = unhealthy_after
        self._rng = rng if rng is not None else random.Random()
        self._page_size = page_size
        self._min_watch_timeout = min_watch_timeout
        self._backoff = (
            backoff if backoff is not None else Backoff(self._clock, rand=self._rng.random)
        )
        # Relists after 410 have their own schedule: a 410 that follows an outage must
        # not inherit the outage's long delays, but repeated 410s still slow down.
        self._relist_backoff = Backoff(self._clock, rand=self._rng.random)
        # While the resource is not served (its CRD missing), retry often enough that
        # its installation is noticed within seconds.
        self._absent_backoff = Backoff(self._clock, cap=ABSENT_BACKOFF_CAP, rand=self._rng.random)
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

        # Processing side: FIFO of work items, guarded by _cond.
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[tuple[Any, ...]] = deque()
        self._handlers: list[ResourceEventHandler] = []
        self._resync_due: float | None = None
        self._synced = threading.Event()

        # Reflector side.
        self._rcond = threading.Condition(threading.Lock())
        self._stream: Any = None
        self._stream_lock = threading.Lock()
        self._rv = ""
        self._down_since: float | None = None
        self._problem: ListWatchProblem | None = None

        # Lifecycle.
        self._lifecycle = threading.Lock()
        self._running = False
        self._stopping = False
        self._reflector: threading.Thread | None = None
        self._thread: threading.Thread | None = None
        self._own_stop = threading.Event()

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

    def has_synced(self) -> bool:
        """Whether the first full list has been stored and delivered to the handlers."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until :meth:`has_synced` (``timeout`` in real seconds); return it."""
        return self._synced.wait(timeout)

    def last_sync_resource_version(self) -> str:
        """Return the resourceVersion of the last list or watch event seen (``""`` before any)."""
        return self._rv

    def alive(self) -> bool:
        """Return whether the informer runs: started, not stopping, its reflector thread alive.

        For liveness: says nothing of the API server. The reflector never blocks for
        longer than the watch read timeout, so a live reflector keeps making attempts.
        """
        if not self._running or self._stopping:
            return False
        reflector = self._reflector
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
        reflector = self._reflector
        if reflector is not None and not reflector.is_alive():
            return False
        down = self._down_since
        if down is None:
            return True
        problem = self._problem
        if problem is not None and problem.refused:
            return True
        return self._clock.now() - down <= self._unhealthy_after

    def problem(self) -> ListWatchProblem | None:
        """Return why the list or watch is failing right now, or ``None``.

        Set by every failed list or watch attempt, cleared when a watch is established.
        ``None`` also while the first list is still in progress without a failure.
        """
        return self._problem

    def start(self) -> None:
        """Run the informer on a daemon thread; returns at once. Stop it with :meth:`stop`.

        Raises:
            RuntimeError: it is already running.
        """
        with self._lifecycle:
            if self._thread is not None and self._thread.is_alive():
                raise RuntimeError(f"informer {self.name} is already running")
            self._own_stop = threading.Event()
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

    def run(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set: list, watch, and deliver events on this thread.

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
            target=self._reflect_loop, name=f"reflector-{self.name}", daemon=True
        )
        self._reflector = reflector
        waiter = threading.Thread(
            target=self._await_stop, args=(stop,), name=f"stopper-{self.name}", daemon=True
        )
        reflector.start()
        waiter.start()
        try:
            self._process_loop()
        except Exception:
            self._log.exception("informer processing loop crashed")
            raise
        finally:
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
        self._down_since = self._clock.now()

    def _await_stop(self, stop: threading.Event) -> None:
        while not stop.wait(_STOP_POLL):
            if self._stopping or not self._running:
                return
        self._begin_shutdown()

    def _begin_shutdown(self) -> None:
        self._stopping = True
        with self._cond:
            self._cond.notify_all()
        with self._rcond:
            self._rcond.notify_all()
        self._close_stream()

    def _close_stream(self) -> None:
        with self._stream_lock:
            stream = self._stream
        close = getattr(stream, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - closing is best effort
                self._log.debug("closing the watch stream failed", exc_info=True)

    # ------------------------------------------------------------------ processing

    def _process_loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    due = self._resync_due
                    if due is not None and self._clock.now() >= due:
                        break
                    self._clock.wait_until(self._cond, due)
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
            self._cond.notify_all()

    # ------------------------------------------------------------------ list/watch

    def _prepare(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self._transform is not None:
            obj = self._transform(obj)
        # List items come without kind/apiVersion; give every cached object the same
        # (shared) strings.
        obj["kind"] = self._resource.kind
        obj["apiVersion"] = self._resource.api_version
        return obj

    def _set_rv(self, rv: str) -> None:
        self._rv = rv
        self._indexer.set_resource_version(rv)

    def _mark_up(self) -> None:
        self._problem = None
        if self._down_since is not None:
            self._down_since = None
            self._log.info("watch established", resource_version=self._rv)

    def _mark_down(self) -> None:
        if self._down_since is None:
            self._down_since = self._clock.now()

    def _sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on the clock; raises _Stopped if the informer stops meanwhile."""
        with self._rcond:
            deadline = self._clock.now() + seconds
            while not self._stopping:
                if not self._clock.wait_until(self._rcond, deadline):
                    break
        if self._stopping:
            raise _Stopped

    def _pause(self, *, relist: bool = False) -> None:
        delay = (self._relist_backoff if relist else self._backoff).next_delay()
        self._log.info("backing off", seconds=round(delay, 3))
        self._sleep(delay)

    def _failed(self, verb: str, error: BaseException) -> None:
        """Record a failed ``verb`` attempt, log it in one line, and wait out the backoff.

        Raises:
            _Stopped: the informer stops while waiting.
        """
        problem = ListWatchProblem.of(verb, self._resource, self._namespace, error)
        self._problem = problem
        self._mark_down()
        schedule = self._absent_backoff if problem.reason == "NotFound" else self._backoff
        delay = schedule.next_delay()
        retry_after = getattr(error, "retry_after", None)
        if isinstance(retry_after, int | float) and retry_after > delay:
            delay = float(retry_after)
        self._log.warning(
            f"{verb} failed; retrying",
            problem=problem.message,
            reason=problem.reason,
            status=problem.status,
            retry_in=round(delay, 3),
            exc_info=error if not isinstance(error, ApiError) else None,
        )
        self._sleep(delay)

    def _reflect_loop(self) -> None:
        try:
            self._reflect()
        except _Stopped:
            pass
        except Exception:
            self._log.exception("list/watch loop crashed")
            raise
        finally:
            with self._stream_lock:
                self._stream = None

    def _reflect(self) -> None:
        list_rv = "0"
        need_list = True
        while not self._stopping:
            if need_list:
                try:
                    staging, rv = self._list(list_rv)
                except _Stopped:
                    return
                except Exception as err:  # noqa: BLE001 - keep the informer alive
                    if self._stopping:
                        return
                    if isinstance(err, ApiError) and err.is_gone:
                        list_rv = ""
                    self._failed("list", err)
                    continue
                self._enqueue(("replace", staging, rv))
                self._set_rv(rv)
                need_list = False
            try:
                self._watch_once()
            except _Stopped:
                return
            except ApiError as err:
                if self._stopping:
                    return
                if err.is_gone:
                    self._log.info("watch expired; relisting", error=str(err))
                    need_list = True
                    list_rv = ""
                    self._pause(relist=True)
                    continue
                if err.is_not_found:
                    # The resource is no longer served (its CRD was deleted). Once it is
                    # back, list afresh: the old resourceVersion means nothing to it, and
                    # the relist delivers what went with the old CRD as deletions.
                    need_list = True
                    list_rv = ""
                self._failed("watch", err)
            except Exception as err:  # noqa: BLE001 - keep the informer alive
                if self._stopping:
                    return
                self._failed("watch", err)

    def _list(self, rv: str) -> tuple[IndexStaging, str]:
        """List every page into a new :class:`IndexStaging`; return it and the list's RV.

        Each object is transformed and indexed as soon as it is decoded, while the rest
        of the body is still arriving; the cache itself is replaced later, at once, on
        the informer thread.

        Raises:
            ApiError: the list failed (``is_gone`` when ``rv`` is too old).
        """
        staging = self._indexer.staging()

        def stage(obj: dict[str, Any]) -> dict[str, Any]:
            obj = self._prepare(obj)
            try:
                key = meta_namespace_key(obj)
            except ValueError:
                self._log.warning("dropping a listed object without a name")
                return obj
            staging.add(key, obj)
            return obj

        list_rv = rv
        continue_: str | None = None
        while True:
            try:
                page = self._client.list(
                    self._resource,
                    self._namespace,
                    label_selector=self._label_selector,
                    field_selector=self._field_selector,
                    limit=self._page_size,
                    continue_=continue_,
                    resource_version=None if continue_ else (rv or None),
                    item_hook=stage,
                )
            except ApiError as err:
                if not (err.is_gone and continue_):
                    raise
                # The continue token expired (compaction): one unpaged list instead.
                self._log.info("list continuation expired; listing in one go")
                staging = self._indexer.staging()
                continue_ = None
                page = self._client.list(
                    self._resource,
                    self._namespace,
                    label_selector=self._label_selector,
                    field_selector=self._field_selector,
                    resource_version=rv or None,
                    item_hook=stage,
                )
            meta = page.get("metadata") or {}
            page_rv = meta.get("resourceVersion")
            if page_rv:
                list_rv = str(page_rv)
            continue_ = meta.get("continue") or None
            if not continue_:
                break
        if self._stopping:
            raise _Stopped
        return staging, list_rv

    def _watch_once(self) -> None:
        """Open one watch from the current RV and pump its events into the FIFO.

        Raises:
            ApiError: the watch could not be opened, broke, or reported an ERROR.
            _Stopped: the informer is stopping.
        """
        timeout_seconds = max(1, int(self._min_watch_timeout * (1.0 + self._rng.random())))
        stream = self._client.watch(
            self._resource,
            self._namespace,
            resource_version=self._rv,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
            timeout_seconds=timeout_seconds,
            allow_bookmarks=True,
            read_timeout=self._read_timeout,
        )
        with self._stream_lock:
            self._stream = stream
        if self._stopping:
            self._close_stream()
            raise _Stopped
        self._mark_up()
        started = self._clock.now()
        events = 0
        try:
            for event in stream:
                events += 1
                self._on_watch_event(event)
                if self._stopping:
                    break
        finally:
            with self._stream_lock:
                self._stream = None
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        if self._stopping:
            raise _Stopped
        if events == 0 and self._clock.now() - started < SHORT_WATCH:
            self._log.warning("very short watch: the server closed it at once")
            self._mark_down()
            self._pause()

    def _on_watch_event(self, event: Mapping[str, Any]) -> None:
        typ = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        meta = obj.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if typ in ("ADDED", "MODIFIED", "DELETED"):
            self._enqueue(("event", typ, intern_keys(self._prepare(obj))))
        elif typ != "BOOKMARK":
            self._log.warning("ignoring a watch event of unknown type", type=typ)
            return
        if rv:
            self._set_rv(str(rv))


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
