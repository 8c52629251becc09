"""The Kubernetes client adapter: raw JSON over the official client's transport.

This module owns :class:`KubeClient`, the one object through which cbop talks to the API
server, and :class:`WatchStream`, the iterator over a watch response. Requests go
through ``kubernetes.client.ApiClient`` (configuration loading, TLS, authentication,
the urllib3 pool) but bodies are plain JSON: requests take dicts, responses are
``json.loads`` of the body. No generated model is built on any path, which keeps lists
and watches cheap.

Behaviour borrowed from client-go's ``rest`` package:

* client-side rate limiting with a token bucket (``qps``/``burst``, defaults 20/30 as
  controller-runtime's; ``qps <= 0`` disables it), applied to every request except
  watch streams;
* a 429 or 5xx answer that carries ``Retry-After`` is retried after that many seconds,
  at most ``max_retries`` (10) times, for every verb (the server did not process it);
* responses may be gzip-compressed (``Accept-Encoding: gzip``, as Go's HTTP transport
  asks for by default; the API server compresses bodies over 128 KiB), except watches;
* a client may carry a write fence (:meth:`KubeClient.with_fence`): a check made
  immediately before each create, update, patch or delete goes on the wire (after any
  client-side throttling or Retry-After wait), so a leader that lost its lease, or a
  thread that woke from a pause, cannot send a write it prepared earlier;
* every request is counted by (verb, resource plural), see :meth:`KubeClient.request_counts`,
  and reported to an optional ``on_request(verb, resource, status_code, seconds)`` hook;
* client-go's REST client metrics (requests by code, method and host; latency; rate
  limiter waits; retries after 429/5xx with the seconds waited) go to a
  :class:`cbop.kube.metrics.RestClientMetrics` (see :meth:`KubeClient.set_metrics`), so
  that upper layers attach Prometheus without this package importing it;
* each 429 is logged at debug level with its ``Retry-After``; running out of retries is
  a warning, at most one every 30 s per client.

Thread-safety: one :class:`KubeClient` is shared by all threads. urllib3's pool manager
is thread-safe; its per-host pool keeps up to ``pool_size`` idle connections.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, cast

import structlog
import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client import rest as k8s_rest
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_HOST_ENV_NAME,
    SERVICE_PORT_ENV_NAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

import cbop
from cbop.clock import Clock, RealClock
from cbop.kube.errors import ApiError, ConfigError, ConnectionFailed, LeaseNotHeld
from cbop.kube.jsonstream import ItemHook, StreamDecodeError, decode_list, paused_gc
from cbop.kube.metrics import NO_METRICS, NO_RESPONSE_CODE, RestClientMetrics
from cbop.kube.resources import Resource
from cbop.tokenbucket import TokenBucket

__all__ = [
    "DEFAULT_USER_AGENT",
    "MUTATING_VERBS",
    "PATCH_CONTENT_TYPES",
    "KubeClient",
    "RequestHook",
    "WatchStream",
    "WriteFence",
    "encode_body",
]

#: ``User-Agent`` sent when none is given.
DEFAULT_USER_AGENT: Final = f"cbop/{cbop.__version__}"

#: ``patch_type`` -> ``Content-Type`` of a PATCH request.
PATCH_CONTENT_TYPES: Final[Mapping[str, str]] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}

#: ``on_request(verb, resource_plural, status_code, seconds)``; status 0 = no answer.
RequestHook = Callable[[str, str, int, float], None]

#: A write fence: returns whether a mutating request may be sent now.
WriteFence = Callable[[], bool]

#: Kubernetes verbs that change state; a fenced client checks its fence before each.
MUTATING_VERBS: Final = frozenset({"create", "update", "patch", "delete", "deletecollection"})

_CONNECT_TIMEOUT: Final = 10.0
_TOKEN_REFRESH_PERIOD: Final = 60.0
_READ_SIZE: Final = 64 * 1024
_LIST_READ_SIZE: Final = 256 * 1024
# The longest Retry-After honoured. API Priority and Fairness asks for 1 s at first and
# doubles that per priority level, up to 32 s, while it keeps rejecting requests
# (k8s.io/apiserver's dropped-requests tracker); 60 s guards against anything else.
_MAX_RETRY_AFTER: Final = 60.0
#: At most one "retries exhausted" warning per this many seconds per client.
_EXHAUSTED_WARNING_PERIOD: Final = 30.0
#: Kubernetes verb -> HTTP method, for the client-go metric labels.
_HTTP_METHODS: Final[Mapping[str, str]] = {
    "get": "GET",
    "list": "GET",
    "watch": "GET",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}
# Transport failures raised by urllib3 and the sockets under it. The generated REST layer
# turns TLS errors into ApiException(status=0).
_TRANSPORT_ERRORS: Final = (urllib3.exceptions.HTTPError, OSError)

log = structlog.get_logger("cbop.kube")


def _is_timeout(exc: BaseException) -> bool:
    """Return whether a transport error is a connect or read timeout.

    urllib3's ``NewConnectionError`` (connection refused, no route) subclasses its
    ``ConnectTimeoutError`` for historical reasons; it is no timeout.
    """
    for err in (exc, getattr(exc, "reason", None)):
        if isinstance(err, urllib3.exceptions.NewConnectionError):
            return False
        if isinstance(err, urllib3.exceptions.TimeoutError | TimeoutError):
            return True
    return False


def _connection_failed(exc: BaseException, what: str) -> ConnectionFailed:
    """Wrap a transport exception as :class:`ConnectionFailed`."""
    return ConnectionFailed(f"{what}: {exc}", cause=exc, timed_out=_is_timeout(exc))


def encode_body(body: Any) -> bytes | None:
    r"""Encode a request body as the bytes sent on the wire.

    Dicts and lists become compact JSON in raw UTF-8 (no spaces, non-ASCII characters
    as they are, not ``\uXXXX`` escapes), as client-go and kubectl send JSON: a value
    of 2-byte characters costs 2 bytes, not 6, so every object the API server accepts
    from kubectl also fits its 3 MiB request body limit when cbop writes it. JSON is
    also valid YAML, so server-side apply bodies are encoded the same way. ``str`` is
    sent as UTF-8 and ``bytes`` as is; ``None`` means no body.

    Raises:
        TypeError: ``body`` is not JSON-serialisable.
    """
    if body is None or isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _query_value(value: str | int | bool) -> str:
    """Render one query parameter value the way the API server parses it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _infer_verb_resource(
    method: str, path: str, query: Mapping[str, Any] | None
) -> tuple[str, str]:
    """Map a raw request to a Kubernetes (verb, resource plural) pair for request counting.

    ``/api/v1/namespaces/ns/configmaps/name`` -> resource ``configmaps``; ``GET`` of a
    collection is ``list`` (``watch`` with ``watch=true``), of an object ``get``; ``POST``
    is ``create``, ``PUT`` ``update``, ``PATCH`` ``patch``, ``DELETE`` of an object
    ``delete``, of a collection ``deletecollection``. Paths outside ``/api``/``/apis``
    count under their path and the lower-cased method.
    """
    segments = [s for s in path.split("?", 1)[0].split("/") if s]
    method = method.upper()
    rest: list[str]
    if segments[:1] == ["api"] and len(segments) >= 2:
        rest = segments[2:]
    elif segments[:1] == ["apis"] and len(segments) >= 3:
        rest = segments[3:]
    else:
        return method.lower(), path.split("?", 1)[0]
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        rest = rest[2:]
    if not rest:
        return method.lower(), path.split("?", 1)[0]
    resource = rest[0]
    if len(rest) >= 3:
        resource = f"{rest[0]}/{rest[2]}"
    named = len(rest) >= 2
    watch = bool(query) and _query_value(query.get("watch", False)) == "true"  # type: ignore[union-attr]
    if method == "GET":
        verb = "watch" if watch else ("get" if named else "list")
    elif method == "POST":
        verb = "create"
    elif method == "PUT":
        verb = "update"
    elif method == "PATCH":
        verb = "patch"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = method.lower()
    return verb, resource


class _TokenFileRefresher:
    """Re-reads a bearer token file at most every ``period`` seconds (rotated SA tokens).

    Installed as the configuration's ``refresh_api_key_hook``, which the generated
    ``Configuration.auth_settings()`` calls on every request (``ApiClient.param_serialize``
    with ``auth_settings=["BearerToken"]``). The stock in-cluster loader does the same
    with a fixed one-minute period on the wall clock; this one uses cbop's clock so the
    rotation can be tested, and keeps the last good token when the file is briefly
    missing or empty during a kubelet rotation.
    """

    def __init__(self, token_file: str, clock: Clock, period: float = _TOKEN_REFRESH_PERIOD):
        self._token_file = token_file
        self._clock = clock
        self._period = period
        self._lock = threading.Lock()
        self._next_read = clock.now() + period

    def force(self) -> None:
        """Make the next request re-read the file (after a 401: the token was rotated)."""
        with self._lock:
            self._next_read = float("-inf")

    def __call__(self, configuration: Any) -> None:
        now = self._clock.now()
        with self._lock:
            if now < self._next_read:
                return
            self._next_read = now + self._period
            try:
                token = Path(self._token_file).read_text().strip()
            except OSError:
                return
            if token:
                configuration.api_key["BearerToken"] = f"bearer {token}"


class WatchStream(Iterator[dict[str, Any]]):
    r"""An open watch response, iterated as decoded events.

    Each item is the event dict as the API server sends it, ``{"type": "ADDED" |
    "MODIFIED" | "DELETED" | "BOOKMARK", "object": {...}}``; lines are split on ``\\n``
    from the raw stream and decoded with ``json.loads`` (no models).

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
        except _TRANSPORT_ERRORS as exc:
            if self._closed:
                return b""
            self._cleanup()
            raise _connection_failed(exc, "watch stream broken") from exc
        finally:
            with self._lock:
                self._reading = False

    def _decode(self, line: bytes) -> dict[str, Any]:
        try:
            event = json.loads(line)
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
        except _TRANSPORT_ERRORS:
            pass
        if self._on_close is not None:
            self._on_close()

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class KubeClient:
    """A thread-safe Kubernetes API client that speaks raw JSON (dicts in, dicts out).

    Build one with :meth:`from_config`, or wrap a configured
    ``kubernetes.client.ApiClient`` directly. All verbs raise :class:`ApiError` for a
    non-2xx answer and :class:`ConnectionFailed` when no answer arrived.

    Args:
        api_client: the transport (its configuration: host, TLS, credentials, pool).
        qps: sustained client-side request rate (requests/second); ``<= 0`` = unlimited.
        burst: token bucket size (requests).
        clock: time source for rate limiting, Retry-After waits and latency.
        max_retries: how often a 429/5xx answer with ``Retry-After`` is retried.
        on_request: optional ``(verb, resource, status_code, seconds)`` hook, called
            once per HTTP exchange (also for retried attempts); exceptions it raises
            are swallowed.
        metrics: where client-go's REST client metrics go (default: nowhere).
        fence: optional write fence, see :meth:`with_fence`.
    """

    def __init__(
        self,
        api_client: Any,
        *,
        qps: float = 20.0,
        burst: int = 30,
        clock: Clock | None = None,
        max_retries: int = 10,
        on_request: RequestHook | None = None,
        metrics: RestClientMetrics | None = None,
        fence: WriteFence | None = None,
    ) -> None:
        self._api = api_client
        self._fence = fence
        self._clock: Clock = clock if clock is not None else RealClock()
        self._bucket = TokenBucket(qps, max(1, burst), clock=self._clock) if qps > 0 else None
        self._max_retries = max_retries
        self._on_request = on_request
        self._counts: dict[tuple[str, str], int] = {}
        self._counts_lock = threading.Lock()
        self._metrics: RestClientMetrics = metrics if metrics is not None else NO_METRICS
        configuration = getattr(api_client, "configuration", None)
        host = str(getattr(configuration, "host", "") or "")
        # client-go's ``host`` label: the API server's host:port.
        self._metrics_host = urllib3.util.parse_url(host).netloc or "" if host else ""
        self._exhausted_warnings = TokenBucket(
            1.0 / _EXHAUSTED_WARNING_PERIOD, 1, clock=self._clock
        )
        self._exhausted_suppressed = 0
        # Clock time at which the last 429's Retry-After runs out; a list so that the
        # clients made by with_fence share it (they are the same traffic).
        self._throttled_until = [0.0]

    # ----------------------------------------------------------------- construction

    @classmethod
    def from_config(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        qps: float = 20.0,
        burst: int = 30,
        pool_size: int = 16,
        user_agent: str = DEFAULT_USER_AGENT,
        clock: Clock | None = None,
        on_request: RequestHook | None = None,
    ) -> KubeClient:
        """Load a configuration the way client-go's ``clientcmd`` defaults do and build a client.

        Order: an explicit ``kubeconfig`` path; else, inside a pod
        (``KUBERNETES_SERVICE_HOST``/``_PORT`` set and the service-account token file
        present), the in-cluster configuration, whose token file is re-read every
        60 s so rotated tokens are picked up; else ``$KUBECONFIG`` (a ``:``-separated
        list) or ``~/.kube/config``.

        Args:
            kubeconfig: path of a kubeconfig file.
            context: kubeconfig context name (default: the file's current context).
            qps: client-side sustained rate (requests/s); ``<= 0`` = unlimited.
            burst: client-side burst (requests).
            pool_size: idle connections kept per host by urllib3 (``maxsize``).
            user_agent: ``User-Agent`` header.
            clock: time source (tests pass a ``FakeClock``).
            on_request: request hook (see the class).

        Raises:
            ConfigError: no configuration found, or it could not be loaded.
        """
        clk: Clock = clock if clock is not None else RealClock()
        configuration = k8s_client.Configuration()
        if kubeconfig is not None:
            _load_kubeconfig(configuration, kubeconfig, context)
            _watch_token_file(configuration, kubeconfig, context, clk)
        elif _in_cluster():
            _load_in_cluster(configuration, clk)
        else:
            env = os.environ.get("KUBECONFIG", "")
            candidate = env if env else "~/.kube/config"
            paths = [p for p in candidate.split(os.pathsep) if p]
            if not any(Path(p).expanduser().exists() for p in paths):
                raise ConfigError(
                    "no Kubernetes configuration found: no kubeconfig given, not running in "
                    f"a pod, and {'$KUBECONFIG=' + env if env else '~/.kube/config'} does not exist"
                )
            _load_kubeconfig(configuration, candidate, context)
            _watch_token_file(configuration, candidate.split(os.pathsep)[0], context, clk)
        return cls.from_configuration(
            configuration,
            qps=qps,
            burst=burst,
            pool_size=pool_size,
            user_agent=user_agent,
            clock=clk,
            on_request=on_request,
        )

    @classmethod
    def from_configuration(
        cls,
        configuration: Any,
        *,
        qps: float = 20.0,
        burst: int = 30,
        pool_size: int = 16,
        user_agent: str = DEFAULT_USER_AGENT,
        clock: Clock | None = None,
        on_request: RequestHook | None = None,
    ) -> KubeClient:
        """Build a client from a loaded ``kubernetes.client.Configuration`` (tuned in place).

        Sets the pool size (``connection_pool_maxsize``, which the generated
        ``RESTClientObject`` passes to urllib3 as ``maxsize``), TCP keepalive (as
        client-go dials), and urllib3 retries limited to one new connection attempt:
        a request that reached the server is never silently re-sent by urllib3.
        """
        configuration.connection_pool_maxsize = pool_size
        configuration.keep_alive = True
        configuration.retries = urllib3.util.Retry(
            total=1, connect=1, read=0, redirect=0, status=0, other=0, raise_on_status=False
        )
        api_client = k8s_client.ApiClient(configuration)
        api_client.user_agent = user_agent
        return cls(api_client, qps=qps, burst=burst, clock=clock, on_request=on_request)

    def with_limits(self, *, qps: float, burst: int, max_retries: int) -> KubeClient:
        """Return a client sharing this one's connections and credentials, not its limits.

        For traffic that must not queue behind the controller's, as client-go gives
        leader election a client of its own: renewals must not wait for a client-side
        rate limiter or for Retry-After sleeps past the renew deadline.
        """
        return KubeClient(
            self._api,
            qps=qps,
            burst=burst,
            clock=self._clock,
            max_retries=max_retries,
            on_request=self._on_request,
            metrics=self._metrics,
        )

    def set_metrics(self, metrics: RestClientMetrics) -> None:
        """Report client-go's REST client metrics to ``metrics`` from now on.

        Clients made afterwards by :meth:`with_limits` report there too.
        """
        self._metrics = metrics

    def with_fence(self, fence: WriteFence) -> KubeClient:
        """Return a client sharing this one's connections and limits, with a write fence.

        ``fence()`` is called immediately before every mutating request (verbs in
        :data:`MUTATING_VERBS`) is sent, after client-side throttling and after each
        Retry-After wait, so nothing prepared before a pause goes out unchecked. When it
        returns False the request is not sent and :class:`LeaseNotHeld` is raised.
        Reads and watches are never fenced. The leader elector's own Lease writes use
        a client without a fence. Like a lease-checking write in a fenced store: the
        check narrows, but cannot close, the gap between "still leader" and "arrived".
        """
        fenced = KubeClient(
            self._api,
            qps=0,
            burst=1,
            clock=self._clock,
            max_retries=self._max_retries,
            on_request=self._on_request,
            metrics=self._metrics,
            fence=fence,
        )
        # Share the rate limiter and the request counts: the fenced client is the same
        # traffic, seen through a gate, not new traffic.
        fenced._bucket = self._bucket
        fenced._counts = self._counts
        fenced._counts_lock = self._counts_lock
        fenced._throttled_until = self._throttled_until
        return fenced

    def throttled_for(self) -> float:
        """Seconds until the ``Retry-After`` of the last 429 answer to this client runs out.

        Returns 0.0 when no 429 asked this client to wait, or once the wait is over. Shared
        with the clients made by :meth:`with_fence`. Background writers (the Event sink)
        use it to stay out of the way of reconcile writes while API Priority and Fairness
        rejects this client's requests (see :meth:`wait_while_throttled`).
        """
        return max(0.0, self._throttled_until[0] - self._clock.now())

    def wait_while_throttled(self) -> float:
        """Sleep on the client's clock until :meth:`throttled_for` is 0; return the seconds slept.

        A request that gets a 429 meanwhile extends the wait.
        """
        slept = 0.0
        while (left := self.throttled_for()) > 0:
            self._clock.sleep(left)
            slept += left
        return slept

    @property
    def host(self) -> str:
        """The API server URL, e.g. ``https://127.0.0.1:6443``."""
        return cast(str, self._api.configuration.host)

    def close(self) -> None:
        """Close the idle pooled connections."""
        self._api.rest_client.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ----------------------------------------------------------------- accounting

    def request_counts(self) -> dict[tuple[str, str], int]:
        """Return a snapshot of HTTP exchanges made, keyed by ``(verb, resource plural)``.

        Verbs are Kubernetes verbs (``get``, ``list``, ``watch``, ``create``,
        ``update``, ``patch``, ``delete``, ...); subresources count as
        ``"configbundles/status"``. Each retry counts as a request.
        """
        with self._counts_lock:
            return dict(self._counts)

    def _record(self, verb: str, resource: str, status: int, seconds: float) -> None:
        with self._counts_lock:
            key = (verb, resource)
            self._counts[key] = self._counts.get(key, 0) + 1
        method = _HTTP_METHODS.get(verb, verb.upper())
        code = str(status) if status else NO_RESPONSE_CODE
        with contextlib.suppress(Exception):
            self._metrics.request(code, method, self._metrics_host)
            self._metrics.request_duration(method, self._metrics_host, seconds)
        hook = self._on_request
        if hook is not None:
            # A metrics hook must never break a request.
            with contextlib.suppress(Exception):
                hook(verb, resource, status, seconds)

    # ----------------------------------------------------------------- transport

    def _throttle(self, verb: str) -> None:
        wait = self._bucket.reserve() if self._bucket is not None else 0.0
        if wait > 0:
            self._clock.sleep(wait)
        with contextlib.suppress(Exception):
            self._metrics.rate_limiter_duration(
                _HTTP_METHODS.get(verb, verb.upper()), self._metrics_host, wait
            )

    def _send(
        self,
        *,
        verb: str,
        resource: str,
        method: str,
        path: str,
        query: Mapping[str, str | int | bool] | None,
        body: bytes | None,
        content_type: str,
        timeout: tuple[float, float] | None,
    ) -> Any:
        """Make one HTTP exchange; return the ``RESTResponse`` (any status).

        ``body`` is the encoded request body (see :func:`encode_body`), sent as is.

        Raises:
            ConnectionFailed: no answer.
        """
        headers = {"Accept": "application/json"}
        if verb != "watch":
            # As Go's HTTP transport under client-go: the API server compresses
            # responses over 128 KiB, which is far cheaper to read than the plain body.
            headers["Accept-Encoding"] = "gzip"
        if body is not None:
            headers["Content-Type"] = content_type
        query_params = [(k, _query_value(v)) for k, v in (query or {}).items()]
        start = self._clock.now()
        try:
            # The generated layer builds the URL and the authentication headers; the body
            # is sent as the bytes encode_body() made, not re-serialised by that layer
            # (whose json.dumps escapes every non-ASCII character).
            m, url, header_params, _, _ = self._api.param_serialize(
                method=method,
                resource_path=path,
                query_params=query_params,
                header_params=headers,
                auth_settings=["BearerToken"],
            )
            raw = self._api.rest_client.pool_manager.request(
                m,
                url,
                body=body,
                headers=header_params,
                timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1])
                if timeout is not None
                else None,
                preload_content=False,
            )
            return k8s_rest.RESTResponse(raw)
        except (*_TRANSPORT_ERRORS, ApiException) as exc:
            self._record(verb, resource, 0, self._clock.now() - start)
            raise _connection_failed(exc, f"{method} {path}") from exc

    def _reread_token(self) -> bool:
        """After a 401: re-read a watched token file now; True when there is one."""
        hook = getattr(self._api.configuration, "refresh_api_key_hook", None)
        if isinstance(hook, _TokenFileRefresher):
            hook.force()
            return True
        return False

    def _call(
        self,
        verb: str,
        resource: str,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 30.0,
        stream_items: bool = False,
        item_hook: ItemHook | None = None,
    ) -> dict[str, Any]:
        request_timeout = None if timeout is None else (min(_CONNECT_TIMEOUT, timeout), timeout)
        payload = encode_body(body)
        attempt = 0
        reauthenticated = False
        while True:
            self._throttle(verb)
            if self._fence is not None and verb in MUTATING_VERBS and not self._fence():
                raise LeaseNotHeld(f"{method} {path} not sent: the leader lease is not held")
            start = self._clock.now()
            response = self._send(
                verb=verb,
                resource=resource,
                method=method,
                path=path,
                query=query,
                body=payload,
                content_type=content_type,
                timeout=request_timeout,
            )
            if stream_items and 200 <= int(response.status) < 300:
                return self._decode_streamed(
                    verb=verb,
                    resource=resource,
                    method=method,
                    path=path,
                    response=response,
                    start=start,
                    item_hook=item_hook,
                )
            try:
                data = response.read()
            except _TRANSPORT_ERRORS as exc:
                self._record(verb, resource, 0, self._clock.now() - start)
                raise _connection_failed(exc, f"{method} {path}: reading the response") from exc
            status = int(response.status)
            self._record(verb, resource, status, self._clock.now() - start)
            if 200 <= status < 300:
                if not data:
                    return {}
                try:
                    decoded = json.loads(data)
                except ValueError as exc:
                    raise ApiError(
                        status, "InvalidResponse", f"non-JSON response body: {data[:200]!r}"
                    ) from exc
                return decoded if isinstance(decoded, dict) else {"items": decoded}
            error = ApiError.from_response(status, response.getheaders(), data)
            error.request_bytes = None if payload is None else len(payload)
            if status == 401 and not reauthenticated and self._reread_token():
                reauthenticated = True
                continue
            if error.retry_after is not None and status == 429:
                until = self._clock.now() + min(error.retry_after, _MAX_RETRY_AFTER)
                with self._counts_lock:
                    self._throttled_until[0] = max(self._throttled_until[0], until)
            if error.retry_after is not None and (status == 429 or 500 <= status <= 599):
                if attempt < self._max_retries:
                    attempt += 1
                    self._wait_retry_after(verb, resource, path, error, attempt)
                    continue
                self._warn_exhausted(verb, resource, path, error, attempt)
            raise error

    def _wait_retry_after(
        self, verb: str, resource: str, path: str, error: ApiError, attempt: int
    ) -> None:
        """Sleep the ``Retry-After`` the server asked for (capped at 60 s), as client-go does."""
        assert error.retry_after is not None
        wait = min(error.retry_after, _MAX_RETRY_AFTER)
        method = _HTTP_METHODS.get(verb, verb.upper())
        log.debug(
            "retrying after the server asked to wait",
            code=error.status,
            verb=verb,
            resource=resource,
            path=path,
            retry_after=error.retry_after,
            wait=wait,
            attempt=attempt,
        )
        with contextlib.suppress(Exception):
            self._metrics.retry(str(error.status), method, self._metrics_host, wait)
        self._clock.sleep(wait)

    def _warn_exhausted(
        self, verb: str, resource: str, path: str, error: ApiError, attempts: int
    ) -> None:
        """Warn that a request ran out of Retry-After retries (rate limited, with a count)."""
        with self._counts_lock:
            if not self._exhausted_warnings.try_take():
                self._exhausted_suppressed += 1
                return
            suppressed, self._exhausted_suppressed = self._exhausted_suppressed, 0
        log.warning(
            "giving up after the server kept asking to retry later",
            code=error.status,
            verb=verb,
            resource=resource,
            path=path,
            retries=attempts,
            retry_after=error.retry_after,
            suppressed_since_last=suppressed,
        )

    def _decode_streamed(
        self,
        *,
        verb: str,
        resource: str,
        method: str,
        path: str,
        response: Any,
        start: float,
        item_hook: ItemHook | None,
    ) -> dict[str, Any]:
        """Decode a 2xx list body item by item while it arrives (see ``jsonstream``)."""
        raw = response.response
        status = int(response.status)

        def chunks() -> Iterator[bytes]:
            while True:
                chunk = raw.read(_LIST_READ_SIZE)
                if not chunk:
                    return
                yield chunk

        try:
            with paused_gc():
                decoded = decode_list(chunks(), item_hook)
        except _TRANSPORT_ERRORS as exc:
            self._record(verb, resource, 0, self._clock.now() - start)
            raise _connection_failed(exc, f"{method} {path}: reading the response") from exc
        except StreamDecodeError as exc:
            self._record(verb, resource, status, self._clock.now() - start)
            raise ApiError(status, "InvalidResponse", f"undecodable list body: {exc}") from exc
        finally:
            raw.release_conn()
        self._record(verb, resource, status, self._clock.now() - start)
        return decoded

    # ----------------------------------------------------------------- raw

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 30.0,
    ) -> dict[str, Any]:
        """Send one request and return the decoded JSON body.

        Args:
            method: HTTP method (``GET``, ``POST``, ``PUT``, ``PATCH``, ``DELETE``).
            path: URL path from the server root, e.g. ``/api/v1/namespaces``.
            query: query parameters; booleans are sent as ``true``/``false``.
            body: a JSON-serialisable value (dict or, for JSON patches, list), or
                already-encoded ``bytes``/``str``.
            content_type: ``Content-Type`` of the body.
            timeout: seconds to wait for the connection and for each read; ``None``
                waits forever.

        Returns:
            The body decoded as a dict (``{}`` for an empty body).

        Raises:
            ApiError: non-2xx answer (after Retry-After retries), with the ``Status``
                fields and ``retry_after`` parsed.
            ConnectionFailed: no answer (refused, reset, TLS failure, timeout).
        """
        verb, resource = _infer_verb_resource(method, path, query)
        return self._call(
            verb,
            resource,
            method.upper(),
            path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout,
        )

    # ----------------------------------------------------------------- verbs

    @staticmethod
    def _resource_name(res: Resource, subresource: str | None) -> str:
        return f"{res.plural}/{subresource}" if subresource else res.plural

    def get(
        self, res: Resource, namespace: str | None, name: str, *, timeout: float | None = 30.0
    ) -> dict[str, Any]:
        """GET one object; returns it as a dict.

        Raises:
            ApiError: ``is_not_found`` when it does not exist; other API errors.
            ConnectionFailed: no answer.
        """
        return self._call("get", res.plural, "GET", res.path(namespace, name), timeout=timeout)

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        timeout: float | None = 60.0,
        item_hook: ItemHook | None = None,
    ) -> dict[str, Any]:
        """LIST a collection (one page); returns the list dict.

        The body is decoded item by item while it arrives (:mod:`cbop.kube.jsonstream`):
        the raw body is never held whole, each item may be reduced by ``item_hook``
        before the next is decoded, and object keys are interned. The cyclic garbage
        collector is paused while decoding.

        The result has ``metadata.resourceVersion`` (the list's RV), ``metadata.continue``
        when more pages follow, and ``items`` (each item lacks ``kind``/``apiVersion``, as
        the API server sends them).

        Args:
            res: the collection.
            namespace: ``None`` lists across all namespaces.
            label_selector: label selector string (``"a=b,c!=d"``).
            field_selector: field selector string (``"metadata.name=x"``).
            limit: page size; the API server ignores it for ``resource_version="0"``
                when served from the watch cache.
            continue_: the previous page's ``metadata.continue``.
            resource_version: ``"0"`` (any, possibly cached), ``""``/``None``
                (consistent), or a specific RV.
            resource_version_match: ``"NotOlderThan"`` or ``"Exact"``.
            timeout: seconds for the connection and for each socket read.
            item_hook: ``hook(item) -> item`` applied to each element of ``items`` as
                soon as it is decoded (e.g. to drop fields); its result is kept.

        Raises:
            ApiError: ``is_gone`` for an expired continue token or a compacted RV.
            ConnectionFailed: no answer.
        """
        query: dict[str, str | int | bool] = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        if limit is not None:
            query["limit"] = limit
        if continue_:
            query["continue"] = continue_
        if resource_version is not None and resource_version != "":
            query["resourceVersion"] = resource_version
        if resource_version_match:
            query["resourceVersionMatch"] = resource_version_match
        return self._call(
            "list",
            res.plural,
            "GET",
            res.path(namespace),
            query=query,
            timeout=timeout,
            stream_items=True,
            item_hook=item_hook,
        )

    def create(
        self,
        res: Resource,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
        timeout: float | None = 30.0,
    ) -> dict[str, Any]:
        """POST a new object; returns the created object.

        ``kind``/``apiVersion`` are filled in from ``res`` when missing.

        Raises:
            ApiError: ``is_already_exists``, ``is_invalid``, ``is_forbidden``, ...
            ConnectionFailed: no answer.
        """
        obj = dict(body)
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
        return self._call(
            "create",
            res.plural,
            "POST",
            res.path(namespace),
            query=_write_query(field_manager, dry_run),
            body=obj,
            timeout=timeout,
        )

    def update(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        subresource: str | None = None,
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
        timeout: float | None = 30.0,
    ) -> dict[str, Any]:
        """PUT a whole object (optimistic concurrency via ``metadata.resourceVersion``).

        Raises:
            ApiError: ``is_conflict`` for a stale resourceVersion, ``is_not_found``,
                ``is_invalid``, ...
            ConnectionFailed: no answer.
        """
        obj = dict(body)
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
        return self._call(
            "update",
            self._resource_name(res, subresource),
            "PUT",
            res.path(namespace, name, subresource),
            query=_write_query(field_manager, dry_run),
            body=obj,
            timeout=timeout,
        )

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool | None = None,
        dry_run: bool = False,
        timeout: float | None = 30.0,
    ) -> dict[str, Any]:
        """PATCH an object; returns the patched object.

        Args:
            res: the collection.
            namespace: the object's namespace (``None`` if cluster-scoped).
            name: the object's name.
            body: a dict (merge, strategic, apply) or a list of operations (json).
            patch_type: ``merge`` (RFC 7386), ``json`` (RFC 6902), ``strategic``, or
                ``apply`` (server-side apply; needs ``field_manager``, default ``cbop``).
            subresource: e.g. ``"status"``.
            field_manager: ``fieldManager`` query parameter.
            force: server-side apply ``force`` (take ownership of conflicting fields).
            dry_run: validate and admit, but do not persist (``dryRun=All``).
            timeout: seconds for the connection and for each socket read.

        Raises:
            ValueError: unknown ``patch_type``.
            ApiError: ``is_not_found``, ``is_conflict`` (apply conflicts),
                ``is_invalid``, ...
            ConnectionFailed: no answer.
        """
        try:
            content_type = PATCH_CONTENT_TYPES[patch_type]
        except KeyError:
            raise ValueError(
                f"unknown patch_type {patch_type!r}; one of {sorted(PATCH_CONTENT_TYPES)}"
            ) from None
        if patch_type == "apply" and field_manager is None:
            field_manager = "cbop"
        query = _write_query(field_manager, dry_run)
        if force is not None:
            query["force"] = force
        return self._call(
            "patch",
            self._resource_name(res, subresource),
            "PATCH",
            res.path(namespace, name, subresource),
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout,
        )

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        preconditions: Mapping[str, str] | None = None,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
        timeout: float | None = 30.0,
    ) -> dict[str, Any]:
        """DELETE an object with ``DeleteOptions``.

        Args:
            res: the collection.
            namespace: the object's namespace (``None`` if cluster-scoped).
            name: the object's name.
            preconditions: ``{"uid": ..., "resourceVersion": ...}``; a mismatch is a 409.
            propagation_policy: ``Foreground``, ``Background`` or ``Orphan``.
            grace_period_seconds: ``gracePeriodSeconds`` of the DeleteOptions.
            dry_run: validate, but do not delete (``dryRun=All``).
            timeout: seconds for the connection and for each socket read.

        Returns:
            The object (being deleted, e.g. with finalizers) or a ``Status``.

        Raises:
            ApiError: ``is_not_found``, ``is_conflict`` (precondition failed), ...
            ConnectionFailed: no answer.
        """
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if preconditions:
            options["preconditions"] = dict(preconditions)
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if dry_run:
            options["dryRun"] = ["All"]
        return self._call(
            "delete",
            res.plural,
            "DELETE",
            res.path(namespace, name),
            body=options,
            timeout=timeout,
        )

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int,
        allow_bookmarks: bool = True,
        read_timeout: float,
    ) -> WatchStream:
        """Open a WATCH stream from ``resource_version``.

        Not rate limited (as client-go does not throttle watch streams), counted as
        ``("watch", plural)``. Non-2xx answers are not retried here: the caller owns
        the backoff.

        Args:
            res: the collection.
            namespace: ``None`` watches across all namespaces.
            label_selector: label selector string.
            field_selector: field selector string.
            resource_version: start after this RV (``"0"``/``""``: any/most recent state,
                preceded by synthetic ADDED events).
            timeout_seconds: the server ends the watch after this many seconds.
            allow_bookmarks: ask for BOOKMARK events (about one a minute from a real
                API server) that carry only ``metadata.resourceVersion``.
            read_timeout: seconds without a single byte after which the stream is
                declared dead (``ConnectionFailed(timed_out=True)``); set it above the
                longest expected silence (bookmark interval).

        Returns:
            A :class:`WatchStream` (an iterator of event dicts; close it when done).

        Raises:
            ApiError: non-2xx answer (``is_gone`` for a compacted RV, ``retry_after`` set
                on 429).
            ConnectionFailed: no answer.
        """
        query: dict[str, str | int | bool] = {
            "watch": True,
            "resourceVersion": resource_version,
            "timeoutSeconds": int(timeout_seconds),
        }
        if allow_bookmarks:
            query["allowWatchBookmarks"] = True
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        path = res.path(namespace)
        start = self._clock.now()
        response = self._send(
            verb="watch",
            resource=res.plural,
            method="GET",
            path=path,
            query=query,
            body=None,
            content_type="application/json",
            timeout=(min(_CONNECT_TIMEOUT, read_timeout), read_timeout),
        )
        status = int(response.status)
        self._record("watch", res.plural, status, self._clock.now() - start)
        if status == 401:
            self._reread_token()  # the informer's next attempt uses the rotated token
        if not 200 <= status < 300:
            try:
                data = response.read()
            except _TRANSPORT_ERRORS as exc:
                raise _connection_failed(exc, f"watch {path}: reading the error") from exc
            raise ApiError.from_response(status, response.getheaders(), data)
        return WatchStream(response.response)


def _write_query(field_manager: str | None, dry_run: bool) -> dict[str, str | int | bool]:
    query: dict[str, str | int | bool] = {}
    if field_manager:
        query["fieldManager"] = field_manager
    if dry_run:
        query["dryRun"] = "All"
    return query


def _in_cluster() -> bool:
    return bool(
        os.environ.get(SERVICE_HOST_ENV_NAME)
        and os.environ.get(SERVICE_PORT_ENV_NAME)
        and os.path.isfile(SERVICE_TOKEN_FILENAME)
    )


def _load_kubeconfig(configuration: Any, path: str, context: str | None) -> None:
    try:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except (ConfigException, OSError, ValueError, KeyError, yaml.YAMLError) as exc:
        where = f" (context {context!r})" if context else ""
        detail = " ".join(str(exc).split())  # YAML errors span lines; errors are one line
        raise ConfigError(f"cannot load kubeconfig {path!r}{where}: {detail}") from exc


def _watch_token_file(configuration: Any, path: str, context: str | None, clock: Clock) -> None:
    """Re-read a kubeconfig user's ``tokenFile`` periodically, as client-go does.

    The client's kubeconfig loader reads ``tokenFile`` once; a projected or rotated
    token would then stop working when it expires. When the selected user names a
    ``tokenFile``, install a :class:`_TokenFileRefresher` for it.
    """
    try:
        doc = yaml.safe_load(Path(path).expanduser().read_text()) or {}
    except (OSError, yaml.YAMLError):
        return
    contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or ()}
    selected = contexts.get(context or doc.get("current-context"), {})
    users = {u.get("name"): u.get("user") or {} for u in doc.get("users") or ()}
    token_file = users.get(selected.get("user"), {}).get("tokenFile")
    if token_file:
        token_path = Path(token_file).expanduser()
        if not token_path.is_absolute():
            token_path = Path(path).expanduser().parent / token_path
        refresher = _TokenFileRefresher(str(token_path), clock)
        # Read it now too: the stock loader keeps a trailing newline, which is not a
        # valid header value.
        refresher.force()
        refresher(configuration)
        configuration.refresh_api_key_hook = refresher


def _load_in_cluster(
    configuration: Any,
    clock: Clock,
    *,
    token_file: str = SERVICE_TOKEN_FILENAME,
    cert_file: str = SERVICE_CERT_FILENAME,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Load the pod's service-account configuration and keep its token fresh.

    Uses the stock ``InClusterConfigLoader`` for host, CA and the first token, then
    installs a :class:`_TokenFileRefresher` (re-read every 60 s of ``clock``) as the
    refresh hook.
    """
    try:
        InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=token_file,
            cert_filename=cert_file,
            try_refresh_token=False,
            environ=os.environ if environ is None else environ,
        ).load_and_set(configuration)
    except (ConfigException, OSError) as exc:
        raise ConfigError(f"cannot load the in-cluster configuration: {exc}") from exc
    configuration.refresh_api_key_hook = _TokenFileRefresher(token_file, clock)
