"""Where leadership comes from: the runnables that acquire, release and lose scopes.

Every way cbop runs gets its scopes from one of three leadership sources, each a
runnable of the manager's ``leader-election`` group that tells the manager
(:class:`ScopeHandler`) which :class:`cbop.runtime.scope.ScopeSpec` it acquired, must
release, or lost: :class:`Unelected` (no ``--leader-elect``), :class:`SingleLeader` (one
elector, one Lease, every namespace) and :class:`Coordinated` (``--shards N``: a spec
per shard the coordinator holds). Only the specs differ; the manager's lifecycle of a
scope is the same for all three.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog

from cbop.clock import RealClock
from cbop.kube import KubeInterface
from cbop.leaderelection import NO_METRICS, LeaderElector, LeaderMetrics
from cbop.runtime.scope import EVERYTHING, ScopeSpec
from cbop.sharding import ShardedGroupCheck, ShardHandler
from cbop.shardrange import ShardRange
from cbop.stop import StopSignal

__all__ = [
    "Coordinated",
    "Coordinator",
    "LeaderElection",
    "LeadershipSource",
    "ScopeHandler",
    "Sharding",
    "SingleLeader",
    "Unelected",
    "leadership_source",
]

log = structlog.get_logger("cbop.manager")

#: A readiness check: None when ready, else one line saying why not.
Check = Callable[[], str | None]


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
    """Sharded operation (``--shards N``, N > 1): where the scope specs come from.

    Attributes:
        shards: the number of shards (N >= 2).
        coordinator: returns the coordinator that calls the given shard handler as it
            acquires, releases and loses shards; its ``run`` is called once.
    """

    shards: int
    coordinator: Callable[[ShardHandler], Coordinator]


class ScopeHandler(Protocol):
    """What a leadership source tells the process (the manager)."""

    def acquired(self, spec: ScopeSpec, fence: Callable[[], bool] | None) -> None:
        """Start the scope of ``spec``; ``fence`` (None: open) guards its writes."""
        ...

    def release(self, spec: ScopeSpec) -> None:
        """Hand the scope of ``spec`` over gracefully; return once its work drained."""
        ...

    def lost(self, spec: ScopeSpec) -> None:
        """Stop the scope of ``spec`` at once: its lease is gone."""
        ...


class LeadershipSource(Protocol):
    """A runnable of the ``leader-election`` group that acquires and releases scopes.

    Attributes:
        name: what logs call it.
        prepared: the specs whose scopes the manager builds while wiring, with the
            process's informers (started with the process, so a standby keeps warm
            caches); scopes of other specs are built when acquired, with informers of
            their own.
    """

    name: str
    prepared: tuple[ScopeSpec, ...]

    def start(self) -> None:
        """Start taking part (threads); return at once."""
        ...

    def stop(self, timeout: float) -> None:
        """Release every held scope (drained), then hand the leases back."""
        ...

    def healthy(self) -> bool:
        """Liveness of the source itself (its threads run)."""
        ...

    def readiness_checks(self, scopes_ready: Check) -> dict[str, Check]:
        """Return the source's ``/readyz`` checks; ``scopes_ready`` covers the held scopes."""
        ...


class Coordinator(Protocol):
    """What :class:`Coordinated` runs (``cbop.sharding.ShardCoordinator``)."""

    def run(self, stop: StopSignal) -> None:
        """Hold shards until ``stop`` is set; then release every held shard and return."""
        ...


class Unelected:
    """No leader election: the one scope is acquired at start and released on stop.

    Args:
        handler: the manager.
    """

    name = "no leader election"
    prepared: tuple[ScopeSpec, ...] = (EVERYTHING,)

    def __init__(self, handler: ScopeHandler) -> None:
        self._handler = handler

    def start(self) -> None:
        """Acquire the process's scope, with an open fence."""
        self._handler.acquired(EVERYTHING, None)

    def stop(self, timeout: float) -> None:
        """Release the process's scope (the handler bounds the drain)."""
        self._handler.release(EVERYTHING)

    def healthy(self) -> bool:
        """Return True: nothing of its own runs."""
        return True

    def readiness_checks(self, scopes_ready: Check) -> dict[str, Check]:
        """None of its own: the process's informers have theirs."""
        return {}


class SingleLeader:
    """The single leader: one elector on one Lease, leading the process's one scope.

    Args:
        handler: the manager.
        elector: builds the elector from its two callbacks, ``on_started_leading`` and
            ``on_stopped_leading`` (see :class:`cbop.leaderelection.LeaderElector`).
        join_timeout: seconds :meth:`stop` waits for the elector's thread after asking
            it to release the Lease (its renew deadline).
    """

    name = "leader election"
    prepared: tuple[ScopeSpec, ...] = (EVERYTHING,)

    def __init__(
        self,
        handler: ScopeHandler,
        elector: Callable[[Callable[[], None], Callable[[], None]], LeaderElector],
        *,
        join_timeout: float,
    ) -> None:
        self._handler = handler
        self.elector = elector(self._started_leading, self._stopped_leading)
        self._join_timeout = join_timeout
        self._stop = StopSignal()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Run the elector on its own thread."""
        self._thread = threading.Thread(
            target=self.elector.run, args=(self._stop,), name="cbop-leader-election", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Release the scope (drained), then have the elector hand the Lease back."""
        self._stopping = True
        if self.elector.is_leader():
            self._handler.release(EVERYTHING)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._join_timeout)

    def healthy(self) -> bool:
        """Return True: the elector's thread is no liveness check.

        A dead one renews nothing, and the first write through the closed fence ends
        the process.
        """
        return True

    def readiness_checks(self, scopes_ready: Check) -> dict[str, Check]:
        """None of its own: the process's informers have theirs."""
        return {}

    def _started_leading(self) -> None:
        log.info("became leader; starting workers", identity=self.elector.identity)
        self._handler.acquired(EVERYTHING, self.elector.holds_lease)

    def _stopped_leading(self) -> None:
        if self._stopping:
            return  # released on request, after the scope drained
        self._handler.lost(EVERYTHING)


class Coordinated:
    """Sharded: the shard coordinator on its own thread, a scope spec per shard it holds.

    It is the coordinator's :class:`cbop.sharding.ShardHandler`: each shard acquired,
    released or lost is passed on to the manager as :meth:`ScopeSpec.of_shard`.

    Args:
        handler: the manager.
        coordinator: builds the coordinator from its shard handler (this object).
        on_failed: ``fn(why)``, called when the coordinator raised (it stopped).
        join_timeout: seconds :meth:`stop` waits for it to release every held shard.
    """

    name = "shard coordinator"
    prepared: tuple[ScopeSpec, ...] = ()

    def __init__(
        self,
        handler: ScopeHandler,
        coordinator: Callable[[ShardHandler], Coordinator],
        *,
        on_failed: Callable[[str], object],
        join_timeout: float,
    ) -> None:
        self._handler = handler
        self._coordinator = coordinator(self)
        self._on_failed = on_failed
        self._join_timeout = join_timeout
        self._stop = StopSignal()
        self.thread: threading.Thread | None = None

    def acquired(self, shard: ShardRange, fence: Callable[[], bool]) -> None:
        """Start the shard's scope (the coordinator's thread; returns at once)."""
        self._handler.acquired(ScopeSpec.of_shard(shard), fence)

    def release(self, shard: ShardRange) -> None:
        """Drain the shard's scope; its Lease goes back after this returns."""
        self._handler.release(ScopeSpec.of_shard(shard))

    def lost(self, shard: ShardRange) -> None:
        """Stop the shard's scope at once."""
        self._handler.lost(ScopeSpec.of_shard(shard))

    def start(self) -> None:
        """Run the coordinator on its own thread."""
        self.thread = threading.Thread(
            target=self._coordinate, name="cbop-shard-coordinator", daemon=True
        )
        self.thread.start()

    def _coordinate(self) -> None:
        try:
            self._coordinator.run(self._stop)
        except Exception:
            log.exception("the shard coordinator failed")
            self._on_failed("the shard coordinator failed")

    def stop(self, timeout: float) -> None:
        """Have the coordinator release every held shard (drained) and hand their Leases back."""
        self._stop.set()
        if self.thread is not None:
            self.thread.join(self._join_timeout)

    def running(self) -> bool:
        """Whether the coordinator's thread runs (or was never started)."""
        return self.thread is None or self.thread.is_alive()

    def healthy(self) -> bool:
        """Whether the coordinator's thread runs (or was never started)."""
        return self.running()

    def readiness_checks(self, scopes_ready: Check) -> dict[str, Check]:
        """``shards``: the coordinator runs and every held shard's caches synced.

        A replica that holds no shard is ready: it is a standby.
        """

        def shards() -> str | None:
            if self.thread is None or not self.running():
                return "the shard coordinator is not running"
            return scopes_ready()

        return {"shards": shards}


def leadership_source(
    handler: ScopeHandler,
    client: KubeInterface,
    *,
    identity: str,
    election: LeaderElection | None,
    metrics: LeaderMetrics | None,
    sharding: Sharding | None,
    shutdown_timeout: float,
    on_failed: Callable[[str], object],
) -> LeadershipSource:
    """Return where ``handler``'s scopes come from: no election, the single leader, or shards.

    Raises:
        ValueError: ``sharding`` without ``election``; leader-election timings that
            break lease duration > renew deadline > 1.2 x retry period.
    """
    if election is None:
        if sharding is not None:
            raise ValueError("sharding needs leader election")
        return Unelected(handler)
    if sharding is not None:
        # Each held shard: its drain, then its elector's Lease release (bounded by the
        # coordinator to a lease duration).
        per_shard = shutdown_timeout + election.lease_duration
        return Coordinated(
            handler,
            sharding.coordinator,
            on_failed=on_failed,
            join_timeout=per_shard * sharding.shards,
        )
    return SingleLeader(
        handler,
        lambda started, stopped: _elector(client, election, identity, metrics, started, stopped),
        join_timeout=election.renew_deadline,
    )


def _elector(  # noqa: PLR0917 - private
    client: KubeInterface,
    election: LeaderElection,
    identity: str,
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
        identity=identity,
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
