"""The controller's metrics seam: hook protocols the runtime calls, no Prometheus.

As the workqueue's ``MetricsProvider``: a :class:`ControllerMetricsProvider` creates one
:class:`ControllerMetrics` per named controller, and the controller calls its hooks at
the points controller-runtime measures (its ``controller_runtime_*`` metrics): the
number of workers once, a worker taking and finishing a key, each reconcile's outcome
(``success``, ``error``, ``requeue``, ``requeue_after``) and duration, errors and panics.
cbop's Prometheus implementation is ``cbop.metrics.controller``; without a provider the
controller measures nothing (:class:`NoopControllerMetrics`).
"""

from __future__ import annotations

from typing import Protocol

__all__ = [
    "ControllerMetrics",
    "ControllerMetricsProvider",
    "NoopControllerMetrics",
]


class ControllerMetrics(Protocol):
    """The metric hooks of one controller."""

    def set_max_concurrent(self, workers: int) -> None:
        """Record the number of worker threads (``..._max_concurrent_reconciles``)."""
        ...

    def worker_started(self) -> None:
        """Count a worker that took a key (``..._active_workers`` + 1)."""
        ...

    def worker_finished(self) -> None:
        """Count a worker that finished its key (``..._active_workers`` - 1)."""
        ...

    def reconciled(self, result: str, seconds: float) -> None:
        """Count one reconcile lasting ``seconds`` with ``result``.

        ``result`` is ``success``, ``error``, ``requeue`` or ``requeue_after``
        (controller-runtime's ``result`` label values).
        """
        ...

    def reconcile_error(self) -> None:
        """Count one reconcile that ended in an error (``..._reconcile_errors_total``)."""
        ...

    def terminal_reconcile_error(self) -> None:
        """Count one terminal error (``..._terminal_reconcile_errors_total``)."""
        ...

    def panicked(self) -> None:
        """Count one unexpected exception (``..._reconcile_panics_total``)."""
        ...


class ControllerMetricsProvider(Protocol):
    """Creates the metric hooks of each controller of a process."""

    def new_controller_metrics(self, controller: str) -> ControllerMetrics:
        """Return the hooks of the controller named ``controller`` (the metrics' label)."""
        ...


class NoopControllerMetrics:
    """Hooks that measure nothing (a controller without a metrics provider)."""

    def set_max_concurrent(self, workers: int) -> None:
        """Do nothing."""

    def worker_started(self) -> None:
        """Do nothing."""

    def worker_finished(self) -> None:
        """Do nothing."""

    def reconciled(self, result: str, seconds: float) -> None:
        """Do nothing."""

    def reconcile_error(self) -> None:
        """Do nothing."""

    def terminal_reconcile_error(self) -> None:
        """Do nothing."""

    def panicked(self) -> None:
        """Do nothing."""
