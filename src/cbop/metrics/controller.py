"""Controller, reconcile and leader-election metrics, under controller-runtime's names.

Dashboards and alerts written for controller-runtime operators work unchanged:
``controller_runtime_reconcile_total{controller,result}`` (result in success, error,
requeue, requeue_after; all four initialised to 0), ``..._reconcile_errors_total``,
``..._terminal_reconcile_errors_total``, ``..._reconcile_panics_total``,
``..._reconcile_time_seconds`` (histogram), ``..._max_concurrent_reconciles``,
``..._active_workers``, ``leader_election_master_status{name}`` and
``leader_election_slowpath_total{name}``. cbop adds
``cbop_configmap_writes_total{operation}``, ``cbop_drift_corrections_total`` and
``cbop_configbundles{ready}`` (computed from the informer cache at scrape time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from cbop.locks import YieldingLock

RESULTS = ("success", "error", "requeue", "requeue_after")
WRITE_OPERATIONS = ("create", "update", "delete")

#: controller-runtime's reconcile-time buckets (seconds).
RECONCILE_TIME_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7,
    0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15,
    20, 25, 30, 40, 50, 60,
)  # fmt: skip


class PrometheusControllerMetricsProvider:
    """The ``controller_runtime_*`` metrics of every controller, registered in ``registry``.

    Implements ``cbop.runtime.ControllerMetricsProvider``: the metric families are
    registered once, and each controller gets the children labelled with its name.

    Args:
        registry: where to register; one provider per registry.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        label = ("controller",)
        self.reconcile_total = Counter(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            ("controller", "result"),
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            label,
            registry=registry,
        )
        self.terminal_errors = Counter(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            label,
            registry=registry,
        )
        self.panics = Counter(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics (unexpected exceptions) per controller",
            label,
            registry=registry,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            label,
            buckets=RECONCILE_TIME_BUCKETS,
            registry=registry,
        )
        self.max_concurrent = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            label,
            registry=registry,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            label,
            registry=registry,
        )

    def new_controller_metrics(self, controller: str) -> PrometheusControllerMetrics:
        """Return the hooks of ``controller``, its series initialised (results to 0)."""
        return PrometheusControllerMetrics(self, controller)


class PrometheusControllerMetrics:
    """The ``controller_runtime_*`` series of one controller (``cbop.runtime.ControllerMetrics``).

    Args:
        families: the provider holding the metric families.
        controller: the ``controller`` label.
    """

    def __init__(self, families: PrometheusControllerMetricsProvider, controller: str) -> None:
        self._reconcile_total = {
            result: families.reconcile_total.labels(controller, result) for result in RESULTS
        }
        self._reconcile_errors = families.reconcile_errors.labels(controller)
        self._terminal_errors = families.terminal_errors.labels(controller)
        self._panics = families.panics.labels(controller)
        self._reconcile_time = families.reconcile_time.labels(controller)
        self._max_concurrent = families.max_concurrent.labels(controller)
        self._active_workers = families.active_workers.labels(controller)
        self._lock = YieldingLock()

    def set_max_concurrent(self, workers: int) -> None:
        """Set ``controller_runtime_max_concurrent_reconciles``."""
        self._max_concurrent.set(workers)

    # Every worker updates these for every reconcile. prometheus_client guards each
    # value with a threading.Lock, which busy workers would convoy on (cbop.locks);
    # taking one YieldingLock around the updates leaves those locks uncontended.

    def worker_started(self) -> None:
        """Add 1 to ``controller_runtime_active_workers``."""
        with self._lock:
            self._active_workers.inc()

    def worker_finished(self) -> None:
        """Take 1 from ``controller_runtime_active_workers``."""
        with self._lock:
            self._active_workers.dec()

    def reconciled(self, result: str, seconds: float) -> None:
        """Count one reconcile with ``result`` (one of :data:`RESULTS`) lasting ``seconds``."""
        with self._lock:
            self._reconcile_total[result].inc()
            self._reconcile_time.observe(seconds)

    def reconcile_error(self) -> None:
        """Count one reconcile error."""
        self._reconcile_errors.inc()

    def terminal_reconcile_error(self) -> None:
        """Count one terminal error (``cbop.runtime.TerminalError``: not retried)."""
        self._terminal_errors.inc()

    def panicked(self) -> None:
        """Count one panic (an unexpected exception in a reconcile)."""
        self._panics.inc()


class ConfigMapWriteMetrics:
    """The write counters: ``cbop_configmap_writes_total{operation}`` and the others.

    ``cbop_secret_writes_total{operation}`` and ``cbop_drift_corrections_total`` too.
    Implements the ConfigBundle reconciler's observer hooks (``configmap_write``,
    ``secret_write``, ``drift_corrected``). No label names an object.

    Args:
        registry: where to register; one per registry.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._writes = Counter(
            "cbop_configmap_writes",
            "ConfigMap writes cbop made, by operation (create, update, delete)",
            ("operation",),
            registry=registry,
        )
        # The children of every operation, made once (exported at 0 from the start).
        self._writes_by_operation = {op: self._writes.labels(op) for op in WRITE_OPERATIONS}
        self._secret_writes = Counter(
            "cbop_secret_writes",
            "Secret writes cbop made for Secret targets, by operation (create, update, delete)",
            ("operation",),
            registry=registry,
        )
        self._secret_writes_by_operation = {
            op: self._secret_writes.labels(op) for op in WRITE_OPERATIONS
        }
        self._drift_corrections = Counter(
            "cbop_drift_corrections",
            "ConfigMaps and Secrets restored after a change made outside cbop (edit or delete)",
            registry=registry,
        )

    def configmap_write(self, operation: str) -> None:
        """Count one ConfigMap write (create, update or delete)."""
        child = self._writes_by_operation.get(operation)
        (child if child is not None else self._writes.labels(operation)).inc()

    def secret_write(self, operation: str) -> None:
        """Count one Secret write (create, update or delete)."""
        child = self._secret_writes_by_operation.get(operation)
        (child if child is not None else self._secret_writes.labels(operation)).inc()

    def drift_corrected(self) -> None:
        """Count one drift correction."""
        self._drift_corrections.inc()


class BundleReadinessCollector(Collector):
    """``cbop_configbundles{ready}``: bundles by Ready status, read from the cache at scrape.

    Args:
        list_bundles: returns the cached ConfigBundle dicts (e.g. a lister's ``list``).
    """

    def __init__(self, list_bundles: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self._list = list_bundles

    def collect(self) -> Iterable[GaugeMetricFamily]:
        """Yield one gauge family with ``ready`` in True, False, Unknown."""
        counts = {"True": 0, "False": 0, "Unknown": 0}
        for bundle in self._list():
            ready = "Unknown"
            for cond in (bundle.get("status") or {}).get("conditions") or ():
                if cond.get("type") == "Ready":
                    ready = cond.get("status", "Unknown")
            counts[ready if ready in counts else "Unknown"] += 1
        family = GaugeMetricFamily(
            "cbop_configbundles", "ConfigBundles by their Ready condition", labels=["ready"]
        )
        for ready, count in counts.items():
            family.add_metric([ready], count)
        yield family


class SecretsDisabledCollector(Collector):
    """``cbop_configbundles_secrets_disabled``: bundles with a Secret target not served.

    Read from the cache at scrape time: the bundles whose target is a Secret while cbop
    runs without ``--secrets`` (or outside ``--secrets-namespace``), which are
    ``Ready=False``, reason ``SecretsDisabled`` (docs/secrets.md). No label names a
    bundle.

    Args:
        list_bundles: returns the cached ConfigBundle dicts.
        refused: ``fn(bundle) -> bool``: whether cbop refuses the bundle's Secret target.
    """

    def __init__(
        self,
        list_bundles: Callable[[], Iterable[Mapping[str, Any]]],
        refused: Callable[[Mapping[str, Any]], bool],
    ) -> None:
        self._list = list_bundles
        self._refused = refused

    def collect(self) -> Iterable[GaugeMetricFamily]:
        """Yield the one gauge."""
        count = sum(1 for bundle in self._list() if self._refused(bundle))
        yield GaugeMetricFamily(
            "cbop_configbundles_secrets_disabled",
            "ConfigBundles whose target is a Secret that cbop does not serve (--secrets off, "
            "or outside --secrets-namespace)",
            value=count,
        )


class EventSinkCollector(Collector):
    """``cbop_events_dropped_total`` and ``cbop_events_failed_total``, read at scrape.

    Args:
        counts: returns ``(dropped, failed)``: Events dropped because the queue was full
            (or left at shutdown), and Events the sink failed to write (API errors, a
            closed write fence, unexpected exceptions).
    """

    def __init__(self, counts: Callable[[], tuple[int, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterable[CounterMetricFamily]:
        """Yield the two counter families."""
        dropped, failed = self._counts()
        yield CounterMetricFamily(
            "cbop_events_dropped", "Events dropped before they were written", value=dropped
        )
        yield CounterMetricFamily(
            "cbop_events_failed", "Events the sink failed to write", value=failed
        )


class InformerConnectedCollector(Collector):
    """``cbop_informer_connected{informer}``: 1 while an informer's watch is up, else 0.

    The metric side of ``/readyz``'s ``informers-connected`` check: an API server outage
    shows here (and on ``/readyz``), not on ``/healthz``.

    Args:
        states: returns informer name -> connected, read at scrape.
    """

    def __init__(self, states: Callable[[], Mapping[str, bool]]) -> None:
        self._states = states

    def collect(self) -> Iterable[GaugeMetricFamily]:
        """Yield one gauge family, one sample per informer."""
        family = GaugeMetricFamily(
            "cbop_informer_connected",
            "1 while the informer's list/watch is up (or down only briefly), else 0",
            labels=["informer"],
        )
        for name, up in sorted(self._states().items()):
            family.add_metric([name], 1.0 if up else 0.0)
        yield family


class LeaderElectionMetrics:
    """client-go's leader election metrics for one Lease, registered in ``registry``.

    ``leader_election_master_status{name}`` (1 while this process leads, else 0) and
    ``leader_election_slowpath_total{name}`` (renewals that had to read the Lease first),
    as controller-runtime registers them. Implements
    :class:`cbop.leaderelection.LeaderMetrics`.

    Args:
        name: the Lease's name (the ``name`` label).
        registry: where to register; one LeaderElectionMetrics per registry.
    """

    def __init__(self, name: str, registry: CollectorRegistry) -> None:
        self._gauge = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease.",
            ("name",),
            registry=registry,
        ).labels(name)
        self._slowpath = Counter(
            "leader_election_slowpath",
            "Total number of slow path exercised in renewing leader leases. 'name' is the "
            "string used to identify the lease.",
            ("name",),
            registry=registry,
        ).labels(name)

    def set_leading(self, leading: bool) -> None:
        """Set the gauge to 1 (leading) or 0."""
        self._gauge.set(1 if leading else 0)

    def slowpath_exercised(self) -> None:
        """Count one slow-path renewal."""
        self._slowpath.inc()
