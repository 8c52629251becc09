"""Watch streams: an open WATCH response, read as decoded events.

This module owns :class:`WatchStream`, what :meth:`cbop.kube.KubeClient.watch` returns:
the raw response body split into lines and decoded as JSON (``orjson``, no models), as
client-go's ``watch.StreamWatcher`` over a JSON framer. Closing it from another thread
unblocks a reader waiting on the socket.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final, cast

from cbop.kube.codec import decode_body
from cbop.kube.errors import TRANSPORT_ERRORS, ApiError, ConnectionFailed, connection_failed

__all__ = ["WatchStream"]

#: Largest read from the socket, bytes.
_READ_SIZE: Final = 64 * 1024


class WatchStream(Iterator[dict[str, Any]]):
    r"""An open watch response, iterated as decoded events.

    Each item is the event dict as the API server sends it, ``{"type": "ADDED" |
    "MODIFIED" | "DELETED" | "BOOKMARK", "object": {...}}``; lines are split on ``\\n``
    from the raw stream and decoded with :func:`cbop.kube.codec.decode_body` (no models).

    Raises (from ``__next__``):
        ApiError: for an ``ERROR`` event, decoded from its ``Status`` object (as
            client-go's reflector does with ``apierrors.FromObject``); a compacted
            resourceVersion arrives as ``status == 410`` (``reason`` ``Expired`` or
            ``Gone``, ``is_gone`` true).
        ConnectionFailed: the connection broke, or no byte arrived within the read
            timeout (``timed_out`` true): the stream went silent.

    Iteration stops when the server ends the watch (``timeoutSeconds`` elapsed) or when
    :meth:`close` is called. :meth:`close` may be called from any thread; it unblocks a
    reader waiting on the socket. The connection is never returned to the pool mid-stream.

    Args:
        response: the open ``urllib3.HTTPResponse`` of a 2xx watch, unread
            (:meth:`cbop.kube.transport.Transport.open_watch`).
        on_close: called once when the stream is cleaned up, whatever ended it.
    """

    def __init__(self, response: Any, *, on_close: Callable[[], None] | None = None) -> None:
        self._response = response
        self._buffer = b""
        self._lock = threading.Lock()
        self._reading = False
        self._closed = False
        self._cleaned = False
        self._on_close = on_close

    def __iter__(self) -> WatchStream:
        return self

    def __next__(self) -> dict[str, Any]:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = self._buffer[:newline]
                self._buffer = self._buffer[newline + 1 :]
                if line.strip():
                    return self._decode(line)
                continue
            chunk = self._read()
            if not chunk:
                line = self._buffer
                self._buffer = b""
                if line.strip() and not self._closed:
                    return self._decode(line)
                self._cleanup()
                raise StopIteration
            self._buffer += chunk

    def _read(self) -> bytes:
        with self._lock:
            if self._closed:
                return b""
            self._reading = True
        try:
            return cast(bytes, self._response.read1(_READ_SIZE))
        except TRANSPORT_ERRORS as exc:
            if self._closed:
                return b""
            self._cleanup()
            raise connection_failed(exc, "watch stream broken") from exc
        finally:
            with self._lock:
                self._reading = False

    def _decode(self, line: bytes) -> dict[str, Any]:
        try:
            event = decode_body(line)
        except ValueError as exc:
            self._cleanup()
            raise ConnectionFailed(f"undecodable watch event: {line[:200]!r}", cause=exc) from exc
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            self._cleanup()
            raise ConnectionFailed(f"malformed watch event: {line[:200]!r}")
        if event.get("type") == "ERROR":
            self._cleanup()
            raise ApiError.from_status(event["object"])
        return event

    def close(self) -> None:
        """Stop the stream and release its connection; safe from any thread, idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            reading = self._reading
        if reading:
            # Another thread is blocked in recv(): wake it with EOF; it cleans up.
            with contextlib.suppress(ValueError, RuntimeError, OSError):
                self._response.shutdown()
        else:
            self._cleanup()

    def _cleanup(self) -> None:
        with self._lock:
            if self._cleaned:
                return
            self._cleaned = True
            self._closed = True
        try:
            self._response.close()
            self._response.release_conn()
        except TRANSPORT_ERRORS:
            pass
        if self._on_close is not None:
            self._on_close()

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
