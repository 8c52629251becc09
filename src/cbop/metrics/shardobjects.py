"""``cbop_shard_objects{shard,resource}``: objects cached per held shard, read at scrape.

With ``--shards N`` each held shard has its own informers; this gauge counts the objects
in them per resource (``configbundles``, ``configmaps``, ...), so the sum over the
replicas of one group is the whole collection, and the spread shows the balance the
namespace shard key gives. A shard this replica does not hold has no samples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["ShardObjectsCollector"]


class ShardObjectsCollector(Collector):
    """``cbop_shard_objects{shard,resource}``, read from the held shards' caches at scrape.

    Args:
        counts: returns shard index -> resource plural -> objects cached (e.g. from
            :meth:`cbop.runtime.Scope.object_counts` of every held shard).
    """

    def __init__(self, counts: Callable[[], Mapping[int, Mapping[str, int]]]) -> None:
        self._counts = counts

    def collect(self) -> Iterable[GaugeMetricFamily]:
        """Yield one gauge family, one sample per held shard and cached resource."""
        family = GaugeMetricFamily(
            "cbop_shard_objects",
            "Objects in the informer caches of each shard this replica holds, by resource",
            labels=["shard", "resource"],
        )
        for shard, resources in sorted(self._counts().items()):
            for resource, count in sorted(resources.items()):
                family.add_metric([str(shard), resource], float(count))
        yield family
