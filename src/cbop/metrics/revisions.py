"""The revisions' gauges, read from the informer caches at scrape time (docs/revisions.md).

- ``cbop_revision_pods_unpinned``: pods of pinned templates that read a plain ConfigMap
  their own mapping names a revision of: the admission policy did not rewrite them
  (missing when they were created, not served, or its evaluation failed). No labels: the
  bundles' ``Pinned`` condition names them; a gauge per workload would grow with them.
- ``cbop_revision_legacy_pins_namespaces``: namespaces where something still relies on
  cbop 0.2.0's pins (``cbop-revisions``); at 0 their policy, binding and ConfigMaps may go.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["RevisionCollector"]


class RevisionCollector(Collector):
    """The two gauges above.

    Args:
        unpinned_pods: returns the number of cached pods not pinned.
        legacy_namespaces: returns the number of namespaces still relying on 0.2.0's pins.
    """

    def __init__(
        self, unpinned_pods: Callable[[], int], legacy_namespaces: Callable[[], int]
    ) -> None:
        self._unpinned = unpinned_pods
        self._legacy = legacy_namespaces

    def collect(self) -> Iterable[GaugeMetricFamily]:
        """Yield the two gauge families."""
        yield GaugeMetricFamily(
            "cbop_revision_pods_unpinned",
            "Pods of pinned templates that read a plain ConfigMap instead of its revision",
            value=self._unpinned(),
        )
        yield GaugeMetricFamily(
            "cbop_revision_legacy_pins_namespaces",
            "Namespaces where something still relies on cbop 0.2.0's pins (cbop-revisions)",
            value=self._legacy(),
        )
