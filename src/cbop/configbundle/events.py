"""Kubernetes Events on ConfigBundles: what cbop did and why, for ``kubectl describe``.

:class:`EventRecorder` writes core/v1 Events, as client-go's record.EventRecorder, and
correlates them first as client-go's EventCorrelator does (:class:`EventCorrelator`):

* a repeat (same involved object, type, reason, message and source) is not a new Event:
  the existing one is PATCHed with ``count + 1``, a new ``lastTimestamp`` and the
  message, so ``kubectl describe`` shows ``x4 over 3m``;
* after 10 different messages with the same object, type and reason within 10 minutes,
  further ones are combined into one Event "(combined from similar events): ...",
  itself counted;
* a spam filter, a token bucket per source and involved object (burst 25, refilled one
  every 5 minutes), drops what exceeds it, so a hot loop cannot flood the API server;
  the counts keep accruing meanwhile, and the next write carries them.

Like client-go's broadcaster, events are correlated and written by a background thread
from a bounded queue (1,000 events; more are dropped and logged), so a reconcile never
waits for an Event write. While the API server throttles the client (a 429 whose
retries are not all due yet, see :meth:`cbop.kube.KubeClient.wait_while_throttled`),
the sink writes nothing, leaving the seats API Priority and Fairness grants cbop to the
reconcile writes; the queued Events follow once the throttling stops. Failures to record
are logged and never fail a reconcile.
The sink thread survives any exception (logged and counted in
:attr:`EventRecorder.failed`), and :meth:`EventRecorder.close` returns within its timeout
however full the queue or slow the API server.

Which Events are written is the recorder's ``level`` (the ``--events`` flag):

* ``notable`` (the default): what a user must look at in ``kubectl describe``: changes
  made out of band and undone or worked around (drift corrected, ConfigMap replaced,
  adopted, deleted, orphaned) and every Warning (conflict, invalid spec, too large).
  Routine Events (a ConfigMap created or updated because the spec asked for it) are not
  written: the bundle's status already records them, and an Event would be a third
  API write per new bundle.
* ``all``: routine Events too.
* ``none``: no Events at all.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import cachetools
import structlog

from cbop.kube import EVENTS, ApiError, LeaseNotHeld, Resource
from cbop.tokenbucket import TokenBucket

log = structlog.get_logger("cbop.events")

#: Events waiting to be written, at most (client-go's broadcaster queue is 1,000 too).
_QUEUE_SIZE = 1000
#: Entries of each correlation cache (client-go's maxLruCacheEntries).
_CACHE_ENTRIES = 4096
#: Spam filter: burst and refill rate (tokens/second) per source and involved object
#: (client-go's defaultSpamBurst and defaultSpamQPS, one token per 5 minutes).
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
#: Aggregation: this many distinct messages per object, type and reason within
#: ``AGGREGATE_INTERVAL`` seconds start the combined Event (client-go's defaults).
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = 600.0
_COMBINED_PREFIX = "(combined from similar events): "

EventType = Literal["Normal", "Warning"]
#: Which Events a recorder writes (see the module docstring).
EventLevel = Literal["notable", "all", "none"]
EVENT_LEVELS: tuple[EventLevel, ...] = ("notable", "all", "none")
WallClock = Callable[[], datetime.datetime]


class EventWriter(Protocol):
    """The client calls the recorder needs (satisfied by :class:`cbop.kube.KubeClient`)."""

    def create(
        self, res: Resource, namespace: str | None, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Create ``body`` in ``namespace``; raise :class:`cbop.kube.ApiError` on failure."""
        ...

    def patch(
        self, res: Resource, namespace: str | None, name: str, body: Any, *, patch_type: str
    ) -> dict[str, Any]:
        """Patch object ``name``; raise :class:`cbop.kube.ApiError` on failure."""
        ...


@dataclass(frozen=True, slots=True)
class Correlated:
    """What to write for one Event after correlation.

    Attributes:
        event: the full Event body (for a create; carries the correlated count).
        patch: for a repeat, the strategic merge patch of the existing Event (``count``,
            ``lastTimestamp``, ``message``), else None (create ``event``).
        key: the correlation key, to record the written Event's name under.
    """

    event: dict[str, Any]
    patch: dict[str, Any] | None
    key: tuple[str, ...]


@dataclass(slots=True)
class _Observation:
    count: int
    first_timestamp: str
    name: str


@dataclass(slots=True)
class _Aggregate:
    messages: set[str] = field(default_factory=set)
    last_seen: float = float("-inf")


class _WallSeconds:
    """A ``TimeSource`` over a wall clock returning datetimes (for :class:`TokenBucket`)."""

    def __init__(self, clock: WallClock) -> None:
        self._clock = clock

    def now(self) -> float:
        return self._clock().timestamp()


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _object_key(event: Mapping[str, Any]) -> tuple[str, ...]:
    source = event.get("source") or {}
    obj = event["involvedObject"]
    return (
        str(source.get("component", "")),
        str(source.get("host", "")),
        str(obj.get("kind", "")),
        str(obj.get("namespace", "")),
        str(obj.get("name", "")),
        str(obj.get("uid", "")),
        str(obj.get("apiVersion", "")),
    )


class EventCorrelator:
    """Counts, combines and rate-limits Events as client-go's EventCorrelator does.

    Not thread-safe: the recorder's one sink thread owns it. Every cache holds at most
    4,096 entries (least recently used go first).

    Args:
        clock: wall clock returning aware datetimes (timestamps, the 10-minute
            aggregation window and the spam filter's refill).
        spam_burst: Events per source and involved object written at once.
        spam_qps: refill of that budget (tokens/second).
        max_events: distinct messages per object, type and reason before combining.
        max_interval: seconds after which an object's messages are forgotten.
    """

    def __init__(
        self,
        clock: WallClock,
        *,
        spam_burst: int = SPAM_BURST,
        spam_qps: float = SPAM_QPS,
        max_events: int = AGGREGATE_MAX_EVENTS,
        max_interval: float = AGGREGATE_INTERVAL,
    ) -> None:
        self._clock = clock
        self._seconds = _WallSeconds(clock)
        self._spam_burst = spam_burst
        self._spam_qps = spam_qps
        self._max_events = max_events
        self._max_interval = max_interval
        self._spam: cachetools.LRUCache[tuple[str, ...], TokenBucket] = cachetools.LRUCache(
            _CACHE_ENTRIES
        )
        self._aggregates: cachetools.LRUCache[tuple[str, ...], _Aggregate] = cachetools.LRUCache(
            _CACHE_ENTRIES
        )
        self._observed: cachetools.LRUCache[tuple[str, ...], _Observation] = cachetools.LRUCache(
            _CACHE_ENTRIES
        )

    def correlate(self, event: Mapping[str, Any]) -> Correlated | None:
        """Correlate a new Event; return what to write, or None when the spam filter drops it.

        Args:
            event: a complete core/v1 Event body with ``count`` 1.
        """
        now = self._clock()
        event, key = self._aggregate(dict(event), now)
        correlated = self._observe(event, key, now)
        bucket = self._spam.get(_object_key(event))
        if bucket is None:
            bucket = TokenBucket(self._spam_qps, self._spam_burst, clock=self._seconds)
            self._spam[_object_key(event)] = bucket
        if not bucket.try_take():
            return None
        return correlated

    def written(self, key: tuple[str, ...], event: Mapping[str, Any]) -> None:
        """Remember the name of the Event the API server stored for ``key``."""
        seen = self._observed.get(key)
        name = (event.get("metadata") or {}).get("name")
        if seen is not None and isinstance(name, str):
            seen.name = name

    def _aggregate(
        self, event: dict[str, Any], now: datetime.datetime
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        """Return ``event`` keyed by itself, or the combined Event keyed by its group."""
        group = (
            *_object_key(event),
            str(event.get("type", "")),
            str(event.get("reason", "")),
            str(event.get("reportingComponent", "")),
            str(event.get("reportingInstance", "")),
        )
        seconds = now.timestamp()
        record = self._aggregates.get(group)
        if record is None or seconds - record.last_seen > self._max_interval:
            record = _Aggregate()
        record.messages.add(event["message"])
        record.last_seen = seconds
        self._aggregates[group] = record
        if len(record.messages) < self._max_events:
            return event, (*group, event["message"])
        record.messages.pop()  # the set never grows past max_events
        combined = dict(event)
        combined["message"] = (_COMBINED_PREFIX + event["message"])[:1024]
        return combined, group

    def _observe(
        self, event: dict[str, Any], key: tuple[str, ...], now: datetime.datetime
    ) -> Correlated:
        seen = self._observed.get(key)
        stamp = _stamp(now)
        if seen is None:
            event["count"] = 1
            event["firstTimestamp"] = event["lastTimestamp"] = stamp
            self._observed[key] = _Observation(1, stamp, event["metadata"]["name"])
            return Correlated(event, None, key)
        seen.count += 1
        event["metadata"] = {**event["metadata"], "name": seen.name}
        event["count"] = seen.count
        event["firstTimestamp"] = seen.first_timestamp
        event["lastTimestamp"] = stamp
        patch = {"count": seen.count, "lastTimestamp": stamp, "message": event["message"]}
        return Correlated(event, patch, key)


class EventRecorder:
    """Records Events about objects, correlated as client-go's recorder does.

    Args:
        client: something with ``create(EVENTS, namespace, body)`` and
            ``patch(EVENTS, namespace, name, body, patch_type=...)``.
        component: ``source.component`` / ``reportingController`` of the events.
        instance: ``reportingInstance`` (e.g. the pod name).
        clock: wall-clock function returning an aware datetime (tests pass their own).
        level: which Events are written: ``notable`` (default; no routine Events),
            ``all`` or ``none`` (see the module docstring).

    Raises:
        ValueError: ``level`` is not one of :data:`EVENT_LEVELS`.
    """

    def __init__(
        self,
        client: EventWriter,
        *,
        component: str = "cbop",
        instance: str = "",
        clock: WallClock | None = None,
        level: EventLevel = "notable",
    ) -> None:
        if level not in EVENT_LEVELS:
            raise ValueError(f"event level {level!r} is not one of {', '.join(EVENT_LEVELS)}")
        self.level: EventLevel = level
        self._client = client
        self._component = component
        self._instance = instance
        self._now: WallClock = clock or (lambda: datetime.datetime.now(datetime.UTC))
        # Owned by the sink thread.
        self._correlator = EventCorrelator(self._now)
        # Reconcile threads put, the sink thread takes; None asks the sink to stop.
        self._pending: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=_QUEUE_SIZE)
        self._sink: threading.Thread | None = None
        self._sink_lock = threading.Lock()
        self.dropped = 0
        #: Events the sink failed to write (API errors, a closed write fence, bugs).
        self.failed = 0

    def wants(self, type_: EventType, *, routine: bool = False) -> bool:
        """Whether an Event of ``type_`` (``routine``: a change the spec asked for) is written.

        ``none`` writes nothing, ``all`` everything; ``notable`` every Warning and every
        Normal Event that is not routine.
        """
        if self.level == "none":
            return False
        return self.level == "all" or type_ == "Warning" or not routine

    def event(
        self,
        obj: Mapping[str, Any],
        type_: EventType,
        reason: str,
        message: str,
        *,
        routine: bool = False,
    ) -> None:
        """Record one Event about ``obj`` (a dict with apiVersion, kind and metadata).

        ``routine`` marks a change the spec asked for (a ConfigMap created or updated):
        written only at level ``all`` (see :meth:`wants`). Never raises and never blocks:
        the Event is queued for the sink thread, which correlates it and writes it; API
        errors are logged at debug level (Events are best effort).
        """
        if not self.wants(type_, routine=routine):
            return
        meta = obj["metadata"]
        now = self._now()
        stamp = _stamp(now)
        fingerprint = (meta.get("uid", ""), type_, reason, message)
        suffix = hashlib.sha256(f"{fingerprint}{now.timestamp()}".encode()).hexdigest()[:10]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{suffix}", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._instance or self._component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self._start_sink()
        try:
            self._pending.put_nowait(body)
        except queue.Full:
            self.dropped += 1
            log.warning("event queue full; event dropped", reason=reason, dropped=self.dropped)

    def _start_sink(self) -> None:
        with self._sink_lock:
            if self._sink is None:
                self._sink = threading.Thread(target=self._drain, name="cbop-events", daemon=True)
                self._sink.start()

    def _drain(self) -> None:
        while True:
            item = self._pending.get()
            try:
                if item is None:
                    return
                try:
                    self._yield_to_throttling()
                    self._write(item)
                except LeaseNotHeld as err:
                    self.failed += 1
                    log.debug("event not recorded", reason=item["reason"], error=str(err))
                except Exception:  # the sink must outlive a bug, and say so
                    self.failed += 1
                    with contextlib.suppress(Exception):  # even a broken log stream
                        log.exception("event sink failed to write an event", reason=item["reason"])
            finally:
                self._pending.task_done()

    def _yield_to_throttling(self) -> None:
        """Wait while the client is throttled by a 429 (if it can tell; test fakes cannot)."""
        wait = getattr(self._client, "wait_while_throttled", None)
        if callable(wait):
            wait()

    def _write(self, body: dict[str, Any]) -> None:
        """Correlate one Event and create it, or patch the Event it repeats."""
        correlated = self._correlator.correlate(body)
        if correlated is None:
            log.debug("event dropped by the spam filter", reason=body["reason"])
            return
        event = correlated.event
        namespace = event["metadata"]["namespace"]
        try:
            if correlated.patch is not None:
                try:
                    written = self._client.patch(
                        EVENTS,
                        namespace,
                        event["metadata"]["name"],
                        correlated.patch,
                        patch_type="strategic",
                    )
                except ApiError as err:
                    if not err.is_not_found:
                        raise
                    # Deleted meanwhile (Events expire after an hour): create it again,
                    # keeping the count, as client-go does.
                    written = self._client.create(EVENTS, namespace, event)
            else:
                written = self._client.create(EVENTS, namespace, event)
        except ApiError as err:
            self.failed += 1
            log.debug("event not recorded", reason=event["reason"], error=str(err))
            return
        self._correlator.written(correlated.key, written)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait up to ``timeout`` seconds until every queued Event was written (or failed).

        Returns:
            True when the queue drained in time.
        """
        deadline = time.monotonic() + timeout
        while self._pending.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (up to ``timeout`` seconds), then stop the sink thread.

        Returns within about ``timeout`` seconds: Events still queued then are dropped
        (counted in :attr:`dropped`), and a sink stuck in a request is left behind (it
        is a daemon thread).
        """
        deadline = time.monotonic() + timeout
        if not self.flush(timeout):
            while True:
                try:
                    item = self._pending.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    self.dropped += 1
                self._pending.task_done()
        with self._sink_lock:
            sink, self._sink = self._sink, None
        if sink is not None:
            with contextlib.suppress(queue.Full):
                self._pending.put_nowait(None)
            sink.join(max(0.0, deadline - time.monotonic()))
