"""Election timings: the rule the three durations obey, the jitter, request timeouts.

This module owns the numbers :class:`cbop.leaderelection.LeaderElector` times itself
by: client-go's rule between lease duration, renew deadline and retry period
(:func:`check_timings`), the jitter of acquire attempts, and how long one Lease request
may take while renewing (:func:`renewal_request_timeout`). The shard coordinator
(``cbop.sharding``) checks its own electors' timings with the same constants.

Timeline with controller-runtime's defaults (lease 15 s, renew deadline 10 s, retry 2 s):
a candidate tries every 2 to 3 s (2 s jittered by up to 0.5x); the leader renews every
2 s; if renewals keep failing until 10 s after the last successful one began, the leader
gives up, before any other candidate can see the lease expire (15 s after it saw that
renewal land).

Renewal requests get timeouts bounded by the time left before the renew deadline, and
never all of it while a retry still fits (half the time left, at least one retry
period), as client-go bounds each try by the renew context's deadline: one slow
answer from the API server does not cost the lease.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ACQUIRE_JITTER_FACTOR",
    "EXPIRY_SLACK",
    "JITTER_FACTOR",
    "check_timings",
    "renewal_request_timeout",
]

#: client-go's ``leaderelection.JitterFactor``, used in the timing rule
#: ``renew_deadline > JITTER_FACTOR x retry_period``.
JITTER_FACTOR: Final = 1.2
#: The largest extra fraction of ``retry_period`` a candidate waits between acquire
#: attempts: waits fall in [retry, 1.5 x retry). client-go jitters by ``JITTER_FACTOR``
#: (up to 2.2 x); the smaller spread bounds the failover after a release (at most
#: 3 s with the default 2 s retry period) while still spreading the candidates out.
ACQUIRE_JITTER_FACTOR: Final = 0.5
#: Seconds a candidate waits past a lease's local expiry before trying to take it.
EXPIRY_SLACK: Final = 0.05

#: The shortest timeout, seconds, a Lease request is given while renewing.
_MIN_REQUEST_TIMEOUT: Final = 0.5


def check_timings(lease_duration: float, renew_deadline: float, retry_period: float) -> None:
    """Enforce client-go's rule ``lease_duration > renew_deadline > 1.2 x retry_period > 0``.

    Args:
        lease_duration: seconds a non-leader waits before taking an unrenewed lease over.
        renew_deadline: seconds the leader keeps retrying a failing renewal.
        retry_period: seconds between attempts.

    Raises:
        ValueError: the rule does not hold, or ``lease_duration < 1`` (the Lease stores
            whole seconds and the API server requires at least 1).
    """
    if not (lease_duration > 0 and renew_deadline > 0 and retry_period > 0):
        raise ValueError(
            "lease duration, renew deadline and retry period must all be positive; got "
            f"{lease_duration}, {renew_deadline}, {retry_period}"
        )
    if lease_duration <= renew_deadline:
        raise ValueError(
            f"lease duration ({lease_duration}s) must be greater than the renew deadline "
            f"({renew_deadline}s)"
        )
    if renew_deadline <= JITTER_FACTOR * retry_period:
        raise ValueError(
            f"renew deadline ({renew_deadline}s) must be greater than {JITTER_FACTOR} x "
            f"the retry period ({retry_period}s)"
        )
    if lease_duration < 1:
        raise ValueError(
            f"lease duration ({lease_duration}s) must be at least 1s: the Lease stores "
            "whole seconds"
        )


def renewal_request_timeout(left: float, retry_period: float) -> float:
    """Seconds one Lease request may take while renewing, ``left`` seconds before the deadline.

    Half the time left, but at least one retry period (and 0.5 s), and never more than
    the time left, so a slow answer can still arrive and a timed-out attempt still
    leaves room for a retry on a fresh connection.
    """
    return max(_MIN_REQUEST_TIMEOUT, min(left, max(left / 2, retry_period)))
