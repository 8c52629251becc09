"""Who may read ``/metrics``: authentication and authorization delegated to the API server.

This module owns :class:`DelegatingAuth`, the decision ``--metrics-secure`` makes for
each request, as controller-runtime's ``filters.WithAuthenticationAndAuthorization``:

- **Authentication**: the request's ``Authorization: Bearer <token>`` is checked with a
  ``TokenReview``. No token, or a token the API server does not authenticate, gets 401.
- **Authorization**: the user the review names is checked with a
  ``SubjectAccessReview`` for verb ``get`` on the non-resource URL ``/metrics`` (what
  the ClusterRole ``cbop-metrics-reader`` grants). A user without that right gets 403.
- **Caching**: each token's decision (allowed, 401 or 403) is kept for ``ttl`` seconds
  (10 by default), so a Prometheus scraping every 15 s costs at most one review pair
  per token and scrape. A review that fails (API server unreachable or refusing, e.g.
  cbop lacks the RBAC to create reviews) is not cached and answers 503 (unreachable,
  429 or 5xx: try again) or 500 (any other refusal), never a crash.

The reviews are made through a :class:`cbop.metrics.reviews.ReviewClient`; the
decisions are served by :class:`cbop.metrics.secure.SecureMetricsServer`.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

import structlog
from cachetools import TTLCache
from prometheus_client import CollectorRegistry, Counter

from cbop.clock import Clock, RealClock
from cbop.metrics.reviews import ReviewClient, ReviewError

__all__ = ["DEFAULT_CACHE_SIZE", "DEFAULT_TTL", "METRICS_PATH", "Decision", "DelegatingAuth"]

log = structlog.get_logger("cbop.metrics.secure")

#: The path served, and the non-resource URL a caller needs ``get`` on.
METRICS_PATH = "/metrics"
#: How long a token's decision is kept, seconds.
DEFAULT_TTL = 10.0
#: Tokens whose decisions are kept at most (least recently inserted go first).
DEFAULT_CACHE_SIZE = 1024


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
