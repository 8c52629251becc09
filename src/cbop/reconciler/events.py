"""Kubernetes Events on ConfigBundles: what cbop did and why, for ``kubectl describe``.

:class:`EventRecorder` writes core/v1 Events, as client-go's record.EventRecorder. Like
client-go's EventCorrelator it suppresses an identical event (same object, type, reason
and message) seen within the last 10 minutes, so a repeating condition (a name conflict
rechecked every few seconds) does not flood the API server. Like client-go's
broadcaster, events are written by a background thread from a bounded queue (1,000
events; more are dropped and logged), so a reconcile never waits for an Event write.
Failures to record are logged and never fail a reconcile. The sink thread survives any
exception (logged and counted in :attr:`EventRecorder.failed`), and :meth:`EventRecorder.close`
returns within its timeout however full the queue or slow the API server.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any, Literal, Protocol

import cachetools
import structlog

from cbop.kube import EVENTS, ApiError, LeaseNotHeld, Resource

log = structlog.get_logger("cbop.events")

#: Events waiting to be written, at most (client-go's broadcaster queue is 1,000 too).
_QUEUE_SIZE = 1000

EventType = Literal["Normal", "Warning"]


class EventWriter(Protocol):
    """The one client call the recorder needs (satisfied by :class:`cbop.kube.KubeClient`)."""

    def create(
        self, res: Resource, namespace: str | None, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Create ``body`` in ``namespace``; raise :class:`cbop.kube.ApiError` on failure."""
        ...


class EventRecorder:
    """Records Events about objects, deduplicated for 10 minutes.

    Args:
        client: something with ``create(EVENTS, namespace, body)``.
        component: ``source.component`` / ``reportingController`` of the events.
        instance: ``reportingInstance`` (e.g. the pod name).
        dedup_seconds: how long an identical event is suppressed (seconds).
        clock: wall-clock function returning an aware datetime (tests pass a fixed one).
    """

    def __init__(
        self,
        client: EventWriter,
        *,
        component: str = "cbop",
        instance: str = "",
        dedup_seconds: float = 600.0,
        clock: Any = None,
    ) -> None:
        self._client = client
        self._component = component
        self._instance = instance
        self._now = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self._recent: cachetools.TTLCache[tuple[str, str, str, str], bool] = cachetools.TTLCache(
            maxsize=10_000, ttl=dedup_seconds
        )
        self._lock = threading.Lock()  # guards _recent (TTLCache is not thread-safe)
        # Reconcile threads put, the sink thread takes; None asks the sink to stop.
        self._pending: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue(
            maxsize=_QUEUE_SIZE
        )
        self._sink: threading.Thread | None = None
        self._sink_lock = threading.Lock()
        self.dropped = 0
        #: Events the sink failed to write (API errors, a closed write fence, bugs).
        self.failed = 0

    def event(self, obj: Mapping[str, Any], type_: EventType, reason: str, message: str) -> None:
        """Record one Event about ``obj`` (a dict with apiVersion, kind and metadata).

        Never raises: API errors are logged at debug level (Events are best effort).
        """
        meta = obj["metadata"]
        fingerprint = (meta.get("uid", ""), type_, reason, message)
        with self._lock:
            if fingerprint in self._recent:
                return
            self._recent[fingerprint] = True
        now = self._now()
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
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
            self._pending.put_nowait((meta["namespace"], body))
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
                namespace, body = item
                try:
                    self._client.create(EVENTS, namespace, body)
                except (ApiError, LeaseNotHeld) as err:
                    self.failed += 1
                    log.debug("event not recorded", reason=body["reason"], error=str(err))
                except Exception:  # the sink must outlive a bug, and say so
                    self.failed += 1
                    with contextlib.suppress(Exception):  # even a broken log stream
                        log.exception("event sink failed to write an event", reason=body["reason"])
            finally:
                self._pending.task_done()

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
