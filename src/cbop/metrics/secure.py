"""``/metrics`` over HTTPS for callers the API server authorizes (``--metrics-secure``).

Since kube-rbac-proxy was retired, controller-runtime serves metrics itself behind
authentication and authorization delegated to the API server; this module does the
same for cbop:

- **Authentication**: the request's ``Authorization: Bearer <token>`` is checked with a
  ``TokenReview`` (``authentication.k8s.io/v1``). No token, or a token the API server
  does not authenticate, gets 401.
- **Authorization**: the user the review names is checked with a
  ``SubjectAccessReview`` (``authorization.k8s.io/v1``) for verb ``get`` on the
  non-resource URL ``/metrics`` (what the ClusterRole ``cbop-metrics-reader`` grants).
  A user without that right gets 403.
- **Caching**: each token's decision (allowed, 401 or 403) is kept for ``ttl`` seconds
  (10 by default), so a Prometheus scraping every 15 s costs at most one review pair
  per token and scrape. A review that fails (API server unreachable or refusing, e.g.
  cbop lacks the RBAC to create reviews) is not cached and answers 503 (unreachable,
  429 or 5xx: try again) or 500 (any other refusal), never a crash.
- **Serving certificate**: a self-signed ECDSA P-256 certificate made in memory at start
  (made with the ``cryptography`` library; the private key never touches the disk), or
  ``tls.crt``/``tls.key`` from a directory (``--metrics-cert-dir``, e.g. a mounted
  cert-manager Secret), re-read when either file changes, as controller-runtime's
  certwatcher does.

Health probes stay plain HTTP on their own port (:mod:`cbop.health`).
"""

from __future__ import annotations

import datetime
import hashlib
import http.server
import ipaddress
import os
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog
from cachetools import TTLCache
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.exposition import choose_encoder

from cbop.clock import Clock, RealClock
from cbop.kube import ApiError, ConnectionFailed, KubeClient, Resource

log = structlog.get_logger("cbop.metrics.secure")

#: authentication.k8s.io/v1 TokenReviews (create only; cluster-scoped).
TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False)
#: authorization.k8s.io/v1 SubjectAccessReviews (create only; cluster-scoped).
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False
)

#: The path served, and the non-resource URL a caller needs ``get`` on.
METRICS_PATH = "/metrics"
#: How long a token's decision is kept, seconds.
DEFAULT_TTL = 10.0
#: Tokens whose decisions are kept at most (least recently inserted go first).
DEFAULT_CACHE_SIZE = 1024
#: Seconds a client may take for the TLS handshake and for each read.
_CONNECTION_TIMEOUT = 30.0
#: Seconds a review request may take.
_REVIEW_TIMEOUT = 10.0


@dataclass(frozen=True)
class UserInfo:
    """The user a TokenReview authenticated (``status.user``).

    Attributes:
        username: e.g. ``system:serviceaccount:monitoring:prometheus``.
        uid: the user's UID ('' when the authenticator gave none).
        groups: the user's groups.
        extra: extra attributes (e.g. the service-account token's pod name).
    """

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class ReviewError(Exception):
    """A review could not be made.

    Attributes:
        transient: True when trying again may work (API server unreachable, 429, 5xx):
            the request answers 503; otherwise 500.
    """

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class ReviewClient(Protocol):
    """Makes the two reviews the API server decides (the seam for tests)."""

    def authenticate(self, token: str) -> UserInfo | None:
        """Return the user ``token`` authenticates as, or None when it does not.

        Raises:
            ReviewError: the review could not be made.
        """

    def authorize(self, user: UserInfo, path: str, verb: str) -> tuple[bool, str]:
        """Return whether ``user`` may ``verb`` the non-resource URL ``path``, and why.

        Raises:
            ReviewError: the review could not be made.
        """


class KubeReviewClient:
    """:class:`ReviewClient` that creates TokenReviews and SubjectAccessReviews.

    Args:
        client: cbop's API client; needs ``create`` on ``tokenreviews``
            (authentication.k8s.io) and ``subjectaccessreviews`` (authorization.k8s.io).
    """

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    def _create(self, resource: Resource, spec: Mapping[str, Any]) -> dict[str, Any]:
        try:
            review = self._client.create(
                resource, None, {"spec": dict(spec)}, timeout=_REVIEW_TIMEOUT
            )
        except ConnectionFailed as err:
            raise ReviewError(f"creating a {resource.kind}: {err}", transient=True) from err
        except ApiError as err:
            transient = err.status == 429 or err.status >= 500
            raise ReviewError(f"creating a {resource.kind}: {err}", transient=transient) from err
        status: dict[str, Any] = review.get("status") or {}
        return status

    def authenticate(self, token: str) -> UserInfo | None:
        """Create a TokenReview of ``token``; see :meth:`ReviewClient.authenticate`."""
        status = self._create(TOKEN_REVIEWS, {"token": token})
        if not status.get("authenticated"):
            return None
        user = status.get("user") or {}
        extra = user.get("extra") or {}
        return UserInfo(
            username=str(user.get("username", "")),
            uid=str(user.get("uid", "")),
            groups=tuple(user.get("groups") or ()),
            extra=tuple(sorted((k, tuple(v)) for k, v in extra.items())),
        )

    def authorize(self, user: UserInfo, path: str, verb: str) -> tuple[bool, str]:
        """Create a SubjectAccessReview; see :meth:`ReviewClient.authorize`."""
        spec: dict[str, Any] = {
            "user": user.username,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        status = self._create(SUBJECT_ACCESS_REVIEWS, spec)
        return bool(status.get("allowed")), str(status.get("reason") or "")


@dataclass(frozen=True)
class Decision:
    """What a request gets.

    Attributes:
        code: HTTP status: 200 (serve), 401, 403, 500 or 503.
        reason: one line for the response body and the log ('' when allowed).
        user: the authenticated user's name, when known.
        cached: whether the decision came from the cache (no review was made).
    """

    code: int
    reason: str = ""
    user: str | None = None
    cached: bool = False


class DelegatingAuth:
    """Authenticates and authorizes metrics requests with the API server, with a cache.

    As controller-runtime's ``filters.WithAuthenticationAndAuthorization``: a bearer
    token, a TokenReview, then a SubjectAccessReview for ``get`` on ``path``. Decisions
    (allowed, 401, 403) are cached per token (keyed by its SHA-256) for ``ttl`` seconds
    on ``clock``; review errors are not cached. Thread-safe.

    Args:
        reviews: makes the reviews.
        path: the non-resource URL checked (``/metrics``).
        ttl: seconds a decision is kept.
        maxsize: tokens kept at most.
        clock: time source for the cache (a FakeClock in tests).
        registry: where ``cbop_metrics_auth_requests_total{code,cached}`` is registered
            (None: not exported).
    """

    def __init__(
        self,
        reviews: ReviewClient,
        *,
        path: str = METRICS_PATH,
        ttl: float = DEFAULT_TTL,
        maxsize: int = DEFAULT_CACHE_SIZE,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._reviews = reviews
        self._path = path
        timer = (clock or RealClock()).now
        self._cache: TTLCache[str, Decision] = TTLCache(maxsize=maxsize, ttl=ttl, timer=timer)
        self._lock = threading.Lock()
        self._requests = (
            Counter(
                "cbop_metrics_auth_requests_total",
                "Requests to the secure metrics endpoint by HTTP code and whether the "
                "decision came from the review cache.",
                ["code", "cached"],
                registry=registry,
            )
            if registry is not None
            else None
        )

    def check(self, authorization: str | None, verb: str = "get") -> Decision:
        """Decide a request from its ``Authorization`` header (None when absent).

        Returns:
            The :class:`Decision`; never raises for a review that fails (500/503).
        """
        decision = self._decide(authorization, verb)
        if self._requests is not None:
            self._requests.labels(str(decision.code), str(decision.cached).lower()).inc()
        return decision

    def _decide(self, authorization: str | None, verb: str) -> Decision:
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return Decision(401, "no bearer token")
        key = hashlib.sha256(f"{verb} {token}".encode()).hexdigest()
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return Decision(cached.code, cached.reason, cached.user, cached=True)
        try:
            decision = self._review(token, verb)
        except ReviewError as err:
            log.warning("metrics request not decided: review failed", error=str(err))
            return Decision(503 if err.transient else 500, "authorization check failed")
        with self._lock:
            self._cache[key] = decision
        return decision

    def _review(self, token: str, verb: str) -> Decision:
        user = self._reviews.authenticate(token)
        if user is None:
            return Decision(401, "token not authenticated")
        allowed, why = self._reviews.authorize(user, self._path, verb)
        if not allowed:
            reason = f'user "{user.username}" may not {verb} {self._path}'
            return Decision(403, reason + (f": {why}" if why else ""), user.username)
        return Decision(200, "", user.username)


# ------------------------------------------------------------- certificates


def self_signed_certificate(
    hostnames: tuple[str, ...] = (), *, days: int = 365
) -> tuple[bytes, bytes]:
    """Make a self-signed serving certificate and its key, in memory.

    Args:
        hostnames: DNS names (or IP addresses) for the subjectAltName; ``localhost``,
            ``127.0.0.1`` and this host's name are always included.
        days: validity, days from now (backdated by an hour for clock skew).

    Returns:
        ``(certificate PEM, private key PEM)``; the key is ECDSA P-256, unencrypted.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    names = dict.fromkeys((*hostnames, socket.gethostname(), "localhost", "127.0.0.1"))
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cbop-metrics")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@contextmanager
def _pem_files(cert: bytes, key: bytes) -> Iterator[tuple[str, str]]:
    """Yield paths ``ssl`` can load the PEMs from: memory files where Linux has them."""
    if hasattr(os, "memfd_create"):
        fds = [os.memfd_create(name) for name in ("tls.crt", "tls.key")]
        try:
            for fd, data in zip(fds, (cert, key), strict=True):
                os.write(fd, data)
            yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory() as tmp:  # pragma: no cover - not Linux
        paths = (os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key"))
        for path, data in zip(paths, (cert, key), strict=True):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        yield paths


def _server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


class CertSource:
    """The serving certificate: self-signed in memory, or from ``tls.crt``/``tls.key``.

    Args:
        cert_dir: directory with ``tls.crt`` and ``tls.key`` (PEM); None makes a
            self-signed certificate (:func:`self_signed_certificate`).

    Raises:
        OSError: the files cannot be read or are not a matching PEM certificate and
            key; the message names the directory.
    """

    def __init__(self, cert_dir: str | None = None) -> None:
        self._lock = threading.Lock()
        self._files: tuple[Path, Path] | None = None
        self._stamp: tuple[tuple[int, int], ...] = ()
        if cert_dir is None:
            with _pem_files(*self_signed_certificate()) as (cert, key):
                self._context = _server_context(cert, key)
            return
        self._files = (Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key")
        try:
            self._stamp = self._stat()
            self._context = _server_context(*map(str, self._files))
        except OSError as err:
            raise OSError(f"--metrics-cert-dir {cert_dir}: {err}") from err

    def _stat(self) -> tuple[tuple[int, int], ...]:
        assert self._files is not None
        return tuple((s.st_mtime_ns, s.st_ino) for s in (p.stat() for p in self._files))

    def context(self) -> ssl.SSLContext:
        """Return the context for the next connection, re-reading changed files first.

        A change that cannot be loaded (files half written, key and certificate not
        matching yet) keeps the previous certificate and is logged; the next connection
        tries again.
        """
        if self._files is None:
            return self._context
        with self._lock:
            try:
                stamp = self._stat()
                if stamp != self._stamp:
                    self._context = _server_context(*map(str, self._files))
                    self._stamp = stamp
                    log.info("metrics serving certificate reloaded", path=str(self._files[0]))
            except OSError as err:
                log.warning("metrics serving certificate not reloaded", error=str(err))
            return self._context


# ------------------------------------------------------------------ server


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
    client: KubeClient,
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
