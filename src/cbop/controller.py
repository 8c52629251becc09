"""The ConfigBundle controller: informers -> workqueue -> workers -> reconciler.

Wiring only, as sample-controller: informer event handlers turn events into
``namespace/name`` keys of ConfigBundles (a ConfigMap event maps to its controller
owner's key), the rate-limited workqueue deduplicates them and guarantees one worker per
key, and N worker threads run :meth:`cbop.reconciler.Reconciler.reconcile`.

Why a queue at all: events arrive in bursts (a relist, a resync, a flapping client),
and only the latest state matters; the queue collapses a burst for one bundle into one
reconcile, never runs the same bundle on two workers, and spaces out retries.

The queue is a priority queue by default (``priority_queue=False``: the plain
rate-limiting queue), as controller-runtime's since v0.23: adds from an informer's
initial list (delivered before the informer reports synced) and from resyncs or relists
that find an object unchanged (same resourceVersion) go in at low priority, real changes
at normal priority, so a restart's thousands of converged bundles do not delay the one
someone just changed. Retries keep the priority the key was handed out with.

The worker's outcome policy is controller-runtime's: an error -> ``add_rate_limited``;
a requeue after a delay -> ``forget`` then ``add_after``; success -> ``forget``. An
unexpected exception (a bug) is logged with its traceback, counted as a panic, and
retried like an error: it never kills the worker. A write refused by the client's
write fence (:class:`cbop.kube.LeaseNotHeld`: the leader lease is not held) stops the
worker instead: the key is not retried, the manager ends the process.

Stopping (:meth:`Controller.stop_workers`, :meth:`Controller.shutdown`) drops the keys
still queued rather than working through them, as controller-runtime's workers stop
taking keys once their context is cancelled; a successor (or the next start) lists
every object anew, so nothing queued is lost.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from cbop.api import LABEL_MANAGED_BY, MANAGED_BY_VALUE
from cbop.informers import (
    DeletedFinalStateUnknown,
    ListWatchProblem,
    SharedInformer,
    index_by_controller_uid,
    wait_for_cache_sync,
)
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, KubeClient, LeaseNotHeld
from cbop.metrics.controller import ControllerMetrics
from cbop.reconciler import CONTROLLER_UID_INDEX, EventRecorder, Reconciler, Requeue, Result
from cbop.reconciler.desired import controller_reference, is_bundle_reference
from cbop.workqueue import LOW_PRIORITY, MetricsProvider, PriorityQueue, RateLimitingQueue

log = structlog.get_logger("cbop.controller")

CONTROLLER_NAME = "configbundle"


def object_key(obj: Mapping[str, Any]) -> str:
    """Return ``namespace/name`` of an object dict (``name`` when cluster-scoped)."""
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


def owner_key(obj: Mapping[str, Any]) -> str | None:
    """Return the ``namespace/name`` of the ConfigBundle that controls ``obj``, or None.

    As controller-runtime's EnqueueRequestForOwner with OnlyControllerOwner: the owner
    reference with ``controller: true`` whose group and kind are ConfigBundle's (version
    ignored), in the dependent's own namespace.
    """
    ref = controller_reference(obj)
    if ref is None or not is_bundle_reference(ref):
        return None
    return f"{obj['metadata'].get('namespace', '')}/{ref['name']}"


class MultiNamespaceLister:
    """One read-only view over the listers of several per-namespace informers.

    Args:
        listers: namespace -> lister; the key None stands for "all namespaces".
    """

    def __init__(self, listers: Mapping[str | None, Any]) -> None:
        self._listers = dict(listers)

    def get(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """Return the cached object or None (also when the namespace is out of scope)."""
        lister = self._listers.get(namespace) or self._listers.get(None)
        if lister is None:
            return None
        obj: Mapping[str, Any] | None = lister.get(namespace, name)
        return obj

    def by_index(self, index_name: str, value: str) -> list[Mapping[str, Any]]:
        """Return objects of every namespace whose index ``index_name`` yields ``value``."""
        out: list[Mapping[str, Any]] = []
        for lister in self._listers.values():
            out.extend(lister.by_index(index_name, value))
        return out

    def list(self) -> list[Mapping[str, Any]]:
        """Return every cached object."""
        out: list[Mapping[str, Any]] = []
        for lister in self._listers.values():
            out.extend(lister.list())
        return out


class _Enqueue:
    """Informer event handler mapping events to bundle keys on the queue.

    ``synced`` is the informer's ``has_synced``: an add delivered before it is true comes
    from the initial list (client-go's ``isInInitialList``). On a ``PriorityQueue``, those
    and updates that change nothing (a resync, or a relist finding the same
    resourceVersion) go in at ``LOW_PRIORITY``, as controller-runtime's handlers do.
    """

    def __init__(
        self,
        queue: RateLimitingQueue[str],
        *,
        owned: bool,
        synced: Callable[[], bool] | None = None,
    ) -> None:
        self._queue = queue
        self._owned = owned
        self._synced = synced
        self._add_low: Callable[[str], None] = (
            functools.partial(queue.add, priority=LOW_PRIORITY)
            if isinstance(queue, PriorityQueue)
            else queue.add
        )

    def _key(self, obj: Any) -> str | None:
        if isinstance(obj, DeletedFinalStateUnknown):
            obj = obj.obj
            if obj is None:
                return None
        return owner_key(obj) if self._owned else object_key(obj)

    def _add(self, obj: Any, *, low: bool = False) -> None:
        key = self._key(obj)
        if key is not None:
            (self._add_low if low else self._queue.add)(key)

    def on_add(self, obj: Mapping[str, Any]) -> None:
        """Enqueue the bundle of an added object (low priority from the initial list)."""
        self._add(obj, low=self._synced is not None and not self._synced())

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """Enqueue the bundle(s) of both the old and the new object (low if unchanged)."""
        unchanged = old is new or _resource_version(old) == _resource_version(new)
        self._add(new, low=unchanged)
        if self._owned:
            old_key, new_key = self._key(old), self._key(new)
            if old_key is not None and old_key != new_key:
                self._queue.add(old_key)

    def on_delete(self, obj: Any) -> None:
        """Enqueue the bundle of a deleted object (tombstones included)."""
        self._add(obj)


def _resource_version(obj: Mapping[str, Any]) -> str | None:
    rv: str | None = obj.get("metadata", {}).get("resourceVersion")
    return rv


class Controller:
    """Runs the ConfigBundle control loop.

    Args:
        client: the shared API client.
        namespaces: namespaces to watch; empty or None means all namespaces.
        workers: number of worker threads (``controller_runtime_max_concurrent_reconciles``).
        resync_period: informer resync period in seconds (0 disables); resyncs make no
            API calls and, once converged, cause no writes.
        metrics: controller metrics, or None for none.
        queue_metrics: workqueue metrics provider, or None for none.
        recorder: Event recorder, or None to record no Events.
        dry_run: see :class:`cbop.reconciler.Reconciler`.
        read_timeout: the informers' watch socket read timeout in seconds.
        priority_queue: use a ``PriorityQueue`` (initial list and resyncs at low
            priority); False: the plain ``RateLimitingQueue``.
        wedged_after: seconds one reconcile may run before :meth:`healthy` calls the
            worker wedged.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        namespaces: Sequence[str] | None = None,
        workers: int = 4,
        resync_period: float = 36000.0,
        metrics: ControllerMetrics | None = None,
        queue_metrics: MetricsProvider | None = None,
        recorder: EventRecorder | None = None,
        dry_run: bool = False,
        read_timeout: float = 90.0,
        priority_queue: bool = True,
        wedged_after: float = 600.0,
    ) -> None:
        self._workers = max(1, workers)
        self._metrics = metrics
        self.queue: RateLimitingQueue[str] = (
            PriorityQueue if priority_queue else RateLimitingQueue
        )(
            name=CONTROLLER_NAME if queue_metrics is not None else None,
            metrics_provider=queue_metrics,
        )
        scopes: list[str | None] = list(namespaces) if namespaces else [None]
        self.bundle_informers = {
            ns: SharedInformer(
                client,
                CONFIGBUNDLES,
                namespace=ns,
                resync_period=resync_period,
                read_timeout=read_timeout,
                name=f"configbundles/{ns or '*'}",
            )
            for ns in scopes
        }
        self.configmap_informers = {
            ns: SharedInformer(
                client,
                CONFIGMAPS,
                namespace=ns,
                label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}",
                resync_period=resync_period,
                read_timeout=read_timeout,
                indexers={CONTROLLER_UID_INDEX: index_by_controller_uid},
                name=f"configmaps/{ns or '*'}",
            )
            for ns in scopes
        }
        for informer in self.bundle_informers.values():
            informer.add_event_handler(
                _Enqueue(self.queue, owned=False, synced=informer.has_synced)
            )
        for informer in self.configmap_informers.values():
            informer.add_event_handler(_Enqueue(self.queue, owned=True, synced=informer.has_synced))
        self.bundles = MultiNamespaceLister(
            {ns: inf.lister() for ns, inf in self.bundle_informers.items()}
        )
        self.configmaps = MultiNamespaceLister(
            {ns: inf.lister() for ns, inf in self.configmap_informers.items()}
        )
        self.reconciler = Reconciler(
            client=client,
            bundles=self.bundles,
            configmaps=self.configmaps,
            recorder=recorder,
            observer=metrics,
            dry_run=dry_run,
        )
        self._threads: list[threading.Thread] = []
        # Set by stop_workers(): workers take no further key, queued keys are dropped.
        self._stopping = threading.Event()
        # Worker thread ident -> time.monotonic() at which its current reconcile began.
        self._busy_since: dict[int, float] = {}
        self._busy_lock = threading.Lock()
        self._wedged_after = wedged_after
        self._now = time.monotonic  # the clock of the wedged check (tests swap it)
        if metrics is not None:
            metrics.max_concurrent.set(self._workers)

    @property
    def informers(self) -> list[SharedInformer]:
        """Every informer the controller runs."""
        return [*self.bundle_informers.values(), *self.configmap_informers.values()]

    def start_informers(self) -> None:
        """Start every informer's list+watch thread (idempotent per informer)."""
        for informer in self.informers:
            informer.start()

    def wait_for_cache_sync(
        self,
        timeout: float = 120.0,
        *,
        stop: threading.Event | None = None,
        wait_out_refusals: bool = False,
        poll: float = 0.1,
    ) -> bool:
        """Block until every informer has synced.

        Args:
            timeout: seconds to wait at most; with ``wait_out_refusals``, seconds without
                a refusal (the clock restarts whenever one is seen), so an operator
                waits as long as it takes for its CRD or its RBAC to be applied.
            stop: returns ``False`` soon after this event is set.
            wait_out_refusals: keep waiting while an informer's list/watch is refused
                (404: the CRD is not installed; 403: see :meth:`refusals`); otherwise return
                ``False`` as soon as one is (``cbop --once`` fails fast).
            poll: seconds between checks of ``stop`` and the refusals.

        Returns:
            ``True`` once synced; ``False`` on timeout, on ``stop``, or on a refusal.
        """
        deadline = time.monotonic() + timeout
        while not wait_for_cache_sync(*self.informers, timeout=poll, poll=poll):
            if stop is not None and stop.is_set():
                return False
            if self.refusals():
                if not wait_out_refusals:
                    return False
                deadline = time.monotonic() + timeout
            elif time.monotonic() >= deadline:
                return False
        return True

    def refusals(self) -> list[ListWatchProblem]:
        """Return the refused list/watch requests of informers not synced yet.

        A refusal (404: the ConfigBundle CRD is not installed; 403: RBAC) needs a
        change in the cluster, not a retry; see :mod:`cbop.informers.problems`.
        """
        out = []
        for informer in self.informers:
            problem = informer.problem()
            if problem is not None and problem.refused and not informer.has_synced():
                out.append(problem)
        return out

    def readiness_checks(self) -> dict[str, Callable[[], str | None]]:
        """Return one readiness check per informer, for ``/readyz``.

        Keys are ``informer <name>`` (``informer configmaps/ns``); each check returns
        ``None`` when its informer has synced and its watch is up (or down only briefly),
        else one line saying why not: the failing request (:attr:`ListWatchProblem.message`:
        a missing CRD or a 403 naming verb, resource and scope, at once; an unreachable API
        server once the watch has been down longer than the informer's ``unhealthy_after``)
        or the first list still in progress.
        """

        def check(informer: SharedInformer) -> Callable[[], str | None]:
            def ready() -> str | None:
                problem = informer.problem()
                # A refusal (missing CRD, 403) fails at once; any other failure only
                # before the first list or once the watch has been down for longer than
                # the informer's ``unhealthy_after``: a watch that times out and is
                # re-established at once must not make the replica flap out of service.
                if problem is not None and (
                    problem.refused or not informer.has_synced() or not informer.healthy()
                ):
                    return problem.message
                if not informer.has_synced():
                    return "the first list is in progress"
                return None

            return ready

        return {f"informer {inf.name}": check(inf) for inf in self.informers}

    def start_workers(self) -> None:
        """Start the worker threads; they run until :meth:`shutdown`."""
        for i in range(self._workers):
            thread = threading.Thread(target=self._worker, name=f"cbop-worker-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def healthy(self) -> bool:
        """Liveness: False when a thread is dead or wedged, never for an API server outage.

        False when an informer's reflector thread died, a worker thread died (while the
        queue runs), or a worker has been inside one reconcile for more than
        ``wedged_after`` seconds (every request has a timeout, so a reconcile that long
        is stuck). An unreachable API server does not fail it: restarting the process
        would not bring the server back; :meth:`connected` reports that instead.
        """
        if any(not t.is_alive() for t in self._threads) and not self.queue.shutting_down():
            return False
        now = self._now()
        with self._busy_lock:
            if any(now - since > self._wedged_after for since in self._busy_since.values()):
                return False
        return all(informer.alive() for informer in self.informers)

    def connected(self) -> bool:
        """Readiness: whether every informer's watch is up (or down only briefly).

        False while the API server is unreachable or refuses the list/watch for longer
        than the informers' ``unhealthy_after``; true again once the watches are back.
        """
        return all(informer.healthy() for informer in self.informers)

    def synced(self) -> bool:
        """Whether every informer has delivered its first full list."""
        return all(informer.has_synced() for informer in self.informers)

    def stop_workers(self) -> None:
        """Stop intake at once: workers take no further key and the queued keys are dropped.

        Returns immediately; reconciles already running go on to their end (a fenced
        client refuses their writes once the lease is gone). Idempotent, any thread.
        """
        self._stopping.set()
        self.queue.shut_down()

    def shutdown(self, timeout: float = 30.0) -> bool:
        """Stop intake, drop queued keys, let in-flight reconciles finish, stop informers.

        Args:
            timeout: seconds the reconciles in flight get to finish (0: none).

        Returns:
            True when every worker finished in time.
        """
        self.stop_workers()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        finished = not any(thread.is_alive() for thread in self._threads)
        for informer in self.informers:
            informer.stop()
        return finished

    def _worker(self) -> None:
        while self.process_next_work_item():
            pass

    def process_next_work_item(self) -> bool:
        """Take one key, reconcile it, and requeue per the outcome; False on shutdown."""
        key, shutdown = self.queue.get()
        if shutdown or key is None:
            return False
        if self._stopping.is_set():
            self.queue.done(key)  # dropped: stopping workers take no further key
            return False
        metrics = self._metrics
        if metrics is not None:
            metrics.active_workers.inc()
        started = time.monotonic()
        outcome = "success"
        fenced = False
        worker = threading.get_ident()
        with self._busy_lock:
            self._busy_since[worker] = self._now()
        try:
            result = self.reconciler.reconcile(key)
        except LeaseNotHeld as err:
            # Not leader any more: nothing may be written, nothing retried; the manager
            # (told by the fence) stops the process.
            outcome = "error"
            fenced = True
            log.warning("reconcile stopped: write fenced off", key=key, error=str(err))
            self.stop_workers()
        except Requeue:
            # Lost an optimistic-concurrency race: retry from fresh cache state, quietly.
            outcome = "requeue"
            self.queue.add_rate_limited(key)
        except ApiError:
            # Already logged and reported in status by the reconciler; back off per key.
            outcome = "error"
            self.queue.add_rate_limited(key)
        except Exception:  # a bug must not kill the worker
            outcome = "error"
            log.exception("reconcile panicked", key=key)
            if metrics is not None:
                metrics.panics.inc()
            self.queue.add_rate_limited(key)
        else:
            self.queue.forget(key)
            if result.requeue_after:
                outcome = "requeue_after"
                self.queue.add_after(key, result.requeue_after)
        finally:
            with self._busy_lock:
                self._busy_since.pop(worker, None)
            self.queue.done(key)
            if metrics is not None:
                metrics.active_workers.dec()
        if metrics is not None:
            metrics.reconciled(outcome, time.monotonic() - started)
            if outcome == "error":
                metrics.reconcile_errors.inc()
        return not fenced

    def reconcile_all(self, attempts: int = 3) -> list[Result]:
        """Reconcile every cached bundle once, in key order, on the calling thread.

        Used by ``cbop --once``. A lost race (409) is retried up to ``attempts`` times.

        Raises:
            ApiError, ConnectionFailed: a bundle could not be reconciled.
        """
        results = []
        for key in sorted(object_key(b) for b in self.bundles.list()):
            for attempt in range(attempts):
                try:
                    results.append(self.reconciler.reconcile(key))
                    break
                except Requeue:
                    if attempt == attempts - 1:
                        raise
                    time.sleep(0.2 * (attempt + 1))
        return results
