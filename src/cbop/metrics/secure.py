"""``/metrics`` over HTTPS for callers the API server authorizes (``--metrics-secure``).

Since kube-rbac-proxy was retired, controller-runtime serves metrics itself behind
authentication and authorization delegated to the API server; cbop does the same. This
module owns the HTTPS server (:class:`SecureMetricsServer`) and how the manager starts
it (:func:`start_secure_metrics_server`, called by :class:`cbop.manager.Manager`); its
parts have modules of their own:

- :mod:`cbop.metrics.delegatingauth`: who may read ``/metrics`` (a ``TokenReview``,
  then a ``SubjectAccessReview`` for ``get`` on ``/metrics``; 401, 403, or 500/503 when
  a review fails), each token's decision cached for 10 s;
- :mod:`cbop.metrics.reviews`: the reviews themselves, created with the API client;
- :mod:`cbop.metrics.servingcert`: the serving certificate, self-signed in memory or
  ``tls.crt``/``tls.key`` from ``--metrics-cert-dir``, re-read when they change.

Their public names are re-exported here. Health probes stay plain HTTP on their own
port (:mod:`cbop.health`).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Mapping
from typing import Any

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from cbop.kube import KubeInterface
from cbop.metrics.delegatingauth import (
    DEFAULT_CACHE_SIZE,
    DEFAULT_TTL,
    METRICS_PATH,
    Decision,
    DelegatingAuth,
)
from cbop.metrics.reviews import (
    SUBJECT_ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    KubeReviewClient,
    ReviewClient,
    ReviewError,
    UserInfo,
)
from cbop.metrics.servingcert import CertSource, self_signed_certificate

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "DEFAULT_TTL",
    "METRICS_PATH",
    "SUBJECT_ACCESS_REVIEWS",
    "TOKEN_REVIEWS",
    "CertSource",
    "Decision",
    "DelegatingAuth",
    "KubeReviewClient",
    "ReviewClient",
    "ReviewError",
    "SecureMetricsServer",
    "UserInfo",
    "self_signed_certificate",
    "start_secure_metrics_server",
]

log = structlog.get_logger("cbop.metrics.secure")

#: Seconds a client may take for the TLS handshake and for each read.
_CONNECTION_TIMEOUT = 30.0


class SecureMetricsServer(http.server.ThreadingHTTPServer):
    """HTTPS server of ``/metrics`` behind :class:`DelegatingAuth`, on its own thread.

    Each connection is wrapped in TLS on its own handler thread, so a slow handshake
    holds up nobody else. Answers: 200 with the exposition (text or OpenMetrics, by the
    ``Accept`` header, as ``prometheus_client`` serves it), 401/403/500/503 with a
    one-line reason, 404 for other paths (501 for methods other than GET).

    Args:
        address: ``(host, port)``; port 0 picks a free port (see :attr:`port`).
        registry: the metrics served.
        auth: decides each request.
        certs: the serving certificate.

    Raises:
        OSError: the address cannot be bound.
    """

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        auth: DelegatingAuth,
        certs: CertSource,
    ) -> None:
        self.registry = registry
        self.auth = auth
        self.certs = certs
        super().__init__(address, _Handler)
        self._thread = threading.Thread(target=self.serve_forever, name="cbop-metrics", daemon=True)

    @property
    def port(self) -> int:
        """The port actually bound."""
        return int(self.server_address[1])

    def start(self) -> None:
        """Start serving on a daemon thread."""
        self._thread.start()

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Do the TLS handshake on the handler's thread, then handle the request."""
        request.settimeout(_CONNECTION_TIMEOUT)
        try:
            conn = self.certs.context().wrap_socket(request, server_side=True)
        except (OSError, ValueError) as err:
            log.debug("metrics TLS handshake failed", client=client_address[0], error=str(err))
            return
        try:
            super().finish_request(conn, client_address)
        finally:
            conn.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: SecureMetricsServer

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") != METRICS_PATH:
            self._reply(404, "not found")
            return
        decision = self.server.auth.check(self.headers.get("Authorization"))
        if decision.code != 200:
            if decision.code == 401:
                self._reply(401, "Unauthorized", {"WWW-Authenticate": 'Bearer realm="cbop"'})
            else:
                self._reply(decision.code, decision.reason)
            return
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        body = encoder(self.server.registry)
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _reply(self, code: int, text: str, headers: Mapping[str, str] | None = None) -> None:
        data = (text + "\n").encode()
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Keep scrape traffic out of the logs (failed reviews are logged)."""


def start_secure_metrics_server(
    address: tuple[str, int],
    registry: CollectorRegistry,
    client: KubeInterface,
    certs: CertSource,
) -> SecureMetricsServer:
    """Serve ``registry`` on ``address`` as ``--metrics-secure`` does; return the server.

    The reviews use ``client`` without its client-side rate limit and without retries
    (a scrape must not wait behind the controller's requests). Stop it with
    ``shutdown()`` and ``server_close()``.

    Raises:
        OSError: the address cannot be bound.
    """
    reviews = KubeReviewClient(client.with_limits(qps=0, burst=0, max_retries=0))
    auth = DelegatingAuth(reviews, registry=registry)
    server = SecureMetricsServer(address, registry, auth, certs)
    server.start()
    return server
