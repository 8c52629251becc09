"""The runtime manager: one process lifecycle for scopes, caches, probes and leases.

As controller-runtime's Manager, it owns the life of a process's controllers. What it
runs is a runnable in one of four ordered groups (:mod:`cbop.runtime.runnable`):
servers (probes), caches (the informers of the scopes prepared while wiring), others
(cleanups), and the leadership source (:mod:`cbop.runtime.leadership`), which hands
the manager the :class:`cbop.runtime.scope.ScopeSpec` of each lease it acquires,
releases or loses. The manager has scopes; it is not one: an unsharded process has one
scope of every namespace, fenced by its elector, and a sharded one a scope per shard
held. Acquiring, releasing, losing, health and readiness are one loop over them, and a
spec's ``restartable`` says whether a loss ends the process. See
docs/leader-election.md and docs/sharding.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from cbop import defaults
from cbop.gcpolicy import FRESH_START_SECONDS, freeze_caches, freeze_startup
from cbop.health import ProbeServer
from cbop.informers import SharedInformerFactory
from cbop.kube import KubeInterface
from cbop.leaderelection import LeaderElector, LeaderMetrics
from cbop.runtime.definition import Setup, SetupFunc
from cbop.runtime.leadership import (
    LeaderElection,
    LeadershipSource,
    Sharding,
    SingleLeader,
    leadership_source,
)
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
from cbop.runtime.scope import Scope, ScopeSpec, ScopeState
from cbop.shardrange import ShardRange
from cbop.stop import StopSignal
from cbop.workqueue import MetricsProvider

__all__ = ["Manager"]

log = structlog.get_logger("cbop.manager")


class Manager:
    """Runs controllers in scopes until stopped.

    Args:
        client: the API client; each scope writes through it, fenced by its lease
            under leader election.
        informers: ``fn(shard) -> factory``: the informers of a scope serving
            ``shard`` (every namespace's for ``ShardRange.of(0, 1)``).
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
        sharding: the shard coordinator supplies the scopes (None: one scope of every
            namespace); needs ``leader_election`` (whose timings the caller passes to
            the coordinator).

    Raises:
        ValueError: sharding without leader election.
    """

    def __init__(
        self,
        client: KubeInterface,
        *,
        informers: Callable[[ShardRange], SharedInformerFactory],
        identity: str,
        leader_election: LeaderElection | None = None,
        leader_metrics: LeaderMetrics | None = None,
        shutdown_timeout: float = defaults.SHUTDOWN_TIMEOUT,
        cache_sync_timeout: float = defaults.CACHE_SYNC_TIMEOUT,
        controller_metrics: ControllerMetricsProvider | None = None,
        queue_metrics: MetricsProvider | None = None,
        sharding: Sharding | None = None,
    ) -> None:
        self.identity = identity
        self.shutdown_timeout = shutdown_timeout
        self.cache_sync_timeout = cache_sync_timeout
        self.controller_metrics = controller_metrics
        self.queue_metrics = queue_metrics
        self.stop_event = StopSignal()
        self.probes: ProbeServer | None = None
        self.elector: LeaderElector | None = None
        self._client = client
        #: ``fn(shard) -> factory``: the informers of a scope serving ``shard``.
        self.informers = informers
        self._setups: list[Setup] = []
        self._drain_hooks: list[Callable[[float], object]] = []
        self._started_at: float | None = None  # time.monotonic() when run() began
        self._exit_code = 0
        self._lost = False
        self._retry_period = leader_election.retry_period if leader_election else 2.0
        self._groups = {name: RunnableGroup(name) for name in GROUP_ORDER}
        self._source: LeadershipSource = leadership_source(
            self,
            client,
            identity=identity,
            election=leader_election,
            metrics=leader_metrics,
            sharding=sharding,
            shutdown_timeout=shutdown_timeout,
            on_failed=self._fail,
        )
        if isinstance(self._source, SingleLeader):
            self.elector = self._source.elector
        # Scopes built while wiring (their informers run with the process), by index;
        # and the scope that holds each acquired lease now, by index.
        self._prepared: dict[int, Scope] = {}
        self._held: dict[int, Scope] = {}
        self._lock = threading.Lock()
        for spec in self._source.prepared:
            scope = self._new_scope(spec, prepared=True)
            self._prepared[spec.index] = scope
            self._groups[CACHES].add(_informers_of(scope))
        # Stopped after the leadership source (the group stops in reverse): a scope the
        # source did not release in time is stopped at once.
        self._groups[LEADER_ELECTION].add(
            Hooks("scopes left over", on_stop=lambda _: self._lose_leftover_scopes())
        )
        self._groups[LEADER_ELECTION].add(self._source)

    def _new_scope(self, spec: ScopeSpec, *, prepared: bool) -> Scope:
        """Build the scope of ``spec`` and run every setup against it.

        A prepared scope's informers belong to the process (the caches group starts
        them); any other scope owns its own. Only a prepared scope's caches are frozen
        for the collector once its controllers run: a scope refers to itself (its
        client's fence), and a frozen cycle is never collected, so every scope handed
        over would keep its caches alive.
        """
        scope = Scope(
            self._client,
            informers=self.informers(spec.shard),
            spec=spec,
            controller_metrics=self.controller_metrics,
            queue_metrics=self.queue_metrics,
            fenced=True,
            owns_informers=not prepared,
            cache_sync_timeout=self.cache_sync_timeout,
            on_failed=self._scope_failed,
            on_fenced_off=self._fenced_off,
            on_running=self._freeze_caches if prepared else None,
        )
        for setup in self._setups:
            setup.set_up(scope)
        return scope

    # ------------------------------------------------------------------ wiring

    def add_setup(self, setup: Setup | SetupFunc) -> None:
        """Build controllers with ``setup`` in every scope the manager runs.

        A plain function is a :class:`Setup` of ``each_scope`` only. The scopes prepared
        while wiring (the process's one scope) get it at once; any other scope (a
        shard's) when it is built, as its lease is acquired (again after a loss).
        """
        made = setup if isinstance(setup, Setup) else Setup(setup)
        self._setups.append(made)
        for scope in self._prepared.values():
            made.set_up(scope)

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

    @property
    def event_client(self) -> KubeInterface:
        """The client for per-process writes (Events).

        The client of the prepared scope where one covers the process (the single
        leader's Events are fenced by its lease); else the process's own: shards come
        and go, and an Event is not state, so one recorded just before a shard was lost
        may still be written.
        """
        for scope in self._prepared.values():
            return scope.client
        return self._client

    def prepared_scopes(self) -> list[Scope]:
        """Return the scopes built while wiring, by index (none when sharded)."""
        return [self._prepared[index] for index in sorted(self._prepared)]

    def scopes(self) -> list[Scope]:
        """Return the scopes whose caches serve the process now, by index.

        The prepared scopes (their caches run with the process, a standby's too) and
        the active (syncing or running) scopes of the leases held. For per-process
        readers (metrics, probes).
        """
        with self._lock:
            found = {id(s): s for s in self._prepared.values()}
            found.update({id(s): s for s in self._held.values() if s.active})
        return sorted(found.values(), key=lambda scope: scope.index)

    def held_scopes(self) -> list[Scope]:
        """Return the active (syncing or running) scopes of the leases held, by index."""
        with self._lock:
            held = sorted(self._held.values(), key=lambda scope: scope.index)
        return [scope for scope in held if scope.active]

    # ------------------------------------------------------------------ health

    def healthy(self) -> bool:
        """Liveness: the leadership source and every scope's workers and informers run.

        Never false for an API server outage (restarting would not end it);
        :meth:`connected` reports that.
        """
        source = self._source.healthy() or self.stop_event.is_set()
        return source and all(scope.healthy() for scope in self.scopes())

    def connected(self) -> bool:
        """Readiness: every informer's watch of every scope is up (or down only briefly)."""
        return all(scope.informers.connected() for scope in self.scopes())

    def connection_states(self) -> dict[str, bool]:
        """Return informer name -> connected, for metrics (``<name>@shard-<i>`` in a shard)."""
        return {
            f"{name}{scope.spec.informer_suffix}": up
            for scope in self.scopes()
            for name, up in scope.informers.connection_states().items()
        }

    def _held_ready(self) -> str | None:
        """Return why a held scope is not ready (``/readyz``): the first one's reason."""
        for scope in self.held_scopes():
            why = scope.not_ready()
            if why is not None:
                return why
        return None

    def bind_probes(self, address: tuple[str, int]) -> ProbeServer:
        """Bind the ``/healthz`` and ``/readyz`` server (served while :meth:`run` runs).

        Call it once every controller is added: ``/readyz`` gets one check per informer
        of the prepared scopes, the leadership source's own (sharded: ``shards``, every
        held shard's caches synced), and ``informers-connected``; ``/healthz`` checks
        ``informers-and-workers`` (:meth:`healthy`). The server is the first runnable
        of the ``servers`` group.

        Raises:
            OSError: the address cannot be bound.
        """
        readiness: dict[str, Callable[[], str | None]] = {}
        for scope in self.prepared_scopes():
            readiness.update(scope.informers.readiness_checks())
        readiness.update(self._source.readiness_checks(self._held_ready))
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

    def acquired(self, spec: ScopeSpec, fence: Callable[[], bool] | None) -> None:
        """Start the scope of ``spec``, fenced by ``fence`` (None: open); return at once.

        The prepared scope of ``spec`` if it was never started; else a new one (its own
        informers, every setup run against it). The leadership source's call.
        """
        self._start(spec, fence, replacing=None)

    def release(self, spec: ScopeSpec) -> None:
        """Hand the scope of ``spec`` over gracefully; blocks while it drains.

        Stops intake, lets in-flight reconciles finish (at most ``shutdown_timeout``
        seconds), runs the drain hooks (the Event sink's flush), stops the informers
        the scope owns, then returns: the leadership source hands the lease back after.
        """
        with self._lock:
            scope = self._held.get(spec.index)
        if scope is None:
            return
        scope.stop(self.shutdown_timeout, self._drained)
        with self._lock:
            if self._held.get(spec.index) is scope:
                del self._held[spec.index]

    def lost(self, spec: ScopeSpec) -> None:
        """Stop the scope of ``spec`` at once (no drain).

        The process carries on when ``spec`` is restartable, and stops with exit code 1
        otherwise.
        """
        with self._lock:
            scope = self._held.pop(spec.index, None)
        why = f"lost the lease of {spec.describe()}"
        if scope is not None:
            scope.lose(why)
        if not spec.restartable:
            self._end_lost(why)

    def _start(
        self, spec: ScopeSpec, fence: Callable[[], bool] | None, *, replacing: Scope | None
    ) -> bool:
        """Start a scope for ``spec``; return whether it started.

        With ``replacing``, only while that scope is still the one holding the lease.
        """
        prepared = self._prepared.get(spec.index)
        if prepared is not None and prepared.spec == spec and prepared.state is ScopeState.IDLE:
            scope = prepared
        else:
            scope = self._new_scope(spec, prepared=False)
        with self._lock:
            if replacing is not None and self._held.get(spec.index) is not replacing:
                return False
            stale = self._held.pop(spec.index, None)
            self._held[spec.index] = scope
        if stale is not None:
            stale.lose("the lease was acquired anew")
        log.info("lease acquired; starting", scope=spec.describe())
        scope.start(fence)
        return True

    def _lose_leftover_scopes(self) -> None:
        with self._lock:
            leftover = list(self._held.values())
            self._held.clear()
        for scope in leftover:
            scope.lose("stopping with the lease still held")

    def _drained(self, seconds: float) -> None:
        for hook in self._drain_hooks:
            hook(seconds)

    def _fenced_off(self, scope: Scope) -> None:
        """Act on a write that found ``scope``'s fence closed (the scope is lost already).

        A restartable scope starts anew once its fence reopens; otherwise the process
        ends with exit code 1.
        """
        if scope.spec.restartable:
            self._restart_when_fence_reopens(scope)
        else:
            self._end_lost("a write found the leader lease no longer valid")

    def _restart_when_fence_reopens(self, lost: Scope) -> None:
        """Start the scope anew once its fence is open again, after a write found it closed.

        Not when the leadership source lost, released or re-acquired the lease
        meanwhile (then ``lost`` no longer holds it). A closed fence does not mean the
        Lease is gone: a renewal that came late (a slow API server) closes it until the
        elector renews again. The elector renews with the resourceVersion it read, so
        an open fence afterwards means no other replica held the Lease in between; a
        Lease taken by another makes the elector stop, and the source then calls
        :meth:`lost`. Checks every retry period on a daemon thread until one of those
        happens or the manager stops.
        """
        spec, fence = lost.spec, lost.lease_fence

        def watch() -> None:
            while not self.stop_event.wait(self._retry_period):
                with self._lock:
                    if self._held.get(spec.index) is not lost:
                        return
                if fence():
                    if self._start(spec, fence, replacing=lost):
                        log.info("the lease is held again; restarted", scope=spec.describe())
                    return

        threading.Thread(target=watch, name=f"cbop-{spec.name}-refence", daemon=True).start()

    def _scope_failed(self, scope: Scope, why: str) -> None:
        """Stop the process (exit 1): a controller's caches never synced."""
        self._fail(why)

    def _end_lost(self, why: str) -> None:
        """End the process with exit code 1, without a drain: its lease may be another's."""
        self._lost = True
        self._fail(why)

    def _fail(self, why: str) -> None:
        """Stop the process with exit code 1 (idempotent; the first reason is logged)."""
        if self._exit_code == 0:
            log.error(f"{why}; stopping")
        self._exit_code = 1
        self.stop_event.set()

    def _freeze_caches(self, scope: Scope) -> None:
        """Freeze the synced caches once every controller of a prepared scope runs.

        Full collections then stop rescanning them. Right after the start (no wait for
        leadership) nothing worth a collection was made since ``freeze_startup()``, and
        skipping it brings the first reconcile closer.
        """
        started = self._started_at
        fresh = started is not None and time.monotonic() - started < FRESH_START_SECONDS
        freeze_caches(collect=not fresh)

    # ------------------------------------------------------------------ run

    def run(self) -> int:
        """Run until :attr:`stop_event` is set; return the process exit code.

        Starts the groups in order (servers, caches, others, leadership), waits for the
        stop request, and stops them in reverse.

        Returns:
            0 after a graceful stop; 1 when a lease that is not restartable was lost (or
            a write found its fence closed), caches never synced, or the shard
            coordinator failed. A lost shard does not end the process.

        Raises:
            Exception: a runnable failed to start (an address that cannot be bound);
                what had started is stopped first.
        """
        log.info(
            "starting",
            leadership=self._source.name,
            controllers={
                name: c.workers for s in self.prepared_scopes() for name, c in s.controllers.items()
            },
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


def _informers_of(scope: Scope) -> Hooks:
    """Return the runnable of a prepared scope's informers (the ``caches`` group)."""
    informers = scope.informers
    return Hooks("shared informers", informers.start, lambda _: informers.shutdown())
