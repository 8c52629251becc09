"""``cbop_clusterconfigbundle_namespaces{name,state}``: read from the cache at scrape time.

Each ClusterConfigBundle's ``status.namespaces`` (selected, ready, failed) as gauges,
so the metric always says what the status says and costs nothing between scrapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["STATES", "ClusterBundleNamespacesCollector"]

#: The ``state`` label values.
STATES: Final = ("selected", "ready", "failed")


class ClusterBundleNamespacesCollector(Collector):
    """Namespaces per ClusterConfigBundle by state, from the cached statuses.

    Args:
        list_cluster_bundles: returns the cached ClusterConfigBundle dicts.
    """

    def __init__(self, list_cluster_bundles: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self._list = list_cluster_bundles

    def collect(self) -> Iterable[GaugeMetricFamily]:
        """Yield one gauge family: a sample per ClusterConfigBundle and state."""
        family = GaugeMetricFamily(
            "cbop_clusterconfigbundle_namespaces",
            "Namespaces of each ClusterConfigBundle: selected, ready, failed (its status)",
            labels=["name", "state"],
        )
        seen: set[str] = set()
        for bundle in self._list():
            name = str((bundle.get("metadata") or {}).get("name", ""))
            if name in seen:
                continue
            seen.add(name)
            counts = (bundle.get("status") or {}).get("namespaces") or {}
            for state in STATES:
                family.add_metric([name, state], float(counts.get(state) or 0))
        yield family
