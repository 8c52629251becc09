"""cbop's Prometheus metrics.

This package owns every Prometheus metric cbop exports, under controller-runtime's and
client-go's names where they have one, and is the only part of cbop that imports
``prometheus_client``: the layers below report through seams it implements
(``cbop.workqueue.MetricsProvider``, ``cbop.kube.RestClientMetrics``,
``cbop.runtime.ControllerMetricsProvider``, ``cbop.sharding.ShardMetrics``, ...), one
module each. It also serves ``/metrics`` over HTTPS to the callers the API server
authorizes (:mod:`cbop.metrics.secure`, ``--metrics-secure``).
"""

from cbop.metrics.controller import PrometheusControllerMetricsProvider
from cbop.metrics.restclient import PrometheusRestClientMetrics
from cbop.metrics.workqueue import PrometheusWorkqueueMetricsProvider

__all__ = [
    "PrometheusControllerMetricsProvider",
    "PrometheusRestClientMetrics",
    "PrometheusWorkqueueMetricsProvider",
]
