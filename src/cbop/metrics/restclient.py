"""Prometheus export of the API client's metrics, under client-go's names.

This module owns :class:`PrometheusRestClientMetrics`, the
:class:`cbop.kube.RestClientMetrics` that controller-runtime's registration of client-go's
``tools/metrics`` hooks corresponds to. Families:

===========================================  =========  =================================
``rest_client_requests_total``               counter    ``code``, ``method``, ``host``
``rest_client_request_duration_seconds``     histogram  ``verb``, ``host``
``rest_client_rate_limiter_duration_seconds`` histogram ``verb``, ``host``
``rest_client_request_retries_total``        counter    ``code``, ``method``, ``host``
``cbop_rest_client_retry_wait_seconds_total`` counter   ``code``, ``method``, ``host``
===========================================  =========  =================================

The first four are client-go's (a retry is counted when the server answered 429 or 5xx
with ``Retry-After``); the last adds the seconds waited before those retries, so
``rate()`` of it is the share of time a client spent waiting on the server. Histogram
buckets are client-go's: 5 ms to 60 s.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from cbop.locks import YieldingLock

__all__ = ["REST_CLIENT_BUCKETS", "PrometheusRestClientMetrics"]

#: client-go's latency buckets for both rest_client histograms (seconds).
REST_CLIENT_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

_CODE_LABELS = ("code", "method", "host")
_VERB_LABELS = ("verb", "host")


class PrometheusRestClientMetrics:
    """A :class:`cbop.kube.RestClientMetrics` registered in ``registry`` (one per registry).

    Raises:
        ValueError: from the constructor, when ``registry`` already holds these names.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._requests = Counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            _CODE_LABELS,
            registry=registry,
        )
        self._duration = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            _VERB_LABELS,
            buckets=REST_CLIENT_BUCKETS,
            registry=registry,
        )
        self._rate_limiter = Histogram(
            "rest_client_rate_limiter_duration_seconds",
            "Client side rate limiter latency in seconds. Broken down by verb, and host.",
            _VERB_LABELS,
            buckets=REST_CLIENT_BUCKETS,
            registry=registry,
        )
        self._retries = Counter(
            "rest_client_request_retries_total",
            "Number of request retries, partitioned by status code, method, and host.",
            _CODE_LABELS,
            registry=registry,
        )
        self._retry_wait = Counter(
            "cbop_rest_client_retry_wait_seconds_total",
            "Seconds waited before retries: the server's Retry-After (capped) plus jitter.",
            _CODE_LABELS,
            registry=registry,
        )
        # Labelled children by (family, label values): every request reports to the
        # same few series, and prometheus_client's ``labels`` takes a lock and builds
        # the key on each call. Reads need no lock (a dict lookup); a racing first
        # use of a series asks ``labels`` twice and gets the same child both times.
        self._children: dict[tuple[Any, ...], Any] = {}
        # Every request updates two values, each guarded by prometheus_client's own
        # threading.Lock, which busy workers would convoy on (cbop.locks); one
        # YieldingLock around the updates leaves those locks uncontended.
        self._lock = YieldingLock()

    def _child(self, family: Counter | Histogram, *values: str) -> Any:
        key = (family, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*values)
        return child

    def request(self, code: str, method: str, host: str) -> None:
        """Count one HTTP exchange."""
        child = self._child(self._requests, code, method, host)
        with self._lock:
            child.inc()

    def request_duration(self, verb: str, host: str, seconds: float) -> None:
        """Observe one exchange's latency (seconds)."""
        child = self._child(self._duration, verb, host)
        with self._lock:
            child.observe(seconds)

    def rate_limiter_duration(self, verb: str, host: str, seconds: float) -> None:
        """Observe one wait for the client-side rate limiter (seconds)."""
        child = self._child(self._rate_limiter, verb, host)
        with self._lock:
            child.observe(seconds)

    def retry(self, code: str, method: str, host: str, wait_seconds: float) -> None:
        """Count one retry and the seconds waited before it."""
        self._retries.labels(code=code, method=method, host=host).inc()
        self._retry_wait.labels(code=code, method=method, host=host).inc(wait_seconds)
