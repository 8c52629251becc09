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

With sharding (:class:`Sharding`, ``--shards N`` with N > 1) the manager runs a shard
coordinator instead of the single elector and is its ``ShardHandler``: setup functions
registered with :meth:`Manager.add_setup` are run against a :class:`ShardScope` per
acquired shard (own informers holding only that shard, own client fenced by that shard's
Lease, own controllers named ``<name>-shard-<i>``); a released shard is drained, a lost
one stopped at once, and the process carries on with its other shards. Only a stop
request (every held shard released gracefully, exit 0) or caches that never sync (exit
1) end it.

Metrics come in through seams (:mod:`cbop.runtime.metrics`, the workqueue's
``MetricsProvider``); this package never imports Prometheus.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import structlog

from cbop import defaults
from cbop.clock import RealClock
from cbop.gcpolicy import FRESH_START_SECONDS, freeze_caches, freeze_startup
from cbop.health import ProbeServer
from cbop.informers import SharedInformerFactory
from cbop.kube import KubeClient
from cbop.leaderelection import NO_METRICS, LeaderElector, LeaderMetrics
from cbop.runtime.metrics import ControllerMetricsProvider
from cbop.runtime.scope import Scope
from cbop.runtime.shards import ShardScope
from cbop.sharding import ShardedGroupCheck
from cbop.shardrange import ShardRange
from cbop.stop import StopSignal
from cbop.workqueue import MetricsProvider

__all__ = ["Coordinator", "LeaderElection", "Manager", "Sharding"]

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


class Coordinator(Protocol):
    """What the manager needs of a shard coordinator (``cbop.sharding.ShardCoordinator``)."""

    def run(self, stop: StopSignal) -> None:
        """Hold shards until ``stop`` is set; then release every held shard and return."""
        ...


@dataclass(frozen=True)
class Sharding:
    """Sharded operation (``--shards N``, N > 1): a shard coordinator and per-shard informers.

    Attributes:
        shards: the number of shards (N >= 2).
        informers: returns a new informer factory that lists and watches only the given
            shard's objects (``SharedInformerFactory(..., shard=shard)``).
        coordinator: returns the coordinator that calls the given handler (the manager)
            as it acquires, releases and loses shards; its ``run`` is called once.
    """

    shards: int
    informers: Callable[[ShardRange], SharedInformerFactory]
    coordinator: Callable[[Manager], Coordinator]


class Manager(Scope):
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
        sharding: run shards instead of the single leader (None: today's single
            leader); needs ``leader_election`` (whose timings the caller passes to the
            coordinator).

    Raises:
        ValueError: leader-election timings that break lease duration > renew deadline
            > 1.2 x retry period; sharding without leader election.
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
        sharding: Sharding | None = None,
    ) -> None:
        if sharding is not None and leader_election is None:
            raise ValueError("sharding needs leader election")
        super().__init__(
            # The client reconcilers write with: fenced by the lease under leader
            # election. Sharded, only the Events go through it (each shard's writes go
            # through the shard scope's client, fenced by the shard's Lease).
            client.with_fence(self._fence) if leader_election and not sharding else client,
            informers=informers,
            controller_metrics=controller_metrics,
            queue_metrics=queue_metrics,
        )
        self.identity = identity
        self.shutdown_timeout = shutdown_timeout
        self.cache_sync_timeout = cache_sync_timeout
        self.stop_event = StopSignal()
        self.sharding = sharding
        self._base_client = client
        self._setups: list[Callable[[Scope], object]] = []
        self._shards: dict[int, ShardScope] = {}
        self._shards_lock = threading.Lock()
        self._coordinator_thread: threading.Thread | None = None
        self.probes: ProbeServer | None = None
        self._cleanups: list[Callable[[float], object]] = []
        # Set only after the workers stopped, so the lease is released after the last write.
        self._elector_stop = StopSignal()
        self._started_at: float | None = None  # time.monotonic() when run() began
        self._lost_lease = threading.Event()
        self._sync_failed = False
        self._renew_deadline = leader_election.renew_deadline if leader_election else 0.0
        self._retry_period = leader_election.retry_period if leader_election else 2.0
        self._lease_duration = leader_election.lease_duration if leader_election else 0.0
        self.elector: LeaderElector | None = None
        if leader_election is not None and sharding is None:
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
                # Wait while a sharded group of the same id is at work (docs/sharding.md).
                may_acquire=ShardedGroupCheck(
                    client.with_limits(qps=0, burst=0, max_retries=0),
                    group=leader_election.lease_name,
                    namespace=leader_election.namespace,
                    request_timeout=leader_election.renew_deadline / 2,
                    clock=RealClock(),
                ),
            )

    # ------------------------------------------------------------------ wiring

    def add_setup(self, setup: Callable[[Scope], object]) -> None:
        """Build controllers with ``setup(scope)`` in every scope the manager runs.

        Without sharding ``setup(self)`` runs at once (the manager is the only scope);
        with sharding it runs against each shard's :class:`ShardScope` when the shard is
        acquired (again after a shard was lost and acquired anew).
        """
        self._setups.append(setup)
        if self.sharding is None:
            setup(self)

    def scopes(self) -> list[Scope]:
        """Return the scopes whose caches serve the process now.

        The manager itself without sharding; with sharding the held shards' scopes
        (syncing or running), by shard index. For per-process readers (metrics).
        """
        if self.sharding is None:
            return [self]
        return list(self.shard_scopes())

    def shard_scopes(self) -> Iterator[ShardScope]:
        """Yield the active (syncing or running) shard scopes, by shard index."""
        with self._shards_lock:
            scopes = sorted(self._shards.values(), key=lambda scope: scope.shard.index)
        return (scope for scope in scopes if scope.active)

    def add_cleanup(self, cleanup: Callable[[float], object]) -> None:
        """Call ``cleanup(seconds)`` on shutdown (e.g. to flush an Event sink).

        Cleanups run after the workers stopped and before the lease is released;
        ``seconds`` is how long one may take: 0 after a lost lease, else at most 1.
        """
        self._cleanups.append(cleanup)

    def healthy(self) -> bool:
        """Liveness: every controller's workers and every informer's threads run.

        Never false for an API server outage (restarting would not end it);
        :meth:`SharedInformerFactory.connected` reports that. With sharding: the
        coordinator's thread runs and every held shard's workers and informers run.
        """
        if self.sharding is not None:
            thread = self._coordinator_thread
            coordinating = thread is None or thread.is_alive() or self.stop_event.is_set()
            return coordinating and all(scope.healthy() for scope in self.shard_scopes())
        return all(c.healthy() for c in self.controllers.values()) and self.informers.alive()

    def connected(self) -> bool:
        """Readiness: every informer's watch of every scope is up (or down only briefly)."""
        return all(scope.informers.connected() for scope in self.scopes())

    def connection_states(self) -> dict[str, bool]:
        """Return informer name -> connected, for metrics (``<name>@shard-<i>`` if sharded)."""
        if self.sharding is None:
            return self.informers.connection_states()
        return {
            f"{name}@shard-{scope.shard.index}": up
            for scope in self.shard_scopes()
            for name, up in scope.informers.connection_states().items()
        }

    def _shards_ready(self) -> str | None:
        """Return why a sharded replica is not ready (``/readyz``), or None.

        Ready: the coordinator runs and every held shard's caches synced.

        A replica that holds no shard is ready (a standby).
        """
        thread = self._coordinator_thread
        if thread is None or not thread.is_alive():
            return "the shard coordinator is not running"
        for scope in self.shard_scopes():
            why = scope.not_ready()
            if why is not None:
                return why
        return None

    def bind_probes(self, address: tuple[str, int]) -> ProbeServer:
        """Bind the ``/healthz`` and ``/readyz`` server (served from :meth:`run`).

        Call it once every controller is added: ``/readyz`` gets one check per informer
        handed out so far (sharded: ``shards``, every held shard's caches synced) plus
        ``informers-connected``; ``/healthz`` checks
        ``informers-and-workers`` (:meth:`healthy`).

        Raises:
            OSError: the address cannot be bound.
        """
        readiness = (
            {"shards": self._shards_ready}
            if self.sharding is not None
            else self.informers.readiness_checks()
        )
        self.probes = ProbeServer(
            address,
            liveness={"informers-and-workers": self.healthy},
            # An API server outage shows here (and in logs and metrics), not on
            # /healthz: restarting every replica would not end it.
            readiness={**readiness, "informers-connected": self.connected},
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
        # Full collections stop rescanning the synced caches. Right after the start
        # (no wait for leadership) nothing worth a collection was made since
        # freeze_startup(), and skipping it brings the first reconcile closer.
        started = self._started_at
        fresh = started is not None and time.monotonic() - started < FRESH_START_SECONDS
        freeze_caches(collect=not fresh)
        for controller in self.controllers.values():
            controller.start()

    # ------------------------------------------------------------------ run

    def run(self) -> int:
        """Run until :attr:`stop_event` is set; return the process exit code.

        Returns:
            0 after a graceful stop; 1 when the lease was lost (or a write found the
            fence closed) or caches never synced, with or without leader election.
            Sharded: 0 after a graceful stop (a lost shard does not end the process);
            1 when a shard's caches never synced or the coordinator failed.
        """
        if self.probes is not None:
            self.probes.start()
        if self.sharding is not None:
            return self._run_sharded(self.sharding)
        log.info(
            "starting",
            namespaces=[ns for ns in self.informers.scopes if ns] or "all",
            controllers={name: c.workers for name, c in self.controllers.items()},
            leader_elect=self.elector is not None,
        )
        freeze_startup()
        self._started_at = time.monotonic()
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
        finished = self.shutdown_controllers(self.shutdown_timeout)
        if not finished:
            log.warning("in-flight reconciles did not finish in time")
        self.informers.shutdown()
        # Cleanups are best effort (Events): a second at most, then release.
        for cleanup in self._cleanups:
            cleanup(min(1.0, self.shutdown_timeout))

    # ------------------------------------------------------------------ sharding

    def _run_sharded(self, sharding: Sharding) -> int:
        """Run the shard coordinator until stopped; see :meth:`run`."""
        log.info(
            "starting sharded",
            shards=sharding.shards,
            namespaces=[ns for ns in self.informers.scopes if ns] or "all",
            identity=self.identity,
        )
        coordinator = sharding.coordinator(self)
        failed = threading.Event()

        def coordinate() -> None:
            try:
                coordinator.run(self._elector_stop)
            except Exception:
                log.exception("the shard coordinator failed")
                failed.set()
                self.stop_event.set()

        thread = threading.Thread(target=coordinate, name="cbop-shard-coordinator", daemon=True)
        self._coordinator_thread = thread
        thread.start()
        self.stop_event.wait()
        log.info("shutting down; releasing every held shard", timeout=self.shutdown_timeout)
        # The coordinator releases each held shard (drained, bounded by the shutdown
        # timeout) before it releases the shard's Lease, then returns.
        self._elector_stop.set()
        # Each held shard: its drain, then its elector's Lease release (bounded by the
        # coordinator to a lease duration); the thread is a daemon past this bound.
        thread.join((self.shutdown_timeout + self._lease_duration) * sharding.shards)
        with self._shards_lock:
            leftover = list(self._shards.values())
            self._shards.clear()
        for scope in leftover:
            scope.lose("stopping with the shard still held")
        for cleanup in self._cleanups:
            cleanup(min(1.0, self.shutdown_timeout))
        if self.probes is not None:
            self.probes.stop()
        code = 1 if failed.is_set() or self._sync_failed else 0
        log.info("stopped", exit_code=code)
        return code

    def acquired(self, shard: ShardRange, fence: Callable[[], bool]) -> None:
        """Start work on ``shard`` (the coordinator's ``ShardHandler``; returns at once).

        Creates the shard's :class:`ShardScope` (informers of
        :attr:`Sharding.informers`, a client fenced by ``fence``), runs every setup
        function of :meth:`add_setup` against it, and starts it: informers now, workers
        once its caches synced.

        Raises:
            RuntimeError: the manager is not sharded.
        """
        self._start_shard(shard, fence, replacing=None)

    def _start_shard(
        self, shard: ShardRange, fence: Callable[[], bool], *, replacing: ShardScope | None
    ) -> bool:
        """Build and start a scope for ``shard``; return whether it started.

        With ``replacing``, only while that scope is still the shard's current one.
        """
        sharding = self.sharding
        if sharding is None:
            raise RuntimeError("acquired() needs a sharded manager")
        scope = ShardScope(
            shard,
            client=self._base_client,
            fence=fence,
            informers=sharding.informers(shard),
            cache_sync_timeout=self.cache_sync_timeout,
            on_sync_failed=self._shard_sync_failed,
            on_fenced_off=lambda lost: self._restart_when_fence_reopens(lost, fence),
            controller_metrics=self.controller_metrics,
            queue_metrics=self.queue_metrics,
        )
        for setup in self._setups:
            setup(scope)
        with self._shards_lock:
            if replacing is not None and self._shards.get(shard.index) is not replacing:
                return False
            stale = self._shards.pop(shard.index, None)
            self._shards[shard.index] = scope
        if stale is not None:
            stale.lose("the shard was acquired anew")
        scope.start()
        return True

    def _restart_when_fence_reopens(self, lost: ShardScope, fence: Callable[[], bool]) -> None:
        """Start the shard anew once its fence is open again, after a write found it closed.

        Not when the coordinator lost, released or re-acquired the shard meanwhile (then
        ``lost`` is no longer the shard's scope). A closed fence does not mean the Lease
        is gone: a renewal that came late (a slow API server) closes it until the shard's
        elector renews again. The elector renews
        with the resourceVersion it read, so an open fence afterwards means no other
        replica held the Lease in between; a Lease taken by another makes the elector
        stop, and the coordinator then calls :meth:`lost`. Polls every retry period on a
        daemon thread until one of those happens or the manager stops.
        """
        period = self._retry_period

        def watch() -> None:
            while not self.stop_event.wait(period):
                with self._shards_lock:
                    if self._shards.get(lost.shard.index) is not lost:
                        return
                if fence():
                    if self._start_shard(lost.shard, fence, replacing=lost):
                        log.info(
                            "the shard lease is held again; shard restarted", shard=str(lost.shard)
                        )
                    return

        threading.Thread(
            target=watch, name=f"cbop-shard-{lost.shard.index}-refence", daemon=True
        ).start()

    def release(self, shard: ShardRange) -> None:
        """Hand ``shard`` over gracefully (``ShardHandler``); blocks while it drains.

        Stops the shard's intake, lets in-flight reconciles finish (at most
        ``shutdown_timeout`` seconds), stops its informers, then returns: the
        coordinator releases the shard's Lease after that.
        """
        with self._shards_lock:
            scope = self._shards.get(shard.index)
        if scope is None:
            return
        scope.release(self.shutdown_timeout)
        with self._shards_lock:
            if self._shards.get(shard.index) is scope:
                del self._shards[shard.index]

    def lost(self, shard: ShardRange) -> None:
        """Stop ``shard``'s work at once (``ShardHandler``): no drain; the process carries on."""
        with self._shards_lock:
            scope = self._shards.pop(shard.index, None)
        if scope is not None:
            scope.lose("lost the shard lease")

    def _shard_sync_failed(self, scope: ShardScope) -> None:
        """Stop the process (exit 1) when a shard's caches never synced, as unsharded."""
        self._sync_failed = True
        self.stop_event.set()
