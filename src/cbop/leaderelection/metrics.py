"""The leader elector's metrics seam, as client-go's ``leaderelection`` ``MetricsProvider``.

This module owns :class:`LeaderMetrics`, the hook the elector reports to, and
:data:`NO_METRICS`, the default that records nothing. The elector never imports
Prometheus: ``cbop.metrics.controller.LeaderElectionMetrics`` implements this protocol
with client-go's ``leader_election_master_status`` and ``leader_election_slowpath_total``,
and the manager passes it in (as the workqueue's ``MetricsProvider``).
"""

from __future__ import annotations

from typing import Final, Protocol

__all__ = ["NO_METRICS", "LeaderMetrics"]


class LeaderMetrics(Protocol):
    """What one elector reports, for its one Lease (client-go's ``leaderMetricsAdapter``).

    Implementations are called from the elector's thread and must not block or raise.
    """

    def set_leading(self, leading: bool) -> None:
        """Record that this candidate now leads (True) or does not (False).

        client-go's ``leaderOn`` / ``leaderOff``.
        """
        ...

    def slowpath_exercised(self) -> None:
        """Count one renewal that had to read the Lease before writing it.

        The leader renews optimistically, from the Lease it last wrote; when that write
        is refused (409: someone else wrote the Lease) or the Lease it holds has expired
        by the local clock, the renewal reads the Lease first, as client-go's
        ``slowpathExercised``. A steady rate of these means another writer touches the
        Lease.
        """
        ...


class _NoMetrics:
    """The default :class:`LeaderMetrics`: records nothing."""

    def set_leading(self, leading: bool) -> None:
        """Do nothing."""

    def slowpath_exercised(self) -> None:
        """Do nothing."""


#: A :class:`LeaderMetrics` that records nothing (the elector's default).
NO_METRICS: Final[LeaderMetrics] = _NoMetrics()
