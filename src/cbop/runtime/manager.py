"""The runtime manager: one process lifecycle for controllers, caches, probes and leases.

As controller-runtime's Manager: everything it runs is a runnable in one of four ordered
groups (:mod:`cbop.runtime.runnable`: servers, informers, others, the leadership
source), started in that order and stopped in reverse on one shutdown path, and
:meth:`Manager.run` returns the exit code. Controllers run in scopes
(:class:`cbop.runtime.Scope`): the manager is the scope of an unsharded process, and
under ``--shards`` each acquired shard gets one of its own (:class:`Sharding`); the
leadership source (:mod:`cbop.runtime.leadership`) calls :meth:`Manager.acquired`,
:meth:`Manager.release` and :meth:`Manager.lost` either way. A graceful stop releases
every scope, then hands the lease back (exit 0); a lost lease stops that scope's workers
at once and, unsharded, ends the process with exit 1 so that a restarted pod rejoins as
a clean candidate (as controller-runtime). See docs/leader-election.md and
docs/sharding.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import structlog

from cbop import defaults
from cbop.clock import RealClock
from cbop.gcpolicy import FRESH_START_SECONDS, freeze_caches, freeze_startup
from cbop.health import ProbeServer
from cbop.informers import SharedInformerFactory
from cbop.kube import KubeInterface
from cbop.leaderelection import NO_METRICS, LeaderElector, LeaderMetrics
from cbop.runtime.leadership import Coordinated, Coordinator, SingleLeader, Unelected
from cbop.runtime.metrics import ControllerMetricsProvider
from cbop.runtime.runnable import (
    CACHES,
    GROUP_ORDER,
    LEADER_ELECTION,
    OTHERS,
    SERVERS,
    Hooks,
    Runnable,
    RunnableGroup,
)
from cbop.runtime.scope import Scope
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
        client: the API client; reconcilers write through :attr:`client` (fenced by
            the lease under leader election).
        informers: the shared informer factory every controller's informers come from
            (its scope is the manager's); the manager starts and stops it.
        identity: this process's identity (the Lease holder).
        leader_election: take part in leader election (None: lead at once).
        leader_metrics: ``leader_election_master_status`` hooks (optional).
        shutdown_timeout: seconds in-flight reconciles get on shutdown.
        cache_sync_timeout: seconds a controller waits for its first lists; time while
            a list is refused (CRD not installed, 403) does not count: that is waited
            out.
        controller_metrics: creates each controller's metric hooks (optional).
        queue_metrics: the workqueues' metrics provider (optional; unnamed queues
            without it).
        sharding: run shards instead of the single leader (None: the single leader);
            needs ``leader_election`` (whose timings the caller passes to the
            coordinator).

    Raises:
        ValueError: leader-election timings that break lease duration > renew deadline
            > 1.2 x retry period; sharding without leader election.
    """

    def __init__(
        self,
        client: KubeInterface,
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
            client,
            informers=informers,
            controller_metrics=controller_metrics,
            queue_metrics=queue_metrics,
            # Sharded, only the Events go through the manager's own client (each shard's
            # writes go through its scope's client, fenced by the shard's Lease).
            fenced=leader_election is not None and sharding is None,
            cache_sync_timeout=cache_sync_timeout,
            on_failed=self._scope_failed,
            on_fenced_off=self._fenced_off,
            on_running=self._freeze_caches,
        )
        self.identity = identity
        self.shutdown_timeout = shutdown_timeout
        self.stop_event = StopSignal()
        self.sharding = sharding
        self._base_client = client
        self._setups: list[Callable[[Scope], object]] = []
        self._shards: dict[int, Scope] = {}
        self._shards_lock = threading.Lock()
        self.probes: ProbeServer | None = None
        self._drain_hooks: list[Callable[[float], object]] = []
        self._started_at: float | None = None  # time.monotonic() when run() began
        self._exit_code = 0
        self._lost = False
        self._retry_period = leader_election.retry_period if leader_election else 2.0
        self._groups = {name: RunnableGroup(name) for name in GROUP_ORDER}
        self._groups[CACHES].add(
            Hooks("shared informers", informers.start, lambda _: informers.shutdown())
        )
        self.elector: LeaderElector | None = None
        self._coordinated: Coordinated | None = None
        # Stopped after the leadership source (the group stops in reverse): a shard the
        # coordinator did not release in time is stopped at once.
        self._groups[LEADER_ELECTION].add(
            Hooks("shards left over", on_stop=lambda _: self._lose_leftover_shards())
        )
        leadership: Runnable
        if sharding is not None and leader_election is not None:
            self._coordinated = Coordinated(
                sharding.coordinator(self),
                on_failed=self._fail,
                # Each held shard: its drain, then its elector's Lease release (bounded
                # by the coordinator to a lease duration).
                join_timeout=(shutdown_timeout + leader_election.lease_duration) * sharding.shards,
            )
            leadership = self._coordinated
        elif leader_election is not None:
            single = SingleLeader(
                self,
                lambda started, stopped: self._elector(
                    client, leader_election, leader_metrics, started, stopped
                ),
                join_timeout=leader_election.renew_deadline,
            )
            self.elector = single.elector
            leadership = single
        else:
            leadership = Unelected(self)
        self._groups[LEADER_ELECTION].add(leadership)

    def _elector(
        self,
        client: KubeInterface,
        election: LeaderElection,
        metrics: LeaderMetrics | None,
        started: Callable[[], None],
        stopped: Callable[[], None],
    ) -> LeaderElector:
        # Lease writes are never throttled, retried or fenced.
        lease_client = client.with_limits(qps=0, burst=0, max_retries=0)
        return LeaderElector(
            lease_client,
            lease_name=election.lease_name,
            namespace=election.namespace,
            identity=self.identity,
            lease_duration=election.lease_duration,
            renew_deadline=election.renew_deadline,
            retry_period=election.retry_period,
            on_started_leading=started,
            on_stopped_leading=stopped,
            metrics=metrics if metrics is not None else NO_METRICS,
            # Wait while a sharded group of the same id is at work (docs/sharding.md).
            may_acquire=ShardedGroupCheck(
                lease_client,
                group=election.lease_name,
                namespace=election.namespace,
                request_timeout=election.renew_deadline / 2,
                clock=RealClock(),
            ),
        )

    # ------------------------------------------------------------------ wiring

    def add_setup(self, setup: Callable[[Scope], object]) -> None:
        """Build controllers with ``setup(scope)`` in every scope the manager runs.

        Without sharding ``setup(self)`` runs at once (the manager is the only scope);
        with sharding it runs against each shard's scope when the shard is acquired
        (again after a shard was lost and acquired anew).
        """
        self._setups.append(setup)
        if self.sharding is None:
            setup(self)

    def add_runnable(self, runnable: Runnable, group: str) -> None:
        """Run ``runnable`` with the process, in ``group`` (:data:`GROUP_ORDER`).

        Raises:
            KeyError: no such group.
        """
        self._groups[group].add(runnable)

    def add_cleanup(self, cleanup: Callable[[float], object]) -> None:
        """Call ``cleanup(seconds)`` on shutdown (e.g. to close an Event sink).

        It runs in the ``others`` group, after the leadership source stopped (every
        scope drained and released) and before the informers and servers stop;
        ``seconds`` is how long it may take: 0 after a lost lease, else at most 1.
        """
        self.add_runnable(Hooks("cleanup", on_stop=cleanup), OTHERS)

    def add_drain_hook(self, hook: Callable[[float], object]) -> None:
        """Call ``hook(seconds)`` whenever a scope has drained, before its lease goes back.

        For the Event sink's flush: Events of the last reconciles are written while
        the fence still lets them through. ``seconds`` is at most 1.
        """
        self._drain_hooks.append(hook)

    def scopes(self) -> list[Scope]:
        """Return the scopes whose caches serve the process now.

        The manager itself without sharding; with sharding the held shards' scopes
        (syncing or running), by shard index. For per-process readers (metrics).
        """
        if self.sharding is None:
            return [self]
        return list(self.shard_scopes())

    def shard_scopes(self) -> Iterator[Scope]:
        """Yield the active (syncing or running) shard scopes, by shard index."""
        with self._shards_lock:
            scopes = sorted(self._shards.values(), key=lambda scope: scope.index)
        return (scope for scope in scopes if scope.active)

    # ------------------------------------------------------------------ health

    def healthy(self) -> bool:
        """Liveness: every controller's workers and every informer's threads run.

        Never false for an API server outage (restarting would not end it);
        :meth:`connected` reports that. With sharding: the coordinator's thread runs
        and every held shard's workers and informers run.
        """
        if self._coordinated is not None:
            coordinating = self._coordinated.running() or self.stop_event.is_set()
            return coordinating and all(scope.healthy() for scope in self.shard_scopes())
        workers = all(c.healthy() for c in self.controllers.values())
        return workers and self.informers.alive()

    def connected(self) -> bool:
        """Readiness: every informer's watch of every scope is up (or down only briefly)."""
        return all(scope.informers.connected() for scope in self.scopes())

    def connection_states(self) -> dict[str, bool]:
        """Return informer name -> connected, for metrics (``<name>@shard-<i>`` if sharded)."""
        if self.sharding is None:
            return self.informers.connection_states()
        return {
            f"{name}@shard-{scope.index}": up
            for scope in self.shard_scopes()
            for name, up in scope.informers.connection_states().items()
        }

    def _shards_ready(self) -> str | None:
        """Return why a sharded replica is not ready (``/readyz``), or None.

        Ready: the coordinator runs and every held shard's caches synced. A replica
        that holds no shard is ready (a standby).
        """
        coordinated = self._coordinated
        if coordinated is None or coordinated.thread is None or not coordinated.running():
            return "the shard coordinator is not running"
        for scope in self.shard_scopes():
            why = scope.not_ready()
            if why is not None:
                return why
        return None

    def bind_probes(self, address: tuple[str, int]) -> ProbeServer:
        """Bind the ``/healthz`` and ``/readyz`` server (served while :meth:`run` runs).

        Call it once every controller is added: ``/readyz`` gets one check per informer
        handed out so far (sharded: ``shards``, every held shard's caches synced) plus
        ``informers-connected``; ``/healthz`` checks ``informers-and-workers``
        (:meth:`healthy`). The server is the first runnable of the ``servers`` group.

        Raises:
            OSError: the address cannot be bound.
        """
        readiness = (
            {"shards": self._shards_ready}
            if self.sharding is not None
            else self.informers.readiness_checks()
        )
        probes = ProbeServer(
            address,
            liveness={"informers-and-workers": self.healthy},
            # An API server outage shows here (and in logs and metrics), not on
            # /healthz: restarting every replica would not end it.
            readiness={**readiness, "informers-connected": self.connected},
        )
        self.probes = probes
        self.add_runnable(Hooks("probes", probes.start, lambda _: probes.stop()), SERVERS)
        return probes

    # ------------------------------------------------------------------ scopes

    def acquired(self, shard: ShardRange | None, fence: Callable[[], bool] | None) -> None:
        """Start the scope of ``shard`` (None: the process's own); return at once.

        Unsharded, that is the manager itself: its controllers start as their caches
        sync. Sharded, a new scope is built (informers of :attr:`Sharding.informers`,
        a client fenced by ``fence``, every setup of :meth:`add_setup` run against it)
        and started. The coordinator's ``ShardHandler``; also called by the single
        leader and by a process without leader election.

        Raises:
            RuntimeError: a shard for an unsharded manager, or None for a sharded one.
        """
        if shard is None:
            if self.sharding is not None:
                raise RuntimeError("a sharded manager has no scope of its own to start")
            self.start(fence)
            return
        self._start_shard(shard, fence, replacing=None)

    def release(self, shard: ShardRange | None) -> None:
        """Hand the scope of ``shard`` over gracefully; blocks while it drains.

        Stops intake, lets in-flight reconciles finish (at most ``shutdown_timeout``
        seconds), runs the drain hooks (the Event sink's flush), stops the scope's own
        informers, then returns: the leadership source hands the lease back after that.
        """
        if shard is None:
            self.stop(self.shutdown_timeout, self._drained)
            return
        with self._shards_lock:
            scope = self._shards.get(shard.index)
        if scope is None:
            return
        scope.stop(self.shutdown_timeout, self._drained)
        with self._shards_lock:
            if self._shards.get(shard.index) is scope:
                del self._shards[shard.index]

    def lost(self, shard: ShardRange | None) -> None:
        """Stop the scope of ``shard`` at once (no drain).

        Unsharded, the process then stops with exit code 1; sharded it carries on.
        """
        if shard is None:
            self._lose_process("lost the leader lease")
            return
        with self._shards_lock:
            scope = self._shards.pop(shard.index, None)
        if scope is not None:
            scope.lose("lost the shard lease")

    def _lose_leftover_shards(self) -> None:
        with self._shards_lock:
            leftover = list(self._shards.values())
            self._shards.clear()
        for scope in leftover:
            scope.lose("stopping with the shard still held")

    def _drained(self, seconds: float) -> None:
        for hook in self._drain_hooks:
            hook(seconds)

    def _lose_process(self, why: str) -> None:
        """Stop the process's scope at once and end the process with exit code 1."""
        self.lose(why)
        self._lost = True
        self._fail(why)

    def _fenced_off(self, scope: Scope) -> None:
        """End the process (exit 1): a write found the process's fence closed."""
        self._lost = True
        self._fail("a write found the leader lease no longer valid")

    def _scope_failed(self, scope: Scope, why: str) -> None:
        """Stop the process (exit 1): a controller's caches never synced."""
        self._fail(why)

    def _fail(self, why: str) -> None:
        """Stop the process with exit code 1 (idempotent; the first reason is logged)."""
        if self._exit_code == 0:
            log.error(f"{why}; stopping")
        self._exit_code = 1
        self.stop_event.set()

    def _freeze_caches(self, scope: Scope) -> None:
        """Freeze the synced caches once every controller of the process's scope runs.

        Full collections then stop rescanning them. Right after the start (no wait for
        leadership) nothing worth a collection was made since ``freeze_startup()``, and
        skipping it brings the first reconcile closer. Not for shard scopes: a scope
        refers to itself (its client's fence), and a frozen cycle is never collected,
        so every shard handed over would keep its caches alive.
        """
        started = self._started_at
        fresh = started is not None and time.monotonic() - started < FRESH_START_SECONDS
        freeze_caches(collect=not fresh)

    def _start_shard(
        self, shard: ShardRange, fence: Callable[[], bool] | None, *, replacing: Scope | None
    ) -> bool:
        """Build and start a scope for ``shard``; return whether it started.

        With ``replacing``, only while that scope is still the shard's current one.
        """
        sharding = self.sharding
        if sharding is None:
            raise RuntimeError("acquired() needs a sharded manager")
        scope = Scope(
            self._base_client,
            informers=sharding.informers(shard),
            controller_metrics=self.controller_metrics,
            queue_metrics=self.queue_metrics,
            name_suffix=f"-shard-{shard.index}",
            shard=shard,
            fenced=True,
            owns_informers=True,
            cache_sync_timeout=self.cache_sync_timeout,
            on_failed=self._scope_failed,
            # A shard whose write found its fence closed is started anew once it reopens.
            on_fenced_off=lambda lost: self._restart_when_fence_reopens(lost, fence),
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
        log.info("shard acquired; starting its informers", shard=str(shard))
        scope.start(fence)
        return True

    def _restart_when_fence_reopens(self, lost: Scope, fence: Callable[[], bool] | None) -> None:
        """Start the shard anew once its fence is open again, after a write found it closed.

        Not when the coordinator lost, released or re-acquired the shard meanwhile (then
        ``lost`` is no longer the shard's scope). A closed fence does not mean the Lease
        is gone: a renewal that came late (a slow API server) closes it until the shard's
        elector renews again. The elector renews with the resourceVersion it read, so an
        open fence afterwards means no other replica held the Lease in between; a Lease
        taken by another makes the elector stop, and the coordinator then calls
        :meth:`lost`. Checks every retry period on a daemon thread until one of those
        happens or the manager stops.
        """
        shard = lost.shard
        if shard is None or fence is None:
            return

        def watch() -> None:
            while not self.stop_event.wait(self._retry_period):
                with self._shards_lock:
                    if self._shards.get(shard.index) is not lost:
                        return
                if fence():
                    if self._start_shard(shard, fence, replacing=lost):
                        log.info("the shard lease is held again; shard restarted", shard=str(shard))
                    return

        threading.Thread(
            target=watch, name=f"cbop-shard-{shard.index}-refence", daemon=True
        ).start()

    # ------------------------------------------------------------------ run

    def run(self) -> int:
        """Run until :attr:`stop_event` is set; return the process exit code.

        Starts the groups in order (servers, caches, others, leadership), waits for the
        stop request, and stops them in reverse.

        Returns:
            0 after a graceful stop; 1 when the lease was lost (or a write found the
            fence closed), caches never synced, or the shard coordinator failed.
            Sharded, a lost shard does not end the process.

        Raises:
            Exception: a runnable failed to start (an address that cannot be bound);
                what had started is stopped first.
        """
        log.info(
            "starting",
            namespaces=[ns for ns in self.informers.scopes if ns] or "all",
            controllers={name: c.workers for name, c in self.controllers.items()},
            shards=self.sharding.shards if self.sharding else 1,
            leader_elect=self.elector is not None or self.sharding is not None,
            identity=self.identity,
        )
        freeze_startup()
        self._started_at = time.monotonic()
        started: list[RunnableGroup] = []
        try:
            for name in GROUP_ORDER:
                group = self._groups[name]
                started.append(group)
                group.start()
        except BaseException:
            self._stop_groups(started)
            raise
        # On the main thread: its signal handlers set stop_event (cbop.cli.command).
        self.stop_event.wait_handling_signals()
        self._stop_groups(started)
        code = self._exit_code
        log.info("stopped", exit_code=code)
        return code

    def _stop_groups(self, groups: list[RunnableGroup]) -> None:
        if self._lost:
            # No drain and no release: the fence refuses every write anyway, and the
            # lease may already be someone else's.
            log.info("stopping without a drain after losing the leader lease")
        else:
            log.info("shutting down", timeout=self.shutdown_timeout)
        for group in reversed(groups):
            group.stop(0.0 if self._lost else min(1.0, self.shutdown_timeout))
