"""The Kubernetes client: typed verbs over raw JSON, the one way cbop talks to the API server.

This module owns :class:`KubeClient`, as client-go's dynamic client over its ``rest``
package, and implements :class:`cbop.kube.KubeInterface`, the protocol every caller
takes. Its verbs are its two bases, :class:`cbop.kube.reads.ReadVerbs` and
:class:`cbop.kube.writes.WriteVerbs`; each request goes through its
:class:`cbop.kube.transport.Transport`; its configuration comes from
:mod:`cbop.kube.config`. Bodies are plain JSON, dicts in and dicts out: no generated
model is built on any path, which keeps lists and watches cheap. One client is shared by
every thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from cbop import defaults
from cbop.clock import Clock, RealClock
from cbop.kube.accounting import RequestHook, infer_verb_resource
from cbop.kube.codec import encode_body
from cbop.kube.config import DEFAULT_USER_AGENT, load_configuration, new_api_client
from cbop.kube.interface import KubeInterface, WatchInterface
from cbop.kube.metrics import RestClientMetrics
from cbop.kube.reads import ReadVerbs
from cbop.kube.transport import MUTATING_VERBS, Transport, WriteFence
from cbop.kube.watch import WatchStream
from cbop.kube.writes import PATCH_CONTENT_TYPES, WriteVerbs

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


class KubeClient(ReadVerbs, WriteVerbs):
    """A thread-safe Kubernetes API client that speaks raw JSON (dicts in, dicts out).

    Build one with :meth:`from_config`, or wrap a configured
    ``kubernetes.client.ApiClient`` directly. All verbs raise :class:`ApiError` for a
    non-2xx answer and :class:`ConnectionFailed` when no answer arrived. Every request
    goes through the client's :class:`~cbop.kube.transport.Transport` (rate limit,
    Retry-After retries, write fence, counts, metrics).

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
        qps: float = defaults.KUBE_API_QPS,
        burst: int = defaults.KUBE_API_BURST,
        clock: Clock | None = None,
        max_retries: int = defaults.KUBE_API_MAX_RETRIES,
        on_request: RequestHook | None = None,
        metrics: RestClientMetrics | None = None,
        fence: WriteFence | None = None,
    ) -> None:
        self._transport = Transport(
            api_client,
            qps=qps,
            burst=burst,
            clock=clock,
            max_retries=max_retries,
            on_request=on_request,
            metrics=metrics,
            fence=fence,
        )

    @classmethod
    def _over(cls, transport: Transport) -> KubeClient:
        """Return a client whose requests go through ``transport``."""
        client = cls.__new__(cls)
        client._transport = transport
        return client

    # ----------------------------------------------------------------- construction

    @classmethod
    def from_config(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        qps: float = defaults.KUBE_API_QPS,
        burst: int = defaults.KUBE_API_BURST,
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
        list) or ``~/.kube/config`` (see :func:`cbop.kube.config.load_configuration`).

        Args:
            kubeconfig: path of a kubeconfig file.
            context: kubeconfig context name (default: the file's current context).
            qps: client-side sustained rate (requests/s); ``<= 0`` = unlimited.
            burst: client-side burst (requests); ``0``: ``qps`` rounded up.
            pool_size: idle connections kept per host by urllib3 (``maxsize``).
            user_agent: ``User-Agent`` header.
            clock: time source (tests pass a ``FakeClock``).
            on_request: request hook (see the class).

        Raises:
            ConfigError: no configuration found, or it could not be loaded.
        """
        clk: Clock = clock if clock is not None else RealClock()
        configuration = load_configuration(kubeconfig=kubeconfig, context=context, clock=clk)
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
        qps: float = defaults.KUBE_API_QPS,
        burst: int = defaults.KUBE_API_BURST,
        pool_size: int = 16,
        user_agent: str = DEFAULT_USER_AGENT,
        clock: Clock | None = None,
        on_request: RequestHook | None = None,
    ) -> KubeClient:
        """Build a client from a loaded ``kubernetes.client.Configuration`` (tuned in place).

        Sets the pool size (``connection_pool_maxsize``, which the generated
        ``RESTClientObject`` passes to urllib3 as ``maxsize``), TCP keepalive (as
        client-go dials), and urllib3 retries limited to one new connection attempt:
        a request that reached the server is never silently re-sent by urllib3
        (see :func:`cbop.kube.config.new_api_client`).
        """
        api_client = new_api_client(configuration, pool_size=pool_size, user_agent=user_agent)
        return cls(api_client, qps=qps, burst=burst, clock=clock, on_request=on_request)

    def with_limits(self, *, qps: float, burst: int, max_retries: int) -> KubeClient:
        """Return a client sharing this one's connections and credentials, not its limits.

        For traffic that must not queue behind the controller's, as client-go gives
        leader election a client of its own: renewals must not wait for a client-side
        rate limiter or for Retry-After sleeps past the renew deadline.
        """
        return self._over(
            self._transport.with_limits(qps=qps, burst=burst, max_retries=max_retries)
        )

    def throttled_for(self) -> float:
        """Seconds until the ``Retry-After`` of the last 429 answer to this client runs out.

        Returns 0.0 when no 429 asked this client to wait, or once the wait is over. Shared
        with the clients made by :meth:`with_fence`. Background writers (the Event sink)
        use it to stay out of the way of reconcile writes while API Priority and Fairness
        rejects this client's requests (see :meth:`wait_while_throttled`).
        """
        return self._transport.throttled_for()

    def wait_while_throttled(self) -> float:
        """Sleep on the client's clock until :meth:`throttled_for` is 0; return the seconds slept.

        A request that gets a 429 meanwhile extends the wait.
        """
        slept = 0.0
        while (left := self.throttled_for()) > 0:
            self._transport.clock.sleep(left)
            slept += left
        return slept

    def set_metrics(self, metrics: RestClientMetrics) -> None:
        """Report client-go's REST client metrics to ``metrics`` from now on.

        Clients made afterwards by :meth:`with_limits` report there too.
        """
        self._transport.set_metrics(metrics)

    def with_fence(self, fence: WriteFence) -> KubeClient:
        """Return a client sharing this one's connections and limits, with a write fence.

        ``fence()`` is called immediately before every mutating request (verbs in
        :data:`MUTATING_VERBS`) is sent, after client-side throttling and after each
        Retry-After wait, so nothing prepared before a pause goes out unchecked. When it
        returns False the request is not sent and :class:`LeaseNotHeld` is raised.
        Reads and watches are never fenced. The leader elector's own Lease writes use
        a client without a fence. Like a lease-checking write in a fenced store: the
        check narrows, but cannot close, the gap between "still leader" and "arrived".
        The rate limiter and the request counts are shared with this client.
        """
        return self._over(self._transport.with_fence(fence))

    @property
    def host(self) -> str:
        """The API server URL, e.g. ``https://127.0.0.1:6443``."""
        return cast(str, self._transport.api_client.configuration.host)

    def close(self) -> None:
        """Close the idle pooled connections (later requests open new ones)."""
        self._transport.close()

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
        return self._transport.request_counts()

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
        verb, resource = infer_verb_resource(method, path, query)
        return self._transport.call(
            verb,
            resource,
            method.upper(),
            path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout,
        )


if TYPE_CHECKING:  # the client and its watch stream implement the protocols, member by member
    _CLIENT: type[KubeInterface] = KubeClient
    _WATCH: type[WatchInterface] = WatchStream
