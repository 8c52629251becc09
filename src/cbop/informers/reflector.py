"""Reflector: list and watch one resource, and feed what it sees to its informer.

This module owns the list/watch half of an informer, after client-go's ``Reflector``
(with its pager); it knows nothing of event handlers. A
:class:`~cbop.informers.informer.SharedInformer` runs one on a thread of its own and
gets each full list and each watch event through two callbacks. In short:

* the first list asks for ``resourceVersion=0`` in pages of 500 (an expired
  ``continue`` falls back to one unpaged list), decoded and indexed as it streams in;
  the watch starts from its resourceVersion, with bookmarks, and is re-opened from the
  last one seen when the server ends it;
* 410 Gone: relist with ``resourceVersion=""`` after a short pause of its own, so a 410
  right after an outage does not wait out the outage's backoff;
* 404 (no CRD yet) and 403 (no RBAC yet) are *refusals*
  (:mod:`cbop.informers.problems`): retried on a backoff, the cluster may change;
* transport failures, 429, 5xx, a watch that ends at once, a socket silent for
  ``read_timeout``: back off (:mod:`cbop.informers.backoff`, at least ``Retry-After``)
  and re-watch from the last resourceVersion, without relisting;
* under a shard, every request carries the ``shardSelector`` and every object is
  checked client-side too (:mod:`cbop.informers.shardfilter`).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, Protocol

import structlog

from cbop.clock import Clock
from cbop.informers.backoff import Backoff
from cbop.informers.indexer import Indexer
from cbop.informers.problems import ListWatchProblem
from cbop.informers.shardfilter import ShardFilter
from cbop.informers.staging import IndexStaging
from cbop.informers.tombstone import meta_namespace_key
from cbop.kube import ApiError, Resource
from cbop.shardrange import ShardRange

__all__ = [
    "ABSENT_BACKOFF_CAP",
    "LIST_PAGE_SIZE",
    "MIN_WATCH_TIMEOUT",
    "SHORT_WATCH",
    "ListWatchClient",
    "Reflector",
    "Transform",
    "strip_managed_fields",
]

log = structlog.get_logger("cbop.informers")

#: Page size of lists, as client-go's reflector (``pager.PageSize`` 500).
LIST_PAGE_SIZE: Final = 500
#: Watch timeouts are drawn from [MIN, 2*MIN) seconds, as client-go's reflector.
MIN_WATCH_TIMEOUT: Final = 300.0
#: A watch that ends sooner than this with no event is treated as a failure.
SHORT_WATCH: Final = 1.0
#: Longest pause, seconds, between attempts while the resource is not served (404).
ABSENT_BACKOFF_CAP: Final = 5.0

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
    """The two calls a reflector makes, as client-go's ``ListerWatcher``.

    Any :class:`cbop.kube.KubeInterface` has them; tests may script just these two.
    """

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
        shard_selector: str | None = None,
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
        shard_selector: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Open a WATCH (see :meth:`cbop.kube.KubeClient.watch`); may have ``close()``."""
        ...


class _Stopped(Exception):  # noqa: N818 - control flow, not an error
    """Internal: the reflector is stopping."""


class Reflector:
    """Lists and watches one resource and hands what it sees to its owner, on one thread.

    As client-go's ``Reflector``: :meth:`run` lists, then watches from the list's
    resourceVersion, relisting after 410 and backing off after failures (see the module
    docstring), until :meth:`stop`. Each full list goes to ``on_replace(staging, rv)``
    and each watch event to ``on_event(type, obj)`` (``type`` one of ``ADDED``,
    ``MODIFIED``, ``DELETED``); both are called on the reflector's thread and must not
    block for long. Objects are transformed and given the resource's ``kind`` and
    ``apiVersion`` first.

    Args:
        client: a :class:`cbop.kube.KubeClient` (or anything with its ``list``/``watch``).
        resource: the collection to list and watch.
        indexer: makes the staging each list fills (:meth:`Indexer.staging`) and
            records every resourceVersion seen (:meth:`Indexer.set_resource_version`).
        on_replace: receives each full list, ``(staging, resource_version)``.
        on_event: receives each ADDED/MODIFIED/DELETED watch event, ``(type, obj)``.
        name: name used in logs (the informer's).
        namespace: one namespace, or ``None`` for all.
        label_selector: server-side label selector string.
        field_selector: server-side field selector string.
        read_timeout: seconds a watch may stay completely silent before it is declared
            dead and re-opened.
        clock: time source for the backoff and :attr:`down_since`.
        rng: random source for watch timeouts and backoff jitter.
        transform: applied to each object before it is handed over (``None``: none).
        page_size: list page size (:data:`LIST_PAGE_SIZE` by the informer's default).
        min_watch_timeout: each watch asks for ``timeoutSeconds`` drawn uniformly from
            ``[min_watch_timeout, 2 * min_watch_timeout)`` seconds
            (:data:`MIN_WATCH_TIMEOUT` by the informer's default).
        backoff: retry schedule (default: 0.8 s doubling to 30 s, reset after 2 min).
        shard: list and watch only this shard of the collection (objects whose namespace
            hashes into it); ``None`` (or the whole hash space): everything.
    """

    def __init__(
        self,
        client: ListWatchClient,
        resource: Resource,
        *,
        indexer: Indexer,
        on_replace: Callable[[IndexStaging, str], None],
        on_event: Callable[[str, dict[str, Any]], None],
        name: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        read_timeout: float,
        clock: Clock,
        rng: random.Random,
        transform: Transform | None,
        page_size: int,
        min_watch_timeout: float,
        backoff: Backoff | None = None,
        shard: ShardRange | None = None,
    ) -> None:
        self._client = client
        self._resource = resource
        self._indexer = indexer
        self._on_replace = on_replace
        self._on_event = on_event
        self._namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._read_timeout = read_timeout
        self._clock = clock
        self._rng = rng
        self._transform = transform
        self._page_size = page_size
        self._min_watch_timeout = min_watch_timeout
        self._backoff = backoff if backoff is not None else Backoff(clock, rand=rng.random)
        # Relists after 410 have their own schedule: a 410 that follows an outage must
        # not inherit the outage's long delays, but repeated 410s still slow down.
        self._relist_backoff = Backoff(clock, rand=rng.random)
        # While the resource is not served (its CRD missing), retry often enough that
        # its installation is noticed within seconds.
        self._absent_backoff = Backoff(clock, cap=ABSENT_BACKOFF_CAP, rand=rng.random)
        self._log = log.bind(informer=name)
        self._shards = ShardFilter(shard, name=name)

        # _rcond wakes a backoff sleep when the reflector stops.
        self._rcond = threading.Condition(threading.Lock())
        self._stream: Any = None
        self._stream_lock = threading.Lock()
        self._rv = ""
        self._down_since: float | None = None
        self._problem: ListWatchProblem | None = None
        self._stopping = False

    # ------------------------------------------------------------------ state

    def last_sync_resource_version(self) -> str:
        """Return the resourceVersion of the last list or watch event seen (``""`` before any)."""
        return self._rv

    def problem(self) -> ListWatchProblem | None:
        """Return why the list or watch is failing right now, or ``None``.

        Set by every failed list or watch attempt, cleared when a watch is established.
        """
        return self._problem

    @property
    def server_side_sharding(self) -> bool | None:
        """Whether the API server applies the shard selector (see :class:`ShardFilter`).

        True once a list answer confirmed it (``metadata.shardInfo``), False once one did
        not (then objects are filtered client-side), None before the first list and for
        an unsharded reflector.
        """
        return self._shards.server_side

    @property
    def shard_dropped(self) -> int:
        """Objects of other shards dropped by the client-side check so far (0 if unsharded)."""
        return self._shards.dropped

    @property
    def down_since(self) -> float | None:
        """Clock time since which no watch has been up, or ``None`` while one is."""
        return self._down_since

    # ------------------------------------------------------------------ lifecycle

    def reset(self) -> None:
        """Prepare a (re)start: not stopping, and down from now until a watch is up."""
        self._stopping = False
        self._down_since = self._clock.now()

    def stop(self) -> None:
        """Make :meth:`run` return soon: wake its backoff sleep and close its watch.

        Safe from any thread. A list in progress is not interrupted: :meth:`run`
        returns once it ends (at most its request timeout).
        """
        self._stopping = True
        with self._rcond:
            self._rcond.notify_all()
        self._close_stream()

    def run(self) -> None:
        """List and watch until :meth:`stop`; the reflector thread's target.

        Raises:
            Exception: only an unexpected bug (logged first); API and transport
                failures are retried, never raised.
        """
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

    def _close_stream(self) -> None:
        with self._stream_lock:
            stream = self._stream
        close = getattr(stream, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - closing is best effort
                self._log.debug("closing the watch stream failed", exc_info=True)

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
                    if isinstance(err, ApiError) and self._shards.rejected(err.status):
                        continue
                    if isinstance(err, ApiError) and err.is_gone:
                        list_rv = ""
                    self._failed("list", err)
                    continue
                self._on_replace(staging, rv)
                self._set_rv(rv)
                need_list = False
            try:
                self._watch_once()
            except _Stopped:
                return
            except ApiError as err:
                if self._stopping:
                    return
                if self._shards.rejected(err.status):
                    need_list = True
                    continue
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
        shards = self._shards
        listed = 0

        def stage(obj: dict[str, Any]) -> dict[str, Any]:
            nonlocal listed
            listed += 1
            if not shards.keep(obj):
                return obj
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
        shards.list_started()
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
                    **shards.argument(),
                )
            except ApiError as err:
                if not (err.is_gone and continue_):
                    raise
                # The continue token expired (compaction): one unpaged list instead.
                self._log.info("list continuation expired; listing in one go")
                staging = self._indexer.staging()
                continue_ = None
                listed = 0
                shards.list_started()
                page = self._client.list(
                    self._resource,
                    self._namespace,
                    label_selector=self._label_selector,
                    field_selector=self._field_selector,
                    resource_version=rv or None,
                    item_hook=stage,
                    **shards.argument(),
                )
            meta = page.get("metadata") or {}
            page_rv = meta.get("resourceVersion")
            if page_rv:
                list_rv = str(page_rv)
            continue_ = meta.get("continue") or None
            if not continue_:
                shards.list_answered(meta, listed)
                break
        if self._stopping:
            raise _Stopped
        return staging, list_rv

    def _watch_once(self) -> None:
        """Open one watch from the current RV and pump its events into the FIFO.

        Raises:
            ApiError: the watch could not be opened, broke, or reported an ERROR.
            _Stopped: the reflector is stopping.
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
            **self._shards.argument(),
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
            if self._shards.keep(obj):
                self._on_event(typ, self._prepare(obj))
            else:
                self._shards.watch_dropped(obj)
        elif typ != "BOOKMARK":
            self._log.warning("ignoring a watch event of unknown type", type=typ)
            return
        if rv:
            self._set_rv(str(rv))
