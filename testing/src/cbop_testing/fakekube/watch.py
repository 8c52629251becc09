"""A watch stream fed by the fake API server's tracker or by the test itself.

This module owns :class:`FakeWatch`, what :meth:`cbop_testing.fakekube.FakeKube.watch`
returns (as client-go's ``watch.FakeWatcher`` / ``RaceFreeFakeWatcher``): a queue of
events read by the code under test, written by :class:`~cbop_testing.fakekube.ObjectTracker`
as objects change, or by the test with :meth:`FakeWatch.push`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cbop.kube import ApiError, WatchInterface

__all__ = ["FakeWatch"]

_END = object()


class FakeWatch:
    """A watch stream the tracker or the test feeds: a :class:`~cbop.kube.WatchInterface`.

    Items pushed are event dicts (``{"type": ..., "object": ...}``), exceptions (raised to
    the reader in turn, e.g. a :class:`~cbop.kube.ConnectionFailed`), or the end of the
    stream (:meth:`end`, as the server closing the watch at ``timeoutSeconds``). An
    ``ERROR`` event is raised as :class:`ApiError` decoded from its ``Status``, as the
    real stream does. Reading blocks until an item arrives or the stream is closed.

    Args:
        on_close: called once when the reader closes the stream (the tracker stops
            feeding it).
        allow_bookmarks: whether the watch asked for BOOKMARK events.

    Attributes:
        closed: set once :meth:`close` was called or the end was read.
        sent: every item pushed so far, in order (for assertions).
    """

    def __init__(
        self,
        *,
        on_close: Callable[[], None] | None = None,
        allow_bookmarks: bool = True,
    ) -> None:
        self._items: queue.Queue[Any] = queue.Queue()
        self.closed = threading.Event()
        self.sent: list[Any] = []
        self.allow_bookmarks = allow_bookmarks
        self._close_hook = on_close
        self._hook_lock = threading.Lock()

    def push(self, *items: dict[str, Any] | BaseException) -> None:
        """Queue events or exceptions for the reader (dropped once the stream is closed)."""
        for item in items:
            if self.closed.is_set():
                return
            self.sent.append(item)
            self._items.put(item)

    def on_close(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` once when the stream is closed or ends."""
        with self._hook_lock:
            self._close_hook = hook

    def end(self) -> None:
        """End the stream as the server does: the reader's iteration stops."""
        self._items.put(_END)

    def __iter__(self) -> FakeWatch:
        return self

    def __next__(self) -> dict[str, Any]:
        """Return the next event (blocking).

        Raises:
            StopIteration: the stream ended or was closed.
            ApiError: an ``ERROR`` event (``is_gone`` for a 410 Expired).
            BaseException: whatever exception the feeder pushed.
        """
        if self.closed.is_set() and self._items.empty():
            raise StopIteration
        item = self._items.get()
        if item is _END:
            self.closed.set()
            self._run_close_hook()
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        if item.get("type") == "ERROR":
            raise ApiError.from_status(item.get("object") or {})
        return dict(item)

    def close(self) -> None:
        """Close from any thread: a blocked reader wakes and stops."""
        if not self.closed.is_set():
            self.closed.set()
            self._items.put(_END)
        self._run_close_hook()

    def _run_close_hook(self) -> None:
        with self._hook_lock:
            hook, self._close_hook = self._close_hook, None
        if hook is not None:
            hook()

    def __enter__(self) -> FakeWatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


if TYPE_CHECKING:  # FakeWatch implements the watch protocol, member by member
    _WATCH: type[WatchInterface] = FakeWatch
