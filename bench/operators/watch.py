"""The bench's one reconnecting watch loop, and the base of what follows its events.

Every observation the scenarios make comes from watches held by the bench, never from
polling: :class:`Watch` lists each stream once, hands every listed object to a handler
as ``ADDED``, then watches from the list's resourceVersion, reconnecting from the last
one it saw whenever the stream ends or fails. Timestamps are ``time.monotonic()`` when an
event is decoded. A :class:`Tracker` holds what a scenario derives from the events, under
one lock, and lets it wait until a condition holds.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from cbop.kube import ApiError, ConnectionFailed, KubeClient, Resource

#: ``handler(resource, event type, object, monotonic time of decoding)``.
Handler = Callable[[Resource, str, Mapping[str, Any], float], None]


@dataclass(frozen=True)
class Stream:
    """One list-and-watch: a resource in a namespace (None: all), optionally selected."""

    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None


class Watch:
    """One thread per :class:`Stream`, each listing then watching, reconnecting for ever.

    Args:
        kube: a client (watches are not rate limited).
        streams: what to watch.
        handler: called for every listed object and every ADDED, MODIFIED or DELETED
            event, on the stream's thread (BOOKMARK and ERROR events are skipped).
    """

    def __init__(self, kube: KubeClient, streams: Sequence[Stream], handler: Handler) -> None:
        self._kube = kube
        self._streams = tuple(streams)
        self._handler = handler
        self._stop = threading.Event()
        self._open: list[Any] = []
        self._threads: list[threading.Thread] = []
        self._synced = threading.Barrier(len(self._streams) + 1)

    def start(self) -> Watch:
        """Start the threads; return once every stream has been listed and handled."""
        for stream in self._streams:
            t = threading.Thread(
                target=self._run, args=(stream,), name=f"watch-{stream.resource.plural}"
            )
            t.daemon = True
            t.start()
            self._threads.append(t)
        self._synced.wait(60)
        return self

    def stop(self) -> None:
        self._stop.set()
        for stream in list(self._open):
            with contextlib.suppress(Exception):
                stream.close()
        for t in self._threads:
            t.join(5)

    def _run(self, s: Stream) -> None:
        listed = self._kube.list(
            s.resource,
            s.namespace,
            label_selector=s.label_selector,
            field_selector=s.field_selector,
        )
        for item in listed["items"]:
            self._handler(s.resource, "ADDED", item, time.monotonic())
        rv = listed["metadata"]["resourceVersion"]
        self._synced.wait(60)
        while not self._stop.is_set():
            try:
                stream = self._kube.watch(
                    s.resource,
                    s.namespace,
                    resource_version=rv,
                    label_selector=s.label_selector,
                    field_selector=s.field_selector,
                    timeout_seconds=1800,
                    read_timeout=150,
                )
            except (ApiError, ConnectionFailed):
                if self._stop.wait(0.5):
                    return
                continue
            self._open.append(stream)
            try:
                for event in stream:
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._handler(s.resource, event["type"], obj, time.monotonic())
            except (ApiError, ConnectionFailed):
                if self._stop.is_set():
                    return
            finally:
                stream.close()
                with contextlib.suppress(ValueError):
                    self._open.remove(stream)


class Tracker:
    """State derived from watch events, behind one lock, and the watch that feeds it.

    A subclass implements :meth:`handle` (called with the lock held) and names its
    streams; it calls :meth:`changed` when a waiter may have something to see.
    ``events`` counts every event handled.
    """

    def __init__(self, kube: KubeClient, streams: Sequence[Stream]) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._watch = Watch(kube, streams, self._on_event)
        self.events = 0

    def start(self) -> Self:
        """Start watching; return ``self`` once every stream is listed."""
        self._watch.start()
        return self

    def stop(self) -> None:
        self._watch.stop()

    def _on_event(self, res: Resource, kind: str, obj: Mapping[str, Any], now: float) -> None:
        with self._lock:
            self.events += 1
            self.handle(res, kind, obj, now)

    def handle(self, res: Resource, kind: str, obj: Mapping[str, Any], now: float) -> None:
        raise NotImplementedError

    def changed(self) -> None:
        """Wake the waiters (call with the lock held, i.e. from :meth:`handle`)."""
        self._cond.notify_all()

    def wait_until(self, holds: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``holds()`` (evaluated with the lock held) is true; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not holds():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 1.0))
        return True


class ChangeTracker(Tracker):
    """A :class:`Tracker` of objects that change to an expected value: per object key
    (``namespace/name``), when it first showed the value (``seen``, monotonic seconds) and
    its MODIFIED events since the expectation began (``modified``). A subclass fills both
    in :meth:`handle`."""

    def __init__(self, kube: KubeClient, streams: Sequence[Stream]) -> None:
        super().__init__(kube, streams)
        self.seen: dict[str, float] = {}
        self.modified: dict[str, int] = {}

    def wait_all(self, keys: list[str], timeout: float) -> bool:
        """Wait until every one of ``keys`` has shown the expected value; False on timeout."""
        return self.wait_until(lambda: all(k in self.seen for k in keys), timeout)

    def last_seen(self, keys: list[str]) -> float | None:
        """When the last of ``keys`` showed the expected value (None: none has)."""
        with self._lock:
            times = [self.seen[k] for k in keys if k in self.seen]
        return max(times) if times else None

    def spread(self, keys: list[str], t0: float) -> list[float]:
        """Seconds after ``t0`` when the first, the median and the last of ``keys`` changed."""
        with self._lock:
            times = sorted(self.seen[k] - t0 for k in keys if k in self.seen)
        if not times:
            return []
        return [round(times[0], 3), round(times[len(times) // 2], 3), round(times[-1], 3)]

    def modified_histogram(self, keys: list[str]) -> dict[int, int]:
        """k -> how many of ``keys`` saw k MODIFIED events since the expectation began."""
        with self._lock:
            out: dict[int, int] = {}
            for k in keys:
                n = self.modified.get(k, 0)
                out[n] = out.get(n, 0) + 1
            return out
