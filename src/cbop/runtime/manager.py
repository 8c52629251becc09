"""The runtime manager: runs controllers with shared informers, probes and leader election.

As controller-runtime's Manager, it owns the process lifecycle of a set of controllers:
the shared informer factory (:attr:`Manager.informers`, one informer per resource and
scope for every controller), the health probes, leader election, and shutdown. It starts
the informers at once (a standby keeps warm caches), takes part in leader election when
asked, starts the controllers' workers only while leading (or at once without leader
election) once the caches have synced, and shuts down gracefully: on a stop request it
stops intake and drops the queued keys (the successor lists everything anew), lets
in-flight reconciles finish (bounded by ``shutdown_timeout``), runs the cleanups
(:meth:`Manager.add_cleanup`), releases the lease so a successor takes over at once, and
returns.

Under leader election every write goes through a fenced client (:attr:`Manager.client`,
see ``KubeClient.with_fence``): a create, update, patch or delete is sent only while
:meth:`cbop.leaderelection.LeaderElector.holds_lease` is true. Losing the lease, or a
write finding the fence closed, is fatal: the workers stop taking keys at once, the
queues are dropped, nothing is drained or released, and :meth:`Manager.run` returns 1 so
that a restarted pod rejoins as a clean candidate (as controller-runtime skips its
graceful shutdown when the lease is lost). Caches that never sync return 1 too.

Metrics come in through seams (:mod:`cbop.runtime.metrics`, the workqueue's
``MetricsProvider``); this package never imports Prometheus.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from cbop import defaults
from cbop.gcpolicy import freeze_caches
from cbop.health import ProbeServer
from cbop.informers import MultiNamespaceLister, SharedInformerFactory
from cbop.informers.indexer import IndexFunc
from cbop.kube import KubeClient, Resource
from cbop.leaderelection import NO_METRICS, LeaderElector, LeaderMetrics
from cbop.runtime.controller import Controller
from cbop.runtime.metrics import ControllerMetricsProvider
from cbop.workqueue import MetricsProvider

__all__ = ["LeaderElection", "Manager"]

log = structlog.get_logger("cbop.manager")


@dataclass(frozen=True)
class LeaderElection:
    """Leader election on a Lease (client-go's ``LeaderElectionConfig``).

    Attributes:
        lease_name: the Lease's name.
        namespace: the Lease's namespace.
        lease_duration, renew_deadline, retry_period: seconds (controller-runtime's
            15 / 10 / 2); lease duration > renew deadline > 1.2 x retry period.
    """

    lease_name: str
    namespace: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class Manager:
    """Runs controllers until stopped.

    Args:
        client: the API client; reconcilers write through :attr:`client`.
        informers: the shared informer factory every controller's informers come from
            (its scope is the manager's); the manager starts and stops it.
        identity: this process's identity (the Lease holder).
        leader_election: take part in leader election (None: lead at once).
        leader_metrics: ``leader_election_master_status`` hooks (optional).
        shutdown_timeout: seconds in-flight reconciles get on shutdown.
        cache_sync_timeout: seconds to wait for the first lists; time while a list is
            refused (CRD not installed, 403) does not count: that is waited out.
        controller_metrics: creates each controller's metric hooks (optional).
        queue_metrics: the workqueues' metrics provider (optional; unnamed queues
            without it).

    Raises:
        ValueError: leader-election timings that break lease duration > renew deadline
            > 1.2 x retry period.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        informers: SharedInformerFactory,
        identity: str,
        leader_election: LeaderElection | None = None,
        leader_metrics: LeaderMetrics | None = None,
        shutdown_timeout: float = defaults.SHUTDOWN_TIMEOUT,
        cache_sync_timeout: float = defaults.CACHE_SYNC_TIMEOUT,
        controller_metrics: ControllerMetricsProvider | None = None,
        queue_metrics: MetricsProvider | None = None,
    ) -> None:
        self.identity = identity
        self.shutdown_timeout = shutdown_timeout
        self.cache_sync_timeout = cache_sync_timeout
        self.controller_metrics = controller_metrics
        self.queue_metrics = queue_metrics
        self.stop_event = threading.Event()
        self.controllers: dict[str, Controller] = {}
        self.informers = informers
        #: The client reconcilers write with: fenced by the lease under leader election.
        self.client = client.with_fence(self._fence) if leader_election else client
        self.probes: ProbeServer | None = None
        self._cleanups: list[Callable[[float], object]] = []
        # Set only after the workers stopped, so the lease is released after the last write.
        self._elector_stop = threading.Event()
        self._lost_lease = threading.Event()
        self._sync_failed = False
        self._renew_deadline = 0.0
        self.elector: LeaderElector | None = None
        if leader_election is not None:
            self._renew_deadline = leader_election.renew_deadline
            self.elector = LeaderElector(
                client.with_limits(qps=0, burst=0, max_retries=0),
                lease_name=leader_election.lease_name,
                namespace=leader_election.namespace,
                identity=identity,
                lease_duration=leader_election.lease_duration,
                renew_deadline=leader_election.renew_deadline,
                retry_period=leader_election.retry_period,
                on_started_leading=self._start_leading,
                on_stopped_leading=self._stop_leading,
                metrics=leader_metrics if leader_metrics is not None else NO_METRICS,
            )

    # ------------------------------------------------------------------ wiring

    def lister(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
    ) -> MultiNamespaceLister:
        """Return a lister over the shared informers of ``resource`` in scope.

        See :meth:`cbop.informers.SharedInformerFactory.lister`.
        """
        return self.informers.lister(resource, label_selector=label_selector, indexers=indexers)

    def add(self, controller: Controller) -> None:
        """Run ``controller``'s workers while leading (:class:`cbop.runtime.Builder` calls it).

        Raises:
            ValueError: a controller of the same name was added already.
        """
        if controller.name in self.controllers:
            raise ValueError(f"a controller named {controller.name} already exists")
        self.controllers[controller.name] = controller

    def add_cleanup(self, cleanup: Callable[[float], object]) -> None:
        """Call ``cleanup(seconds)`` on shutdown (e.g. to flush an Event sink).

        Cleanups run after the workers stopped and before the lease is released;
        ``seconds`` is how long one may take: 0 after a lost lease, else at most 1.
        """
        self._cleanups.append(cleanup)

    def healthy(self) -> bool:
        """Liveness: every controller's workers and every informer's threads run.

        Never false for an API server outage (restarting would not end it);
        :meth:`SharedInformerFactory.connected` reports that.
        """
        return all(c.healthy() for c in self.controllers.values()) and self.informers.alive()

    def bind_probes(self, address: tuple[str, int]) -> ProbeServer:
        """Bind the ``/healthz`` and ``/readyz`` server (served from :meth:`run`).

        Call it once every controller is added: ``/readyz`` gets one check per informer
        handed out so far plus ``informers-connected``; ``/healthz`` checks
        ``informers-and-workers`` (:meth:`healthy`).

        Raises:
            OSError: the address cannot be bound.
        """
        self.probes = ProbeServer(
            address,
            liveness={"informers-and-workers": self.healthy},
            # An API server outage shows here (and in logs and metrics), not on
            # /healthz: restarting every replica would not end it.
            readiness={
                **self.informers.readiness_checks(),
                "informers-connected": self.informers.connected,
            },
        )
        return self.probes

    # ------------------------------------------------------------------ leadership

    def _fence(self) -> bool:
        """Return whether a write may be sent: the fence of the writing client.

        True while the elector holds the lease by its own clock. The first False also
        ends the work as a lost lease does (a write that finds the fence closed means
        the lease may be someone else's by now).
        """
        elector = self.elector
        if elector is not None and elector.holds_lease():
            return True
        if not self._elector_stop.is_set():
            # Not while releasing after a graceful stop: that closed the fence on purpose.
            self._lose_lease("a write found the leader lease no longer valid")
        return False

    def _lose_lease(self, why: str) -> None:
        """Stop every worker at once, drop the queues, and have :meth:`run` return 1."""
        if self._lost_lease.is_set():
            return
        self._lost_lease.set()
        log.error(f"{why}; stopping at once so a fresh candidate can take over")
        for controller in self.controllers.values():
            controller.stop_workers()
        self.stop_event.set()

    def _start_leading(self) -> None:
        log.info("became leader; starting workers", identity=self.identity)
        self._start_workers_once_synced()

    def _stop_leading(self) -> None:
        if self._elector_stop.is_set():
            return  # released on request, after the workers stopped
        self._lose_lease("lost the leader lease")

    def _start_workers_once_synced(self) -> None:
        """Wait for the caches, then start every controller's workers.

        A missing CRD or RBAC not applied yet (GitOps tools apply manifests in any
        order) is waited out, not ended in a restart loop: the informers retry with
        backoff and /readyz names what is missing. The timeout only counts while
        nothing is refused. Caches that do not sync stop the manager (exit 1).
        """
        synced = self.informers.wait_for_cache_sync(
            self.cache_sync_timeout, stop=self.stop_event, wait_out_refusals=True
        )
        if self.stop_event.is_set():
            return
        if not synced:
            giving_up = "; giving up leadership" if self.elector is not None else ""
            log.error(f"caches did not sync in time{giving_up}", timeout=self.cache_sync_timeout)
            self._sync_failed = True
            self.stop_event.set()
            return
        freeze_caches()  # full collections stop rescanning the synced caches
        for controller in self.controllers.values():
            controller.start()

    # ------------------------------------------------------------------ run

    def run(self) -> int:
        """Run until :attr:`stop_event` is set; return the process exit code.

        Returns:
            0 after a graceful stop; 1 when the lease was lost (or a write found the
            fence closed) or caches never synced, with or without leader election.
        """
        if self.probes is not None:
            self.probes.start()
        log.info(
            "starting",
            namespaces=[ns for ns in self.informers.scopes if ns] or "all",
            controllers={name: c.workers for name, c in self.controllers.items()},
            leader_elect=self.elector is not None,
        )
        self.informers.start()
        elector_thread = None
        if self.elector is not None:
            elector_thread = threading.Thread(
                target=self.elector.run,
                args=(self._elector_stop,),
                name="cbop-leader-election",
                daemon=True,
            )
            elector_thread.start()
        else:
            self._start_workers_once_synced()
        self.stop_event.wait()
        self._shutdown()
        self._elector_stop.set()
        if elector_thread is not None:
            elector_thread.join(self._renew_deadline)
        if self.probes is not None:
            self.probes.stop()
        code = 1 if self._lost_lease.is_set() or self._sync_failed else 0
        log.info("stopped", exit_code=code)
        return code

    def _shutdown(self) -> None:
        """Stop the controllers and the informers, then run the cleanups."""
        if self._lost_lease.is_set():
            # No drain and no release: the fence refuses every write anyway, and the
            # lease may already be someone else's.
            log.info("stopping without a drain after losing the leader lease")
            for controller in self.controllers.values():
                controller.shutdown(0.0)
            self.informers.shutdown()
            for cleanup in self._cleanups:
                cleanup(0.0)
            return
        log.info("shutting down", timeout=self.shutdown_timeout)
        finished = _shutdown_all(list(self.controllers.values()), self.shutdown_timeout)
        if not finished:
            log.warning("in-flight reconciles did not finish in time")
        self.informers.shutdown()
        # Cleanups are best effort (Events): a second at most, then release.
        for cleanup in self._cleanups:
            cleanup(min(1.0, self.shutdown_timeout))


def _shutdown_all(controllers: list[Controller], timeout: float) -> bool:
    """Stop all intake, then give all in-flight reconciles one ``timeout`` (seconds).

    Returns:
        Whether every worker finished in time.
    """
    for controller in controllers:
        controller.stop_workers()
    deadline = time.monotonic() + timeout
    finished = True
    for controller in controllers:
        remaining = max(0.0, deadline - time.monotonic())
        finished = controller.shutdown(remaining) and finished
    return finished
