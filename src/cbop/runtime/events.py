"""Kubernetes Events: what a controller did and why, for ``kubectl describe``.

This module owns :class:`EventRecorder`, the one Event recorder of a process: the
manager makes it and every controller records through it (the
:class:`cbop.runtime.seams.EventSink` seam). As client-go's recorder and broadcaster,
Events are correlated (:mod:`cbop.runtime.correlator`) and written by a background
thread from a bounded queue, so a reconcile never waits for an Event write and a failed
one never fails a reconcile. While the API server throttles the client the thread writes
nothing, leaving API Priority and Fairness' seats to the reconcile writes. Which Events
are written is the ``--events`` level (:data:`EventLevel`, :meth:`EventRecorder.wants`).
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

import structlog

from cbop.kube import EVENTS, ApiError, LeaseNotHeld, Resource
from cbop.runtime.correlator import EventCorrelator, WallClock, event_timestamp
from cbop.runtime.seams import EventType

__all__ = ["EVENT_LEVELS", "EventLevel", "EventRecorder", "EventType", "EventWriter"]

log = structlog.get_logger("cbop.events")

#: Events waiting to be written, at most (client-go's broadcaster queue is 1,000 too).
_QUEUE_SIZE = 1000
#: Which Events a recorder writes (see the module docstring).
EventLevel = Literal["notable", "all", "none"]
EVENT_LEVELS: tuple[EventLevel, ...] = ("notable", "all", "none")


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
        stamp = event_timestamp(now)
        fingerprint = (meta.get("uid", ""), type_, reason, message)
        suffix = hashlib.sha256(f"{fingerprint}{now.timestamp()}".encode()).hexdigest()[:10]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            # An Event about a cluster-scoped object lives in "default", as client-go's
            # recorder puts it (its involvedObject has no namespace).
            "metadata": {
                "name": f"{meta['name']}.{suffix}",
                "namespace": meta.get("namespace") or "default",
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta["name"],
                "namespace": meta.get("namespace", ""),
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
