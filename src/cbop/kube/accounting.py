"""Request accounting: each HTTP exchange named, counted and reported.

This module owns what :class:`cbop.kube.transport.Transport` tells the world about the
requests it sends, as client-go's ``rest`` package reports to its ``tools/metrics``
hooks:

* :func:`infer_verb_resource` names a raw request as a Kubernetes (verb, resource
  plural) pair (used by :meth:`cbop.kube.KubeClient.request`);
* :class:`RequestRecorder` counts every exchange by that pair (what
  :meth:`cbop.kube.KubeClient.request_counts` returns) and reports it, each client-side
  rate-limiter wait and each Retry-After retry to a
  :class:`cbop.kube.metrics.RestClientMetrics` (labelled with the HTTP method and the
  API server's ``host:port``, as client-go's) and to an optional :data:`RequestHook`.

Reporting never raises: a failing metrics sink or hook must not break a request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Final

from cbop.kube.codec import query_value
from cbop.kube.metrics import NO_METRICS, NO_RESPONSE_CODE, RestClientMetrics
from cbop.locks import YieldingLock

__all__ = ["RequestHook", "RequestRecorder", "http_method", "infer_verb_resource"]

#: ``on_request(verb, resource_plural, status_code, seconds)``; status 0 = no answer.
RequestHook = Callable[[str, str, int, float], None]

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


def http_method(verb: str) -> str:
    """Return the HTTP method of a Kubernetes verb, client-go's ``method`` label.

    A verb that is not a Kubernetes verb (a raw request outside ``/api``/``/apis``, see
    :func:`infer_verb_resource`) is upper-cased.
    """
    return _HTTP_METHODS.get(verb, verb.upper())


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


class RequestRecorder:
    """Counts HTTP exchanges by (verb, resource plural) and reports them.

    One per :class:`cbop.kube.transport.Transport`; the transports it makes with a
    write fence count into the same numbers (:meth:`sharing_counts`). Thread-safe: the
    counts are guarded by a lock.

    Args:
        host: the API server's ``host:port`` (client-go's ``host`` label).
        metrics: where client-go's REST client metrics go (default: nowhere).
        on_request: optional ``(verb, resource, status_code, seconds)`` hook, called
            once per HTTP exchange (also for retried attempts); exceptions it raises
            are swallowed.

    Attributes:
        host: as given.
        metrics: as given (:data:`cbop.kube.metrics.NO_METRICS` for None); may be
            replaced at any time.
        on_request: as given.
    """

    def __init__(
        self,
        *,
        host: str,
        metrics: RestClientMetrics | None = None,
        on_request: RequestHook | None = None,
    ) -> None:
        self.host = host
        self.metrics: RestClientMetrics = metrics if metrics is not None else NO_METRICS
        self.on_request = on_request
        self._counts: dict[tuple[str, str], int] = {}
        self._counts_lock = YieldingLock()

    def sharing_counts(self) -> RequestRecorder:
        """Return a recorder with this one's host, metrics and hook, adding to its counts.

        Replacing :attr:`metrics` on either afterwards leaves the other as it is.
        """
        twin = RequestRecorder(host=self.host, metrics=self.metrics, on_request=self.on_request)
        twin._counts = self._counts
        twin._counts_lock = self._counts_lock
        return twin

    def counts(self) -> dict[tuple[str, str], int]:
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
        method = http_method(verb)
        code = str(status) if status else NO_RESPONSE_CODE
        with contextlib.suppress(Exception):
            self.metrics.request(code, method, self.host)
            self.metrics.request_duration(method, self.host, seconds)
        hook = self.on_request
        if hook is not None:
            # A metrics hook must never break a request.
            with contextlib.suppress(Exception):
                hook(verb, resource, status, seconds)

    def rate_limited(self, verb: str, seconds: float) -> None:
        """Report the client-side rate limiter's wait before a request (0.0 included).

        Never raises.
        """
        with contextlib.suppress(Exception):
            self.metrics.rate_limiter_duration(http_method(verb), self.host, seconds)

    def retried(self, verb: str, status: int, seconds: float) -> None:
        """Report a retry of a request answered with ``status``, after ``seconds`` of wait.

        Never raises.
        """
        with contextlib.suppress(Exception):
            self.metrics.retry(str(status), http_method(verb), self.host, seconds)
