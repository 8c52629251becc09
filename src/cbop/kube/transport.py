"""The transport under :class:`cbop.kube.KubeClient`: one request, sent carefully.

This module owns :class:`Transport`, what happens between a verb and the wire, as
client-go's ``rest.Request`` with its rate limiter and metrics hooks; each client has
one. A request passes, in order: an optional token bucket (``qps``/``burst``, off by
default as in controller-runtime), the cap on requests in flight
(:mod:`cbop.kube.inflight`), the write fence (:meth:`Transport.with_fence`, checked
right before a write goes on the wire, after any wait), the exchange itself, then
``Retry-After`` retries of a 429 or 5xx (:mod:`cbop.kube.retryafter`) and one resend
after a 401 with a re-read token (:mod:`cbop.kube.credentials`), and one resend of a
GET whose kept-alive connection the server closed before answering; every exchange is
counted (:mod:`cbop.kube.accounting`). Watches skip the bucket and the cap.

Answers read whole go through libcurl (:mod:`cbop.kube.curl`, a fraction of urllib3's
client CPU per request) whenever the configuration allows; watches, lists decoded while
they stream (:mod:`cbop.kube.jsonstream`) and the rest through the ``ApiClient``'s
urllib3 pool, gzip accepted except on watches.
"""

from __future__ import annotations

import http.client
import math
import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final
from urllib.parse import quote

import urllib3
from kubernetes.client import rest as k8s_rest
from kubernetes.client.exceptions import ApiException

from cbop.clock import Clock, RealClock
from cbop.kube.accounting import RequestHook, RequestRecorder
from cbop.kube.codec import decode_body, encode_body, query_value
from cbop.kube.credentials import reread_token
from cbop.kube.curl import CurlSession, curl_supports
from cbop.kube.errors import TRANSPORT_ERRORS, ApiError, LeaseNotHeld, connection_failed
from cbop.kube.inflight import InflightLimit
from cbop.kube.jsonstream import ItemHook, StreamDecodeError, decode_list, paused_gc
from cbop.kube.metrics import RestClientMetrics
from cbop.kube.retryafter import RetryAfter
from cbop.tokenbucket import TokenBucket

__all__ = ["CONNECT_TIMEOUT", "MUTATING_VERBS", "Transport", "WriteFence"]

#: A write fence: returns whether a mutating request may be sent now.
WriteFence = Callable[[], bool]

#: Kubernetes verbs that change state; a fenced client checks its fence before each.
MUTATING_VERBS: Final = frozenset({"create", "update", "patch", "delete", "deletecollection"})

#: Longest wait, seconds, for a TCP/TLS connection to the API server.
CONNECT_TIMEOUT: Final = 10.0
_LIST_READ_SIZE: Final = 256 * 1024


class Transport:
    """Sends requests to one API server: throttled, retried, fenced, counted and measured.

    The part of client-go's ``rest.RESTClient`` below the typed verbs: a
    :class:`cbop.kube.KubeClient` holds one and calls :meth:`call` (or
    :meth:`open_watch`) for each verb. Thread-safe: urllib3's pool manager is, and so
    are the parts it is built of (:class:`cbop.kube.accounting.RequestRecorder`,
    :class:`cbop.kube.retryafter.RetryAfter`, :class:`cbop.kube.inflight.InflightLimit`).
    ``qps``, ``burst`` and ``max_retries`` have no defaults here:
    :class:`cbop.kube.KubeClient`'s are the only ones.

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
        self._fence = fence
        self._clock: Clock = clock if clock is not None else RealClock()
        burst = burst if burst > 0 else math.ceil(qps)  # 0: one second's worth
        self._bucket = TokenBucket(qps, max(1, burst), clock=self._clock) if qps > 0 else None
        # Retry-After retries and the throttled window after a 429 (the window shared
        # with with_fence's copies: they are the same traffic).
        self._retries = RetryAfter(
            clock=self._clock,
            rng=rng if rng is not None else random.Random(),
            max_retries=max_retries,
        )
        configuration = getattr(api_client, "configuration", None)
        host = str(getattr(configuration, "host", "") or "")
        # Counts and metrics; client-go's ``host`` label: the API server's host:port.
        self._recorder = RequestRecorder(
            host=urllib3.util.parse_url(host).netloc or "" if host else "",
            metrics=metrics,
            on_request=on_request,
        )
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
            on_request=self._recorder.on_request,
            metrics=self._recorder.metrics,
            rng=self._retries.rng,
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
            max_retries=self._retries.max_retries,
            on_request=self._recorder.on_request,
            metrics=self._recorder.metrics,
            fence=fence,
            rng=self._retries.rng,
            curl=False,
        )
        fenced._curl = self._curl
        # Share the rate limiter and the request counts: the fenced client is the same
        # traffic, seen through a gate, not new traffic.
        fenced._bucket = self._bucket
        fenced._recorder = self._recorder.sharing_counts()
        fenced._retries = self._retries.sharing_window()
        fenced._inflight = self._inflight
        return fenced

    def throttled_for(self) -> float:
        """Seconds until the retries after the last 429 answer are all due (0.0: none).

        As :meth:`cbop.kube.retryafter.RetryAfter.throttled_for`; shared with the
        transports made by :meth:`with_fence`.
        """
        return self._retries.throttled_for()

    def set_metrics(self, metrics: RestClientMetrics) -> None:
        """Report client-go's REST client metrics to ``metrics`` from now on."""
        self._recorder.metrics = metrics

    def request_counts(self) -> dict[tuple[str, str], int]:
        """Return a snapshot of HTTP exchanges made, keyed by ``(verb, resource plural)``."""
        return self._recorder.counts()

    # ----------------------------------------------------------------- sending

    def _throttle(self, verb: str) -> None:
        wait = self._bucket.reserve() if self._bucket is not None else 0.0
        if wait > 0:
            self._clock.sleep(wait)
        self._recorder.rate_limited(verb, wait)

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
            pool = self._api.rest_client.pool_manager
            deadline = (
                urllib3.Timeout(connect=timeout[0], read=timeout[1])
                if timeout is not None
                else None
            )

            def send() -> Any:
                return pool.request(
                    m,
                    url,
                    body=body,
                    headers=header_params,
                    timeout=deadline,
                    preload_content=False,
                )

            try:
                raw = send()
            except urllib3.exceptions.HTTPError as exc:
                if m != "GET" or not closed_before_answer(exc):
                    raise
                raw = send()  # once: a second failure is the caller's
            return k8s_rest.RESTResponse(raw)
        except (*TRANSPORT_ERRORS, ApiException) as exc:
            self._recorder.record(verb, resource, 0, self._clock.now() - start)
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
                    self._recorder.record(verb, resource, 0, self._clock.now() - start)
                    raise connection_failed(exc, f"{method} {path}: reading the response") from exc
            finally:
                self._inflight.release(cut, throttled=status == 429, answered=status != 0)
            self._recorder.record(verb, resource, status, self._clock.now() - start)
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
            if self._retries.retry(
                error, attempt, verb=verb, resource=resource, path=path, recorder=self._recorder
            ):
                attempt += 1
                continue
            raise error

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
            self._recorder.record(verb, resource, 0, self._clock.now() - start)
            raise connection_failed(exc, f"{method} {path}: reading the response") from exc
        except StreamDecodeError as exc:
            self._recorder.record(verb, resource, status, self._clock.now() - start)
            raise ApiError(status, "InvalidResponse", f"undecodable list body: {exc}") from exc
        finally:
            raw.release_conn()
        self._recorder.record(verb, resource, status, self._clock.now() - start)
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
        self._recorder.record("watch", resource, status, self._clock.now() - start)
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


def closed_before_answer(exc: BaseException) -> bool:
    """Whether ``exc`` means the server closed the connection before any byte of an answer.

    True when ``http.client.RemoteDisconnected`` is the reason of a urllib3 error (its
    ``reason``, the arguments of its ``ProtocolError``, or a cause in the chain): the
    server, or an idle-connection reaper between, closed a kept-alive connection just as
    the request went out, so it never answered. Only then is a GET sent again, once, as
    Go's HTTP transport under client-go does for a request on a reused connection that
    the server closed (``errServerClosedIdle``). Any other failure is the caller's.
    """
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        item = todo.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, http.client.RemoteDisconnected):
            return True
        todo.extend(item.args)
        todo.append(getattr(item, "reason", None))
        todo.extend((item.__cause__, item.__context__))
    return False
