"""Where leadership comes from: the runnables that acquire, release and lose scopes.

Every way cbop runs gets its scopes from one of three leadership sources, each a
:class:`cbop.runtime.runnable.Runnable` of the manager's ``leader-election`` group
that tells a :class:`ScopeHandler` (the manager) when a scope's lease is acquired, must
be released, or was lost, exactly as the shard coordinator
(:class:`cbop.sharding.ShardCoordinator`) tells it about shards:

- :class:`Unelected` (no ``--leader-elect``): the process's one scope is acquired at
  start, with an open fence, and released on stop;
- :class:`SingleLeader` (``--leader-elect``): one :class:`cbop.leaderelection.LeaderElector`
  on the Lease ``<id>``; leading acquires the process's scope with the elector's
  ``holds_lease`` as its fence, a lost lease loses it, and on stop the scope is
  released (drained) *before* the elector hands the Lease back;
- :class:`Coordinated` (``--shards N``): a shard coordinator on its own thread, which
  acquires, releases and loses one scope per shard.

The single leader is thereby the one-shard case of the shard machinery: a scope
started once synced, fenced by a lease, drained on release and stopped at once when
lost, whatever the source.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

import structlog

from cbop.leaderelection import LeaderElector
from cbop.shardrange import ShardRange
from cbop.stop import StopSignal

__all__ = ["Coordinated", "Coordinator", "ScopeHandler", "SingleLeader", "Unelected"]

log = structlog.get_logger("cbop.manager")


class ScopeHandler(Protocol):
    """What a leadership source tells the process (``cbop.sharding.ShardHandler``'s shape).

    ``shard`` is None for the process's one scope (no sharding).
    """

    def acquired(self, shard: ShardRange | None, fence: Callable[[], bool] | None) -> None:
        """Start the scope of ``shard``; ``fence`` (None: open) guards its writes."""
        ...

    def release(self, shard: ShardRange | None) -> None:
        """Hand the scope of ``shard`` over gracefully; return once its work drained."""
        ...

    def lost(self, shard: ShardRange | None) -> None:
        """Stop the scope of ``shard`` at once: its lease is gone."""
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

    def __init__(self, handler: ScopeHandler) -> None:
        self._handler = handler

    def start(self) -> None:
        """Acquire the process's scope, with an open fence."""
        self._handler.acquired(None, None)

    def stop(self, timeout: float) -> None:
        """Release the process's scope (the handler bounds the drain)."""
        self._handler.release(None)


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
            self._handler.release(None)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._join_timeout)

    def _started_leading(self) -> None:
        log.info("became leader; starting workers", identity=self.elector.identity)
        self._handler.acquired(None, self.elector.holds_lease)

    def _stopped_leading(self) -> None:
        if self._stopping:
            return  # released on request, after the scope drained
        self._handler.lost(None)


class Coordinated:
    """Sharded: the shard coordinator on its own thread.

    Args:
        coordinator: the coordinator; it calls the manager as it acquires, releases and
            loses shards.
        on_failed: ``fn(why)``, called when the coordinator raised (it stopped).
        join_timeout: seconds :meth:`stop` waits for it to release every held shard.
    """

    name = "shard coordinator"

    def __init__(
        self,
        coordinator: Coordinator,
        *,
        on_failed: Callable[[str], object],
        join_timeout: float,
    ) -> None:
        self._coordinator = coordinator
        self._on_failed = on_failed
        self._join_timeout = join_timeout
        self._stop = StopSignal()
        self.thread: threading.Thread | None = None

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
