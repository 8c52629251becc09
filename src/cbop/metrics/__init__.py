"""cbop's Prometheus metrics.

This package owns every Prometheus metric cbop exports and is the only part of cbop that
imports ``prometheus_client`` (the layers below expose metric seams instead). Modules:

- ``cbop.metrics.workqueue``: ``PrometheusWorkqueueMetricsProvider``, the
  controller-runtime ``workqueue_*`` metrics behind ``cbop.workqueue.MetricsProvider``.
- ``cbop.metrics.restclient``: ``PrometheusRestClientMetrics``, client-go's
  ``rest_client_*`` metrics behind ``cbop.kube.RestClientMetrics``.
- ``cbop.metrics.controller``: ``PrometheusControllerMetricsProvider``, the
  ``controller_runtime_*`` metrics behind ``cbop.runtime.ControllerMetricsProvider``;
  the ConfigBundle reconciler's write metrics, the leader-election gauge and the
  collectors computed at scrape time.
- ``cbop.metrics.sharding``: ``PrometheusShardMetrics``, ``cbop_shards_held`` and
  ``cbop_shard_transitions_total`` behind ``cbop.sharding.ShardMetrics``.
- ``cbop.metrics.shardobjects``: ``ShardObjectsCollector``, ``cbop_shard_objects`` (objects
  cached per held shard and resource), read at scrape.
- ``cbop.metrics.secure``: ``/metrics`` over HTTPS for the callers the API server
  authorizes (``--metrics-secure``), built of ``cbop.metrics.delegatingauth`` (the
  decision and its cache), ``cbop.metrics.reviews`` (TokenReviews and
  SubjectAccessReviews) and ``cbop.metrics.servingcert`` (the serving certificate).
"""

from cbop.metrics.controller import PrometheusControllerMetricsProvider
from cbop.metrics.restclient import PrometheusRestClientMetrics
from cbop.metrics.workqueue import PrometheusWorkqueueMetricsProvider

__all__ = [
    "PrometheusControllerMetricsProvider",
    "PrometheusRestClientMetrics",
    "PrometheusWorkqueueMetricsProvider",
]
