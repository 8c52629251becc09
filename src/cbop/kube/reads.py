"""The read verbs of the Kubernetes client: GET one object, LIST a page, open a WATCH.

This module owns :class:`ReadVerbs`, the part of :class:`cbop.kube.KubeClient` that
reads: ``get``, ``list`` (decoded item by item while it arrives, see
:mod:`cbop.kube.jsonstream`) and ``watch`` (a :class:`cbop.kube.watch.WatchStream`).
Every caller of the API reaches them through :class:`~cbop.kube.KubeClient`, which
supplies the :class:`~cbop.kube.transport.Transport` they send through; reads are never
fenced.
"""

from __future__ import annotations

from typing import Any

from cbop.kube.jsonstream import ItemHook
from cbop.kube.resources import Resource
from cbop.kube.transport import Transport
from cbop.kube.watch import WatchStream

__all__ = ["ReadVerbs"]


class ReadVerbs:
    """GET, LIST and WATCH over the client's transport (a base of :class:`KubeClient`).

    All verbs raise :class:`ApiError` for a non-2xx answer and :class:`ConnectionFailed`
    when no answer arrived.
    """

    _transport: Transport

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
