"""client-go's rest_client_* metric names and labels, exported by cbop.metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from cbop.metrics import PrometheusRestClientMetrics


def test_families_names_and_labels_are_client_gos() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusRestClientMetrics(registry)
    metrics.request("429", "PATCH", "127.0.0.1:6443")
    metrics.request_duration("PATCH", "127.0.0.1:6443", 0.2)
    metrics.rate_limiter_duration("GET", "127.0.0.1:6443", 0.0)
    metrics.retry("429", "PATCH", "127.0.0.1:6443", 4.0)
    metrics.retry("429", "PATCH", "127.0.0.1:6443", 2.0)
    value = registry.get_sample_value
    labels = {"code": "429", "method": "PATCH", "host": "127.0.0.1:6443"}
    assert value("rest_client_requests_total", labels) == 1
    assert value("rest_client_request_retries_total", labels) == 2
    assert value("cbop_rest_client_retry_wait_seconds_total", labels) == 6.0
    assert (
        value(
            "rest_client_request_duration_seconds_count",
            {"verb": "PATCH", "host": "127.0.0.1:6443"},
        )
        == 1
    )
    assert (
        value(
            "rest_client_rate_limiter_duration_seconds_bucket",
            {"verb": "GET", "host": "127.0.0.1:6443", "le": "0.005"},
        )
        == 1
    )
