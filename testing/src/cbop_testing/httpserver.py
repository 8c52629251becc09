"""A scripted HTTP server for the unit tests of the client's transport.

This module owns :class:`ScriptedServer`, a real HTTP/1.1 server on a loopback port
whose every answer the test writes (:class:`Reply`, from each :class:`Seen` request),
for tests of what goes over the wire: retries, Retry-After, gzip, streamed lists and
watches, timeouts. Tests of everything above the client use
:mod:`cbop_testing.fakekube` instead.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["Reply", "Responder", "ScriptedServer", "Seen"]


@dataclass
class Seen:
    """One request as the server received it (query values as ``parse_qs`` gives them)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class Reply:
    """The answer to one request: status, JSON body and headers, or a stream of chunks."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    # For streaming replies: chunks written one by one, then hold the connection open
    # until `release` is set (or close it at once when `release` is None).
    chunks: list[bytes] | None = None
    release: threading.Event | None = None
    abort: bool = False  # close the connection without ending the chunked body
    raw: bytes | None = None  # a body sent as is (with `headers`), not JSON-encoded


Responder = Callable[[Seen], Reply]


class ScriptedServer:
    """A scripted HTTP/1.1 server on 127.0.0.1: each request is recorded, then answered.

    Real sockets, so the client's transport (urllib3 or libcurl), timeouts, chunked
    streams and connection aborts are exercised as against a real API server. Close it
    with :meth:`close`.

    Args:
        responder: called on the server's thread with each :class:`Seen` request; its
            :class:`Reply` is sent back.

    Attributes:
        requests: every request received, in order.
    """

    def __init__(self, responder: Responder) -> None:
        self.requests: list[Seen] = []
        self.responder = responder
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                url = urlsplit(self.path)
                seen = Seen(
                    self.command,
                    url.path,
                    parse_qs(url.query),
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                )
                outer.requests.append(seen)
                reply = outer.responder(seen)
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                if reply.chunks is not None:
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for chunk in reply.chunks:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    if reply.release is not None:
                        reply.release.wait(10)
                    if reply.abort:
                        self.close_connection = True
                        return
                    # A complete chunked body leaves the connection open for the
                    # next request, as a real API server does (HTTP/1.1 keep-alive).
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    return
                if reply.raw is not None:
                    data = reply.raw
                else:
                    data = b"" if reply.body is None else json.dumps(reply.body).encode()
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        """The server's base URL, ``http://127.0.0.1:<port>``."""
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        """Stop serving and close the listening socket."""
        self.server.shutdown()
        self.server.server_close()
