"""The transport under :class:`cbop.kube.KubeClient`: one request, sent carefully.

This module owns what happens between a verb and the wire, as client-go's
``rest.Request`` with its ``flowcontrol`` rate limiter and ``rest`` metrics hooks:

* optional client-side rate limiting with a token bucket (``qps``/``burst``; off by
  default as in controller-runtime since v0.21, ``qps <= 0`` disables it; ``burst <= 0``
  means one second's worth, ``qps`` rounded up), applied to every request except watch
  streams;
* a 429 or 5xx answer that carries ``Retry-After`` is retried, at most ``max_retries``
  (10) times, for every verb (the server did not process it), never before the
  ``Retry-After`` (capped at 60 s) has run out and at most half of it later, the delay
  drawn at random for each retry (client-go's ``wait.Jitter`` with factor 0.5), so the
  workers turned away together do not all come back together;
* at most 8 requests in flight at first, doubling every round trip up to 64 and then
  unlimited; after a ``429``, at most as many as the server has lately been taking
  (:class:`cbop.kube.inflight.InflightLimit`; watches excepted), lifted again 30 s
  after the last ``429``: not in client-go, whose workers each come back after their
  own ``Retry-After`` and keep a small priority level overloaded;
* a 401 makes a watched token file be re-read and the request sent once more
  (:mod:`cbop.kube.credentials`);
* responses may be gzip-compressed (``Accept-Encoding: gzip``, as Go's HTTP transport
  asks for by default; the API server compresses bodies over 128 KiB), except watches;
* a write fence (:meth:`Transport.with_fence`) checked immediately before each create,
  update, patch or delete goes on the wire (after any client-side throttling or
  Retry-After wait);
* every exchange is counted by (verb, resource plural), reported to an optional
  ``on_request(verb, resource, status_code, seconds)`` hook and to a
  :class:`cbop.kube.metrics.RestClientMetrics` (client-go's REST client metrics);
* each 429 is logged at debug level with its ``Retry-After``; running out of retries is
  a warning, at most one every 30 s per transport.

Bodies are plain JSON (:func:`encode_body`); list bodies are decoded item by item while
they arrive (:mod:`cbop.kube.jsonstream`).

Requests whose answer is read whole (every verb but watches and lists decoded while
they stream) go through libcurl (:mod:`cbop.kube.curl`), for a fifth of the client CPU
urllib3 costs per request, whenever the configuration is one libcurl can serve (no
proxy, no TLS server name override); the others, and every request of a configuration
it cannot serve, through the ``ApiClient``'s urllib3 pool.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final
from urllib.parse import quote

import orjson
import structlog
import urllib3
from kubernetes.client import rest as k8s_rest
from kubernetes.client.exceptions import ApiException

from cbop.clock import Clock, RealClock
from cbop.kube.credentials import reread_token
from cbop.kube.curl import CurlSession, curl_supports
from cbop.kube.errors import ApiError, ConnectionFailed, LeaseNotHeld
from cbop.kube.inflight import InflightLimit
from cbop.kube.jsonstream import ItemHook, StreamDecodeError, decode_list, paused_gc
from cbop.kube.metrics import NO_METRICS, NO_RESPONSE_CODE, RestClientMetrics
from cbop.locks import YieldingLock
from cbop.tokenbucket import TokenBucket

__all__ = [
    "CONNECT_TIMEOUT",
    "MUTATING_VERBS",
    "RETRY_AFTER_JITTER",
    "TRANSPORT_ERRORS",
    "RequestHook",
    "Transport",
    "WriteFence",
    "connection_failed",
    "decode_body",
    "encode_body",
    "infer_verb_resource",
    "is_timeout",
    "query_value",
]

#: ``on_request(verb, resource_plural, status_code, seconds)``; status 0 = no answer.
RequestHook = Callable[[str, str, int, float], None]

#: A write fence: returns whether a mutating request may be sent now.
WriteFence = Callable[[], bool]

#: Kubernetes verbs that change state; a fenced client checks its fence before each.
MUTATING_VERBS: Final = frozenset({"create", "update", "patch", "delete", "deletecollection"})

#: Longest wait, seconds, for a TCP/TLS connection to the API server.
CONNECT_TIMEOUT: Final = 10.0
_LIST_READ_SIZE: Final = 256 * 1024
# The longest Retry-After honoured. API Priority and Fairness asks for 1 s at first and
# doubles that per priority level, up to 32 s, while it keeps rejecting requests
# (k8s.io/apiserver's dropped-requests tracker); 60 s guards against anything else.
_MAX_RETRY_AFTER: Final = 60.0
#: A retry waits the (capped) Retry-After plus up to this fraction of it more, drawn at
#: random per retry: API Priority and Fairness answers every request it turns away in
#: the same second with the same whole number of seconds, and workers that all came
#: back at that same instant would find the level's few seats taken again.
RETRY_AFTER_JITTER: Final = 0.5
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
#: Transport failures raised by urllib3 and the sockets under it. The generated REST
#: layer turns TLS errors into ApiException(status=0).
TRANSPORT_ERRORS: Final = (urllib3.exceptions.HTTPError, OSError)

log = structlog.get_logger("cbop.kube")


def is_timeout(exc: BaseException) -> bool:
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


def connection_failed(exc: BaseException, what: str) -> ConnectionFailed:
    """Wrap a transport exception (one of :data:`TRANSPORT_ERRORS`) as :class:`ConnectionFailed`.

    ``timed_out`` is set for connect and read timeouts (:func:`is_timeout`).
    """
    return ConnectionFailed(f"{what}: {exc}", cause=exc, timed_out=is_timeout(exc))


def encode_body(body: Any) -> bytes | None:
    r"""Encode a request body as the bytes sent on the wire.

    Dicts and lists become compact JSON in raw UTF-8 (no spaces, non-ASCII characters
    as they are, not ``\uXXXX`` escapes), as client-go and kubectl send JSON: a value
    of 2-byte characters costs 2 bytes, not 6, so every object the API server accepts
    from kubectl also fits its 3 MiB request body limit when cbop writes it. JSON is
    also valid YAML, so server-side apply bodies are encoded the same way. ``str`` is
    sent as UTF-8 and ``bytes`` as is; ``None`` means no body. Encoded by ``orjson``
    (about 20x faster than the standard library's ``json.dumps`` on a ConfigMap, the
    same bytes for every body cbop sends: string keys, strings, ints, bools, null).

    Raises:
        TypeError: ``body`` is not JSON-serialisable (a non-string key, an integer
            beyond 64 bits, an unsupported type).
    """
    if body is None or isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    return orjson.dumps(body)


def decode_body(data: bytes) -> Any:
    """Decode a JSON response body (or one watch event line) as the API server sent it.

    Returns the decoded value (a dict for every Kubernetes object and list), as
    ``json.loads`` would, decoded by ``orjson`` (2-3x faster on a watch event of a
    ConfigMap), except that an integer outside ``[-2**63, 2**64 - 1]`` comes back as a
    ``float``: the float64 that the API server itself holds for such a number (see
    :func:`cbop.kube.jsonstream.decode_list`).

    Raises:
        ValueError: ``data`` is not JSON (``orjson.JSONDecodeError`` is one).
    """
    return orjson.loads(data)


def query_value(value: str | int | bool) -> str:
    """Render one query parameter value the way the API server parses it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def infer_verb_resource(method: str, path: str, query: Mapping[str, Any] | None) -> tuple[str, str]:
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
    watch = bool(query) and query_value(query.get("watch", False)) == "true"  # type: ignore[union-attr]
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


class Transport:
    """Sends requests to one API server: throttled, retried, fenced, counted and measured.

    The part of client-go's ``rest.RESTClient`` below the typed verbs: a
    :class:`cbop.kube.KubeClient` holds one and calls :meth:`call` (or
    :meth:`open_watch`) for each verb. Thread-safe: urllib3's pool manager is, and the
    counts and warnings are guarded by a lock. ``qps``, ``burst`` and ``max_retries``
    have no defaults here: :class:`cbop.kube.KubeClient`'s are the only ones.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient`` (host, TLS,
            credentials, the urllib3 pool).
        qps: sustained client-side request rate (requests/second); ``<= 0`` = unlimited.
        burst: token bucket size (requests).
        clock: time source for rate limiting, Retry-After waits and latency.
        max_retries: how often a 429/5xx answer with ``Retry-After`` is retried.
        rng: random source of the retry delays' jitter (default: a fresh
            ``random.Random``); shared with the transports made from this one.
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
        qps: float,
        burst: int,
        clock: Clock | None = None,
        max_retries: int,
        on_request: RequestHook | None = None,
        metrics: RestClientMetrics | None = None,
        fence: WriteFence | None = None,
        rng: random.Random | None = None,
        curl: bool = True,
    ) -> None:
        self._api = api_client
        self._rng = rng if rng is not None else random.Random()
        self._fence = fence
        self._clock: Clock = clock if clock is not None else RealClock()
        burst = burst if burst > 0 else math.ceil(qps)  # 0: one second's worth
        self._bucket = TokenBucket(qps, max(1, burst), clock=self._clock) if qps > 0 else None
        self._max_retries = max_retries
        self._on_request = on_request
        self._counts: dict[tuple[str, str], int] = {}
        self._counts_lock = YieldingLock()
        self._metrics: RestClientMetrics = metrics if metrics is not None else NO_METRICS
        configuration = getattr(api_client, "configuration", None)
        host = str(getattr(configuration, "host", "") or "")
        # client-go's ``host`` label: the API server's host:port.
        self._metrics_host = urllib3.util.parse_url(host).netloc or "" if host else ""
        self._exhausted_warnings = TokenBucket(
            1.0 / _EXHAUSTED_WARNING_PERIOD, 1, clock=self._clock
        )
        self._exhausted_suppressed = 0
        # Clock time at which the retries after the last 429 are all due (its Retry-After
        # plus the jitter window); a list so that the transports made by with_fence share
        # it (they are the same traffic).
        self._throttled_until = [0.0]
        # Requests in flight, limited only after a 429 (shared with with_fence's copies).
        self._inflight = InflightLimit(clock=self._clock)
        # Unary requests over libcurl when the configuration allows it (shared with the
        # copies made by with_limits and with_fence: the same connections).
        self._curl: CurlSession | None = (
            CurlSession(configuration)
            if curl and configuration is not None and curl_supports(configuration)
            else None
        )

    def close(self) -> None:
        """Close the idle connections, libcurl's and the urllib3 pool's.

        Later requests open new ones.
        """
        if self._curl is not None:
            self._curl.close()
        self._api.rest_client.close()

    @property
    def api_client(self) -> Any:
        """The ``kubernetes.client.ApiClient`` underneath (configuration and pool)."""
        return self._api

    @property
    def clock(self) -> Clock:
        """The time source of throttling, retries and latency."""
        return self._clock

    def with_limits(self, *, qps: float, burst: int, max_retries: int) -> Transport:
        """Return a transport sharing this one's connections, hook and metrics, not its limits.

        Its rate limiter and request counts are its own; it has no write fence.
        """
        limited = Transport(
            self._api,
            qps=qps,
            burst=burst,
            clock=self._clock,
            max_retries=max_retries,
            on_request=self._on_request,
            metrics=self._metrics,
            rng=self._rng,
            curl=False,
        )
        limited._curl = self._curl
        return limited

    def with_fence(self, fence: WriteFence) -> Transport:
        """Return a transport sharing this one's connections, limits and counts, with a fence.

        ``fence()`` is called immediately before every mutating request (verbs in
        :data:`MUTATING_VERBS`) is sent, after client-side throttling and after each
        Retry-After wait; when it returns False the request is not sent and
        :class:`~cbop.kube.errors.LeaseNotHeld` is raised. Reads and watches are never
        fenced.
        """
        fenced = Transport(
            self._api,
            qps=0,
            burst=1,
            clock=self._clock,
            max_retries=self._max_retries,
            on_request=self._on_request,
            metrics=self._metrics,
            fence=fence,
            rng=self._rng,
            curl=False,
        )
        fenced._curl = self._curl
        # Share the rate limiter and the request counts: the fenced client is the same
        # traffic, seen through a gate, not new traffic.
        fenced._bucket = self._bucket
        fenced._counts = self._counts
        fenced._counts_lock = self._counts_lock
        fenced._throttled_until = self._throttled_until
        fenced._inflight = self._inflight
        return fenced

    def throttled_for(self) -> float:
        """Seconds until the retries after the last 429 answer are all due (0.0: none).

        That is the 429's ``Retry-After`` (capped at 60 s) plus its jitter window (half
        of it), counted from the answer: the longest any request turned away with it
        waits. Shared with the transports made by :meth:`with_fence`.
        """
        return max(0.0, self._throttled_until[0] - self._clock.now())

    def set_metrics(self, metrics: RestClientMetrics) -> None:
        """Report client-go's REST client metrics to ``metrics`` from now on."""
        self._metrics = metrics

    # ----------------------------------------------------------------- accounting

    def request_counts(self) -> dict[tuple[str, str], int]:
        """Return a snapshot of HTTP exchanges made, keyed by ``(verb, resource plural)``."""
        with self._counts_lock:
            return dict(self._counts)

    def record(self, verb: str, resource: str, status: int, seconds: float) -> None:
        """Count one exchange and report it to the metrics and the request hook.

        Args:
            verb: Kubernetes verb (``get``, ``list``, ``watch``, ``create``, ...).
            resource: resource plural, ``plural/subresource`` for a subresource.
            status: HTTP status code; 0 when no answer arrived.
            seconds: latency of the exchange.

        Never raises: a failing metrics sink or hook must not break a request.
        """
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

    # ----------------------------------------------------------------- sending

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
        stream: bool = False,
    ) -> Any:
        """Make one HTTP exchange; return the response (any status).

        ``body`` is the encoded request body (see :func:`encode_body`), sent as is. A
        ``stream`` (a watch, a list decoded while it arrives) goes through urllib3 and
        returns its ``RESTResponse``, unread; anything else through libcurl when the
        transport has a session (a :class:`cbop.kube.curl.CurlResponse`, read whole).

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
        start = self._clock.now()
        try:
            m, url, header_params = self._target(method, path, query, headers)
            if self._curl is not None and not stream:
                return self._curl.request(m, url, header_params, body, timeout)
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
        except (*TRANSPORT_ERRORS, ApiException) as exc:
            self.record(verb, resource, 0, self._clock.now() - start)
            raise connection_failed(exc, f"{method} {path}") from exc

    def _target(
        self,
        method: str,
        path: str,
        query: Mapping[str, str | int | bool] | None,
        headers: dict[str, str],
    ) -> tuple[str, str, dict[str, str]]:
        """Return ``(method, url, headers)`` for one request, authentication included.

        The URL is the configured host, ``path`` and ``query`` (values rendered by
        :func:`query_value` and percent-encoded as the generated client does); the
        headers gain the client's default headers (User-Agent) and the bearer token of
        the moment, through the generated client's ``update_params_for_auth`` (which
        calls the token refresh hook, e.g. the reread of a projected ServiceAccount
        token). This is the generated client's ``param_serialize`` for the only shapes
        cbop sends (string headers, scalar query values, no form or file parameters),
        without its generic serialisation of every header and parameter.
        """
        api = self._api
        headers.update(api.default_headers)
        if api.cookie:
            headers["Cookie"] = api.cookie
        query_params = [(k, query_value(v)) for k, v in (query or {}).items()]
        api.update_params_for_auth(headers, query_params, ["BearerToken"], path, method, None)
        url = api.configuration.host + path
        if query_params:
            url += "?" + "&".join(f"{k}={quote(v)}" for k, v in query_params)
        return method, url, headers

    def call(
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
        """Send one request (retrying as the module says) and return the decoded JSON body.

        Args:
            verb: Kubernetes verb, for counting, metrics and the write fence.
            resource: resource plural (``plural/subresource``), for counting.
            method: HTTP method.
            path: URL path from the server root.
            query: query parameters; booleans are sent as ``true``/``false``.
            body: a JSON-serialisable value, ``bytes``/``str``, or ``None`` (see
                :func:`encode_body`).
            content_type: ``Content-Type`` of the body.
            timeout: seconds for the connection (at most 10) and for each socket read;
                ``None`` waits forever.
            stream_items: decode a 2xx body as a list, item by item while it arrives.
            item_hook: with ``stream_items``, ``hook(item) -> item`` per list item.

        Returns:
            The body decoded as a dict (``{}`` for an empty body; a JSON array becomes
            ``{"items": [...]}``).

        Raises:
            LeaseNotHeld: a fenced mutating request whose fence said no (not sent).
            ApiError: non-2xx answer (after Retry-After retries), with the ``Status``
                fields, ``retry_after`` and ``request_bytes`` set.
            ConnectionFailed: no answer (refused, reset, TLS failure, timeout).
        """
        request_timeout = None if timeout is None else (min(CONNECT_TIMEOUT, timeout), timeout)
        payload = encode_body(body)
        attempt = 0
        reauthenticated = False
        while True:
            self._throttle(verb)
            cut = self._inflight.acquire()
            status = 0
            try:
                # The fence is asked after every wait, right before the request is sent.
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
                    stream=stream_items,
                )
                status = int(response.status)
                if stream_items and 200 <= status < 300:
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
                except TRANSPORT_ERRORS as exc:
                    self.record(verb, resource, 0, self._clock.now() - start)
                    raise connection_failed(exc, f"{method} {path}: reading the response") from exc
            finally:
                self._inflight.release(cut, throttled=status == 429, answered=status != 0)
            self.record(verb, resource, status, self._clock.now() - start)
            if 200 <= status < 300:
                if not data:
                    return {}
                try:
                    decoded = decode_body(data)
                except ValueError as exc:
                    raise ApiError(
                        status, "InvalidResponse", f"non-JSON response body: {data[:200]!r}"
                    ) from exc
                return decoded if isinstance(decoded, dict) else {"items": decoded}
            error = ApiError.from_response(status, response.getheaders(), data)
            error.request_bytes = None if payload is None else len(payload)
            if status == 401 and not reauthenticated and reread_token(self._api.configuration):
                reauthenticated = True
                continue
            if error.retry_after is not None and status == 429:
                window = min(error.retry_after, _MAX_RETRY_AFTER) * (1.0 + RETRY_AFTER_JITTER)
                until = self._clock.now() + window
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
        """Sleep the ``Retry-After`` the server asked for (capped at 60 s), plus jitter.

        As client-go sleeps the ``Retry-After`` before a retry; the extra, uniform in
        ``[0, RETRY_AFTER_JITTER)`` times the capped ``Retry-After`` (as client-go's
        ``wait.Jitter``), spreads the retries of requests turned away together.
        """
        assert error.retry_after is not None
        asked = min(error.retry_after, _MAX_RETRY_AFTER)
        wait = asked * (1.0 + RETRY_AFTER_JITTER * self._rng.random())
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
        except TRANSPORT_ERRORS as exc:
            self.record(verb, resource, 0, self._clock.now() - start)
            raise connection_failed(exc, f"{method} {path}: reading the response") from exc
        except StreamDecodeError as exc:
            self.record(verb, resource, status, self._clock.now() - start)
            raise ApiError(status, "InvalidResponse", f"undecodable list body: {exc}") from exc
        finally:
            raw.release_conn()
        self.record(verb, resource, status, self._clock.now() - start)
        return decoded

    # ----------------------------------------------------------------- watch

    def open_watch(
        self,
        resource: str,
        path: str,
        query: Mapping[str, str | int | bool],
        *,
        read_timeout: float,
    ) -> Any:
        """Open a watch response and return its raw urllib3 response, unread.

        Not rate limited (as client-go does not throttle watch streams), never fenced,
        counted as ``("watch", resource)``. Non-2xx answers are not retried here: the
        caller owns the backoff. A 401 makes a watched token file be re-read, so the
        caller's next attempt uses the rotated token.

        Args:
            resource: resource plural, for counting.
            path: the collection's URL path.
            query: query parameters, ``watch=true`` included.
            read_timeout: seconds without a byte after which a read fails; the
                connection timeout is the smaller of this and 10 s.

        Raises:
            ApiError: non-2xx answer (``is_gone`` for a compacted RV, ``retry_after`` set
                on 429).
            ConnectionFailed: no answer.
        """
        start = self._clock.now()
        response = self._send(
            verb="watch",
            resource=resource,
            method="GET",
            path=path,
            query=query,
            body=None,
            content_type="application/json",
            timeout=(min(CONNECT_TIMEOUT, read_timeout), read_timeout),
            stream=True,
        )
        status = int(response.status)
        self.record("watch", resource, status, self._clock.now() - start)
        if status == 401:
            reread_token(
                self._api.configuration
            )  # the informer's next attempt uses the rotated token
        if not 200 <= status < 300:
            try:
                data = response.read()
            except TRANSPORT_ERRORS as exc:
                raise connection_failed(exc, f"watch {path}: reading the error") from exc
            raise ApiError.from_response(status, response.getheaders(), data)
        return response.response
