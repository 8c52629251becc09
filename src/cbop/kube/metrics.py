"""The REST client's metrics seam: what :class:`cbop.kube.KubeClient` reports, not how.

This module owns the :class:`RestClientMetrics` protocol, the hooks the client calls
for every HTTP exchange, client-side rate-limiter wait and retry, after client-go's
``tools/metrics`` package (whose adapters controller-runtime registers as the
``rest_client_*`` families). The client never imports Prometheus: ``cbop.metrics``
provides an implementation, and :data:`NO_METRICS` is the default.

Label values follow client-go: ``method``/``verb`` is the HTTP method (``GET``,
``POST``, ...), ``host`` the API server's ``host:port``, ``code`` the HTTP status as a
string, or ``"<error>"`` when no answer arrived.
"""

from __future__ import annotations

from typing import Final, Protocol

__all__ = ["NO_METRICS", "NO_RESPONSE_CODE", "RestClientMetrics"]

#: The ``code`` label of a request that got no HTTP answer (as client-go's).
NO_RESPONSE_CODE: Final = "<error>"


class RestClientMetrics(Protocol):
    """Hooks the client calls; implementations must be thread-safe and must not raise."""

    def request(self, code: str, method: str, host: str) -> None:
        """Count one HTTP exchange (``rest_client_requests_total``)."""
        ...

    def request_duration(self, verb: str, host: str, seconds: float) -> None:
        """Observe one exchange's latency in seconds (``rest_client_request_duration_seconds``)."""
        ...

    def rate_limiter_duration(self, verb: str, host: str, seconds: float) -> None:
        """Observe a wait for the client-side rate limiter, in seconds (0 when none)."""
        ...

    def retry(self, code: str, method: str, host: str, wait_seconds: float) -> None:
        """Count one retry after a 429/5xx answer and the ``Retry-After`` seconds waited."""
        ...


class _NoMetrics:
    """Discards everything."""

    def request(self, code: str, method: str, host: str) -> None:
        pass

    def request_duration(self, verb: str, host: str, seconds: float) -> None:
        pass

    def rate_limiter_duration(self, verb: str, host: str, seconds: float) -> None:
        pass

    def retry(self, code: str, method: str, host: str, wait_seconds: float) -> None:
        pass


#: The default: no metrics.
NO_METRICS: Final[RestClientMetrics] = _NoMetrics()
