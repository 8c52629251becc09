"""The Kubernetes client: typed verbs over raw JSON, the one way cbop talks to the API server.

This module owns :class:`KubeClient`, the facade every caller uses (as client-go's
typed/dynamic clients over its ``rest`` package). It is built from three parts:

* :mod:`cbop.kube.config` and :mod:`cbop.kube.credentials`: where the configuration
  comes from (kubeconfig, in-cluster) and how token files stay fresh;
* :mod:`cbop.kube.transport`: one request on the wire, with optional client-side rate
  limiting (qps/burst, off by default), Retry-After retries, gzip, the write fence
  (:meth:`KubeClient.with_fence`), request counts and client-go's REST client metrics
  (:meth:`KubeClient.set_metrics`);
* :mod:`cbop.kube.watch`: the :class:`WatchStream` a watch returns.

Requests go through ``kubernetes.client.ApiClient`` (configuration loading, TLS,
authentication, the urllib3 pool) but bodies are plain JSON: requests take dicts,
responses are ``json.loads`` of the body. No generated model is built on any path, which
keeps lists and watches cheap.

Thread-safety: one :class:`KubeClient` is shared by all threads. urllib3's pool manager
is thread-safe; its per-host pool keeps up to ``pool_size`` idle connections.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, cast

from cbop import defaults
from cbop.clock import Clock, RealClock
from cbop.kube.accounting import RequestHook, infer_verb_resource
from cbop.kube.codec import encode_body
from cbop.kube.config import DEFAULT_USER_AGENT, load_configuration, new_api_client
from cbop.kube.jsonstream import ItemHook
from cbop.kube.metrics import RestClientMetrics
from cbop.kube.resources import Resource
from cbop.kube.transport import MUTATING_VERBS, Transport, WriteFence
from cbop.kube.watch import WatchStream

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

#: ``patch_type`` -> ``Content-Type`` of a PATCH request.
PATCH_CONTENT_TYPES: Final[Mapping[str, str]] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}


class KubeClient:
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
        return self._transport.call(
            "get", res.plural, "GET", res.path(namespace, name), timeout=timeout
        )

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
        shard_selector: str | None = None,
    ) -> dict[str, Any]:
        """LIST a collection (one page); returns the list dict.

        The body is decoded item by item while it arrives (:mod:`cbop.kube.jsonstream`):
        the raw body is never held whole, each item may be reduced by ``item_hook``
        before the next is decoded, and object keys are shared between items. The cyclic garbage
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
            shard_selector: the ``shardSelector`` query parameter (KEP-5866, e.g.
                :meth:`cbop.shardrange.ShardRange.selector`); send it with every page. A
                kube-apiserver 1.36 with the ``ShardedListAndWatch`` gate on returns only
                the objects in the range (built-in resources echo the selector in
                ``metadata.shardInfo``, custom resources do not); with the gate off (its
                default) or an older server, the parameter is ignored and everything is
                returned.

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
        if shard_selector:
            query["shardSelector"] = shard_selector
        return self._transport.call(
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
        return self._transport.call(
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
        return self._transport.call(
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
        return self._transport.call(
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
        return self._transport.call(
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
        shard_selector: str | None = None,
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
            shard_selector: the ``shardSelector`` query parameter, as :meth:`list`: with
                the gate on, only events of objects in the range arrive (bookmarks
                always do); with it off, the parameter is ignored.

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
        if shard_selector:
            query["shardSelector"] = shard_selector
        response = self._transport.open_watch(
            res.plural, res.path(namespace), query, read_timeout=read_timeout
        )
        return WatchStream(response)


def _write_query(field_manager: str | None, dry_run: bool) -> dict[str, str | int | bool]:
    query: dict[str, str | int | bool] = {}
    if field_manager:
        query["fieldManager"] = field_manager
    if dry_run:
        query["dryRun"] = "All"
    return query
