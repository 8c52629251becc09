"""Health probes: ``/healthz`` (liveness) and ``/readyz`` (readiness) over HTTP.

As controller-runtime's healthz server: each endpoint runs its named checks and answers
200 ``ok`` when all pass, 503 listing the failing checks otherwise, each with the reason
it gave (``[-]informer configmaps/ns failed: forbidden to list ...``). ``?verbose`` lists
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

#: A probe check: returns ``True`` or ``None`` when it passes, ``False`` or a non-empty
#: one-line reason when it fails (as a Go ``healthz.Checker`` returns nil or an error).
Check = Callable[[], bool | str | None]


def run_check(check: Check) -> str | None:
    """Run one check; return ``None`` when it passes, else why it failed.

    The reason is one line, ``""`` when the check gave none. A check that raises fails
    with the exception's text (and is logged).
    """
    try:
        outcome = check()
    except Exception as err:  # a broken check is a failing check
        log.exception("health check raised")
        return f"check raised {type(err).__name__}: {err}"
    if outcome is None or outcome is True:
        return None
    if not outcome:
        return ""
    return " ".join(str(outcome).split())


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
                results = {name: run_check(check) for name, check in checks.items()}
                failed = [n for n, why in results.items() if why is not None]
                if "verbose" in url.query or failed:
                    lines = [
                        f"[+]{n} ok" if why is None else f"[-]{n} failed" + (why and f": {why}")
                        for n, why in results.items()
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
