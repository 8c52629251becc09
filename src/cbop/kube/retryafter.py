"""Retry-After: coming back later when the API server asks, a little later each time.

This module owns what :class:`cbop.kube.transport.Transport` does with an answer that
carries ``Retry-After``, as client-go's ``rest.Request`` retries (with
``wait.Jitter``):

* a 429 or 5xx answer with ``Retry-After`` is retried, at most ``max_retries`` times,
  for every verb (the server did not process it), never before the ``Retry-After``
  (capped at :data:`MAX_RETRY_AFTER`) has run out and at most half of it later
  (:data:`RETRY_AFTER_JITTER`), the delay drawn at random for each retry, so the
  workers turned away together do not all come back together;
* a 429 opens a throttled window, until the retries it caused are all due
  (:meth:`RetryAfter.throttled_for`, what :meth:`cbop.kube.KubeClient.throttled_for`
  returns);
* each retry is logged at debug level with its ``Retry-After`` and reported to the
  transport's :class:`cbop.kube.accounting.RequestRecorder`; running out of retries is
  a warning, at most one every 30 s per transport.
"""

from __future__ import annotations

import random
from typing import Final

import structlog

from cbop.clock import Clock
from cbop.kube.accounting import RequestRecorder
from cbop.kube.errors import ApiError
from cbop.locks import YieldingLock
from cbop.tokenbucket import TokenBucket

__all__ = ["MAX_RETRY_AFTER", "RETRY_AFTER_JITTER", "RetryAfter"]

# The longest Retry-After honoured. API Priority and Fairness asks for 1 s at first and
# doubles that per priority level, up to 32 s, while it keeps rejecting requests
# (k8s.io/apiserver's dropped-requests tracker); 60 s guards against anything else.
MAX_RETRY_AFTER: Final = 60.0
#: A retry waits the (capped) Retry-After plus up to this fraction of it more, drawn at
#: random per retry: API Priority and Fairness answers every request it turns away in
#: the same second with the same whole number of seconds, and workers that all came
#: back at that same instant would find the level's few seats taken again.
RETRY_AFTER_JITTER: Final = 0.5
#: At most one "retries exhausted" warning per this many seconds per client.
_EXHAUSTED_WARNING_PERIOD: Final = 30.0

log = structlog.get_logger("cbop.kube")


class RetryAfter:
    """The Retry-After retries of one transport, and the throttled window of its 429s.

    Thread-safe: the window and the warning limit are guarded by a lock. The
    transports made with a write fence share the window (:meth:`sharing_window`).

    Args:
        clock: time source of the waits and of the window.
        rng: random source of the retry delays' jitter.
        max_retries: how often a 429/5xx answer with ``Retry-After`` is retried.

    Attributes:
        rng: as given; the transports made from this one's transport draw from it too.
        max_retries: as given.
    """

    def __init__(self, *, clock: Clock, rng: random.Random, max_retries: int) -> None:
        self.rng = rng
        self.max_retries = max_retries
        self._clock = clock
        self._lock = YieldingLock()
        # Clock time at which the retries after the last 429 are all due (its Retry-After
        # plus the jitter window); a list so that the twins made by sharing_window share
        # it (they are the same traffic).
        self._throttled_until = [0.0]
        self._exhausted_warnings = TokenBucket(
            1.0 / _EXHAUSTED_WARNING_PERIOD, 1, clock=self._clock
        )
        self._exhausted_suppressed = 0

    def sharing_window(self) -> RetryAfter:
        """Return retries with this one's clock, rng and limit, sharing its throttled window.

        The "retries exhausted" warnings of the twin are limited on their own.
        """
        twin = RetryAfter(clock=self._clock, rng=self.rng, max_retries=self.max_retries)
        twin._lock = self._lock
        twin._throttled_until = self._throttled_until
        return twin

    def throttled_for(self) -> float:
        """Seconds until the retries after the last 429 answer are all due (0.0: none).

        That is the 429's ``Retry-After`` (capped at 60 s) plus its jitter window (half
        of it), counted from the answer: the longest any request turned away with it
        waits. Shared with the twins made by :meth:`sharing_window`.
        """
        return max(0.0, self._throttled_until[0] - self._clock.now())

    def retry(
        self,
        error: ApiError,
        retries: int,
        *,
        verb: str,
        resource: str,
        path: str,
        recorder: RequestRecorder,
    ) -> bool:
        """Decide on a non-2xx answer; return whether to send the request again.

        A 429 with ``Retry-After`` extends the throttled window. A 429 or 5xx with
        ``Retry-After`` to a request retried ``retries`` times so far is waited out
        (see :meth:`_wait`) and True returned while ``retries < max_retries``; after
        that a warning is logged (rate limited) and False returned. Any other answer:
        False, at once.

        Args:
            error: the answer, as :meth:`cbop.kube.errors.ApiError.from_response` made it.
            retries: how often this request was retried already.
            verb: Kubernetes verb, for the log and the metrics.
            resource: resource plural, for the log.
            path: the request's URL path, for the log.
            recorder: where the retry is reported.
        """
        status = error.status
        if error.retry_after is not None and status == 429:
            window = min(error.retry_after, MAX_RETRY_AFTER) * (1.0 + RETRY_AFTER_JITTER)
            until = self._clock.now() + window
            with self._lock:
                self._throttled_until[0] = max(self._throttled_until[0], until)
        if error.retry_after is not None and (status == 429 or 500 <= status <= 599):
            if retries < self.max_retries:
                self._wait(
                    error, retries + 1, verb=verb, resource=resource, path=path, recorder=recorder
                )
                return True
            self._warn_exhausted(verb, resource, path, error, retries)
        return False

    def _wait(
        self,
        error: ApiError,
        attempt: int,
        *,
        verb: str,
        resource: str,
        path: str,
        recorder: RequestRecorder,
    ) -> None:
        """Sleep the ``Retry-After`` the server asked for (capped at 60 s), plus jitter.

        As client-go sleeps the ``Retry-After`` before a retry; the extra, uniform in
        ``[0, RETRY_AFTER_JITTER)`` times the capped ``Retry-After`` (as client-go's
        ``wait.Jitter``), spreads the retries of requests turned away together.
        """
        if error.retry_after is None:
            raise ValueError(f"{error} carries no Retry-After to wait for")
        asked = min(error.retry_after, MAX_RETRY_AFTER)
        wait = asked * (1.0 + RETRY_AFTER_JITTER * self.rng.random())
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
        recorder.retried(verb, error.status, wait)
        self._clock.sleep(wait)

    def _warn_exhausted(
        self, verb: str, resource: str, path: str, error: ApiError, attempts: int
    ) -> None:
        """Warn that a request ran out of Retry-After retries (rate limited, with a count)."""
        with self._lock:
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
