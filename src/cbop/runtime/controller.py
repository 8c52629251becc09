"""A controller: a named workqueue, N workers, and a reconciler.

As sample-controller and controller-runtime's controller: event sources (informer
handlers, :mod:`cbop.runtime.handlers`) put object keys on the rate-limited workqueue,
and N workers hand each key to the reconciler. Why a queue at all: events come in
bursts (a relist, a resync) and only the latest state matters; the queue collapses a
burst for one key into one reconcile, never runs a key on two workers, and spaces out
retries. The controller builds nothing (the :class:`cbop.runtime.builder.Builder` hands
it the queue, the reconciler and the metrics) and starts no informer.

The outcome policy is controller-runtime's (:meth:`Controller.process_next_work_item`),
with one addition: a write refused by the lease's fence
(:class:`cbop.kube.LeaseNotHeld`) stops the workers instead of retrying. Stopping drops
the queued keys: a successor lists every object anew.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import structlog

from cbop.clock import Clock, RealClock
from cbop.informers import SharedInformer
from cbop.kube import ApiError, LeaseNotHeld
from cbop.locks import YieldingLock
from cbop.runtime.handlers import ConvergedFunc, EnqueueHandler, MapFunc
from cbop.runtime.metrics import ControllerMetrics, NoopControllerMetrics
from cbop.runtime.predicates import Predicate
from cbop.runtime.reconcile import Reconciler, Requeue, TerminalError, reconcile_context
from cbop.workqueue import RateLimitingQueue

__all__ = ["DEFAULT_WEDGED_AFTER", "DEFAULT_WORKERS", "Controller"]

log = structlog.get_logger("cbop.controller")

#: Worker threads of a controller unless configured (``--workers``).
DEFAULT_WORKERS = 4
#: Seconds one reconcile may run before :meth:`Controller.healthy` calls its worker wedged.
DEFAULT_WEDGED_AFTER = 600.0


class Controller:
    """Runs one reconciler over the keys of one workqueue.

    Args:
        name: the controller's name (logs, metrics' ``controller`` label, thread names).
        reconciler: what each key is handed to.
        queue: the controller's workqueue (a ``PriorityQueue`` or plain
            ``RateLimitingQueue``); the controller shuts it down on stop.
        workers: number of worker threads (at least 1).
        metrics: the controller's metric hooks (default: none).
        wedged_after: seconds one reconcile may run before :meth:`healthy` calls the
            worker wedged.
        clock: the clock of the wedged check (tests: ``FakeClock``).
    """

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        queue: RateLimitingQueue[str],
        workers: int = DEFAULT_WORKERS,
        metrics: ControllerMetrics | None = None,
        wedged_after: float = DEFAULT_WEDGED_AFTER,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.reconciler = reconciler
        self.queue = queue
        self.workers = max(1, workers)
        self._metrics: ControllerMetrics = (
            metrics if metrics is not None else NoopControllerMetrics()
        )
        self._metrics.set_max_concurrent(self.workers)
        self._wedged_after = wedged_after
        self._clock: Clock = clock or RealClock()
        self._threads: list[threading.Thread] = []
        #: The informers the controller's sources come from (its caches), in watch order.
        self.informers: list[SharedInformer] = []
        # Set by stop_workers(): workers take no further key, queued keys are dropped.
        self._stopping = threading.Event()
        # Worker thread ident -> clock time at which its current reconcile began.
        self._busy_since: dict[int, float] = {}
        self._busy_lock = YieldingLock()

    def watch(
        self,
        informer: SharedInformer,
        map_func: MapFunc,
        *,
        converged: ConvergedFunc | None = None,
        predicates: Sequence[Predicate] = (),
        cache: bool = True,
    ) -> None:
        """Enqueue the keys ``map_func`` yields for every event of ``informer``.

        As controller-runtime's ``Controller.Watch``: the informer's initial list and
        unchanged updates go in at low priority (see :mod:`cbop.runtime.handlers`),
        except listed objects that ``converged`` (when given) says are not. Events the
        ``predicates`` refuse enqueue nothing. The controller's caches are the informers
        it watches: its scope starts it once they all synced (:meth:`cbop.runtime.Scope.start`);
        with ``cache=False`` the informer's events enqueue keys but the controller does
        not wait for it (its reconciler tells a cache that has not synced from an empty one).
        """
        informer.add_event_handler(
            EnqueueHandler(
                self.queue,
                map_func,
                synced=informer.has_synced,
                converged=converged,
                predicates=predicates,
            )
        )
        if cache and informer not in self.informers:
            self.informers.append(informer)

    def start(self) -> None:
        """Start the worker threads; they run until :meth:`stop_workers` or :meth:`shutdown`."""
        for i in range(self.workers):
            thread = threading.Thread(
                target=self._worker, name=f"{self.name}-worker-{i}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def healthy(self) -> bool:
        """Liveness: False when a worker thread died or is wedged.

        False when a worker thread died while the queue runs, or a worker has been inside
        one reconcile for more than ``wedged_after`` seconds (every request has a
        timeout, so a reconcile that long is stuck). Says nothing of the API server.
        """
        if any(not t.is_alive() for t in self._threads) and not self.queue.shutting_down():
            return False
        now = self._clock.now()
        with self._busy_lock:
            return not any(now - since > self._wedged_after for since in self._busy_since.values())

    def stop_workers(self) -> None:
        """Stop intake at once: workers take no further key and the queued keys are dropped.

        Returns immediately; reconciles already running go on to their end (a fenced
        client refuses their writes once the lease is gone). Idempotent, any thread.
        """
        self._stopping.set()
        self.queue.shut_down()

    def shutdown(self, timeout: float = 30.0) -> bool:
        """Stop intake, drop queued keys, and let in-flight reconciles finish.

        Args:
            timeout: seconds the reconciles in flight get to finish (0: none).

        Returns:
            True when every worker finished in time.
        """
        self.stop_workers()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def _worker(self) -> None:
        while self.process_next_work_item():
            pass

    def process_next_work_item(self) -> bool:
        """Take one key, reconcile it, and requeue per the outcome; False on shutdown.

        Blocks until a key is available. Also False when the reconcile found the write
        fence closed (the workers stop, see the module docstring).
        """
        key, shutdown = self.queue.get()
        if shutdown or key is None:
            return False
        if self._stopping.is_set():
            self.queue.done(key)  # dropped: stopping workers take no further key
            return False
        metrics = self._metrics
        metrics.worker_started()
        started = time.monotonic()
        worker = threading.get_ident()
        with self._busy_lock:
            self._busy_since[worker] = self._clock.now()
        try:
            with reconcile_context(self.name, key):
                outcome, fenced = self._reconcile(key)
        finally:
            with self._busy_lock:
                self._busy_since.pop(worker, None)
            self.queue.done(key)
            metrics.worker_finished()
        metrics.reconciled(outcome, time.monotonic() - started)
        if outcome == "error":
            metrics.reconcile_error()
        return not fenced

    def _reconcile(self, key: str) -> tuple[str, bool]:
        """Reconcile ``key`` and requeue it per the outcome; return (outcome, fenced)."""
        try:
            result = self.reconciler.reconcile(key)
        except LeaseNotHeld as err:
            # Not leader any more: nothing may be written, nothing retried; the manager
            # (told by the fence) stops the process.
            log.warning("reconcile stopped: write fenced off", key=key, error=str(err))
            self.stop_workers()
            return "error", True
        except Requeue:
            # Lost an optimistic-concurrency race: retry from fresh cache state, quietly.
            self.queue.add_rate_limited(key)
            return "requeue", False
        except TerminalError as err:
            # Reported by the reconciler; no retry can fix it: only a new event brings
            # the key back.
            log.error("reconcile failed for good; not retried", key=key, error=str(err))
            self._metrics.terminal_reconcile_error()
            self.queue.forget(key)
            return "error", False
        except ApiError:
            # Already logged and reported in status by the reconciler; back off per key.
            self.queue.add_rate_limited(key)
            return "error", False
        except Exception:  # a bug must not kill the worker
            log.exception("reconcile panicked", key=key)
            self._metrics.panicked()
            self.queue.add_rate_limited(key)
            return "error", False
        self.queue.forget(key)
        if result.requeue_after:
            self.queue.add_after(key, result.requeue_after)
            return "requeue_after", False
        return "success", False
