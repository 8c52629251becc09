"""Health probes: ``/healthz`` (liveness) and ``/readyz`` (readiness) over HTTP.

As controller-runtime's healthz server: each endpoint runs its named checks and answers
200 ``ok`` when all pass, 503 listing the failing checks otherwise. ``?verbose`` lists
every check. The server runs on its own daemon thread (``http.server`` from the
standard library; probes are tiny and rare).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

import structlog

log = structlog.get_logger("cbop.health")

Check = Callable[[], bool]


def parse_bind_address(address: str, default_host: str = "0.0.0.0") -> tuple[str, int] | None:
    """Parse ``host:port`` / ``:port`` / ``port``; return None for ``0`` (disabled).

    Raises:
        ValueError: the address has no valid port.
    """
    if address in ("0", ""):
        return None
    host, sep, port = address.rpartition(":")
    if not sep:
        host, port = "", address
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"bind address {address!r} has no valid port") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"bind address {address!r}: port out of range")
    return (host.strip("[]") or default_host, number)


class ProbeServer:
    """Serves ``/healthz`` and ``/readyz`` from check functions.

    Args:
        address: ``(host, port)``; port 0 picks a free port (see :attr:`port`).
        liveness: name -> check for ``/healthz``.
        readiness: name -> check for ``/readyz``.
    """

    def __init__(
        self,
        address: tuple[str, int],
        *,
        liveness: Mapping[str, Check],
        readiness: Mapping[str, Check],
    ) -> None:
        endpoints = {"/healthz": dict(liveness), "/readyz": dict(readiness)}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                checks = endpoints.get(url.path.rstrip("/") or "/")
                if checks is None:
                    self.send_error(404)
                    return
                results = {}
                for name, check in checks.items():
                    try:
                        results[name] = bool(check())
                    except Exception:  # a broken check is a failing check
                        log.exception("health check raised", check=name)
                        results[name] = False
                failed = [n for n, ok in results.items() if not ok]
                if "verbose" in url.query or failed:
                    lines = [
                        f"[{'+' if ok else '-'}]{n} {'ok' if ok else 'failed'}"
                        for n, ok in results.items()
                    ]
                    body = "\n".join(lines) + ("\nhealthz check failed\n" if failed else "\nok\n")
                else:
                    body = "ok"
                data = body.encode()
                self.send_response(503 if failed else 200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                """Keep probe traffic out of the logs."""

        self._server = http.server.ThreadingHTTPServer(address, Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="cbop-probes", daemon=True
        )

    @property
    def port(self) -> int:
        """The port actually bound."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Start serving on a daemon thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
