"""Running one shard: its own informers, fenced client and controllers (``--shards N``).

With sharding the manager implements the coordinator's ``ShardHandler``
(``cbop.sharding``): each shard this replica acquires gets a :class:`ShardScope`, a
:class:`cbop.runtime.scope.Scope` whose informer factory lists and watches only that
shard's objects, whose client is fenced by that shard's Lease, and whose controllers are
built by the same setup functions as the single leader's. Its life:

- :meth:`ShardScope.start` (on ``acquired``): start the informers; once their caches
  synced, start the workers (a thread waits, so the coordinator is not held up);
- :meth:`ShardScope.release` (on ``release``, a graceful hand-over): stop intake, drop
  the queued keys, let in-flight reconciles finish (bounded), stop the informers, and
  only then return, so the coordinator releases the Lease after the shard's last write;
- :meth:`ShardScope.lose` (on ``lost``, or when a write finds the shard's fence closed):
  stop the workers at once, drop the queues, discard the informers (in the background);
  nothing is drained: the Lease may be someone else's already. The process and its
  other shards carry on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from enum import Enum

import structlog

from cbop.informers import SharedInformerFactory
from cbop.kube import KubeClient
from cbop.runtime.metrics import ControllerMetricsProvider
from cbop.runtime.scope import Scope
from cbop.shardrange import ShardRange
from cbop.workqueue import MetricsProvider

__all__ = ["ScopeState", "ShardScope"]

log = structlog.get_logger("cbop.manager")


class ScopeState(Enum):
    """Where a :class:`ShardScope` is in its life."""

    #: Informers started, caches not synced yet (no worker runs).
    SYNCING = "syncing"
    #: Workers run.
    RUNNING = "running"
    #: Handing over: intake stopped, in-flight reconciles finishing.
    RELEASING = "releasing"
    #: Handed over: workers and informers stopped.
    RELEASED = "released"
    #: Lost: workers stopped at once, queues dropped, informers discarded.
    LOST = "lost"


class ShardScope(Scope):
    """The informers, fenced client and controllers of one held shard.

    Args:
        shard: the shard (index and hash range).
        client: the process's client; the scope writes through ``client.with_fence``.
        fence: the shard's Lease check (True while this replica holds the shard's Lease
            by its own clock); called before every write of the scope.
        informers: the scope's informer factory (created for ``shard``).
        cache_sync_timeout: seconds to wait for the first lists (time while a list is
            refused does not count, as :class:`cbop.runtime.Manager`).
        on_sync_failed: called (on the scope's sync thread) when the caches did not
            sync in time.
        on_fenced_off: called (on the writing worker's thread) when a write found the
            fence closed and so stopped the scope; must not block.
        controller_metrics, queue_metrics: as :class:`cbop.runtime.scope.Scope`.

    Controller names get the suffix ``-shard-<index>``.
    """

    def __init__(
        self,
        shard: ShardRange,
        *,
        client: KubeClient,
        fence: Callable[[], bool],
        informers: SharedInformerFactory,
        cache_sync_timeout: float,
        on_sync_failed: Callable[[ShardScope], object],
        on_fenced_off: Callable[[ShardScope], object] | None = None,
        controller_metrics: ControllerMetricsProvider | None = None,
        queue_metrics: MetricsProvider | None = None,
    ) -> None:
        super().__init__(
            client.with_fence(self._fence),
            informers=informers,
            controller_metrics=controller_metrics,
            queue_metrics=queue_metrics,
            name_suffix=f"-shard-{shard.index}",
        )
        self.shard = shard
        self._shard_fence = fence
        self._cache_sync_timeout = cache_sync_timeout
        self._on_sync_failed = on_sync_failed
        self._on_fenced_off = on_fenced_off
        self._lock = threading.Lock()
        self._state = ScopeState.SYNCING
        # Set when the scope stops for good (release or loss): no worker starts after.
        self._stop = threading.Event()
        self._sync_thread: threading.Thread | None = None

    @property
    def state(self) -> ScopeState:
        """The scope's current :class:`ScopeState`."""
        return self._state

    @property
    def active(self) -> bool:
        """Whether the scope is syncing or running (neither stopping nor stopped)."""
        return self._state in (ScopeState.SYNCING, ScopeState.RUNNING)

    def _fence(self) -> bool:
        """Return whether a write may be sent: the shard's Lease check (:attr:`client`'s fence).

        The first False while the scope is active also loses the shard (:meth:`lose`):
        a write that finds the fence closed means the Lease may be someone else's.
        """
        if self._shard_fence():
            return True
        if self.lose("a write found the shard lease no longer valid") and self._on_fenced_off:
            self._on_fenced_off(self)
        return False

    def start(self) -> None:
        """Start the informers; start the workers once the caches synced (on a thread)."""
        log.info("shard acquired; starting its informers", shard=str(self.shard))
        self.informers.start()
        self._sync_thread = threading.Thread(
            target=self._start_workers_once_synced,
            name=f"cbop-shard-{self.shard.index}-sync",
            daemon=True,
        )
        self._sync_thread.start()

    def _start_workers_once_synced(self) -> None:
        synced = self.informers.wait_for_cache_sync(
            self._cache_sync_timeout, stop=self._stop, wait_out_refusals=True
        )
        with self._lock:
            if self._stop.is_set():
                return
            if synced:
                # No gcpolicy.freeze_caches() here, unlike the single leader: a scope
                # refers to itself (its client's fence), and a frozen cycle is never
                # collected, so every shard handed over would keep its caches alive.
                for controller in self.controllers.values():
                    controller.start()
                self._state = ScopeState.RUNNING
        if synced:
            log.info("shard caches synced; workers started", shard=str(self.shard))
            return
        log.error(
            "shard caches did not sync in time",
            shard=str(self.shard),
            timeout=self._cache_sync_timeout,
        )
        self._on_sync_failed(self)

    def synced(self) -> bool:
        """Whether the workers run (the caches synced)."""
        return self._state is ScopeState.RUNNING

    def release(self, timeout: float) -> bool:
        """Hand the shard over: stop intake, drain in-flight reconciles, stop the informers.

        Args:
            timeout: seconds the reconciles in flight get to finish.

        Returns:
            True when every worker finished in time. Blocks up to ``timeout`` plus the
            informers' stop; a scope already lost returns False at once.
        """
        with self._lock:
            if not self.active:
                return self._state is ScopeState.RELEASED
            self._stop.set()
            for controller in self.controllers.values():
                controller.stop_workers()  # intake stops before the state says so
            self._state = ScopeState.RELEASING
        log.info("releasing shard; draining in-flight reconciles", shard=str(self.shard))
        drained = self.shutdown_controllers(timeout)
        if not drained:
            log.warning(
                "shard reconciles still running at the shutdown timeout", shard=str(self.shard)
            )
        self.informers.shutdown()
        with self._lock:
            self._state = ScopeState.RELEASED
        log.info("shard released", shard=str(self.shard))
        return drained

    def lose(self, why: str) -> bool:
        """Stop at once: no drain, queues dropped, informers discarded in the background.

        Returns immediately (any thread, also a worker's): True when this call stopped
        the scope. Idempotent; does nothing to a scope that is releasing or released (a
        graceful hand-over closes the fence on purpose once it is done).
        """
        with self._lock:
            if not self.active:
                return False
            self._stop.set()
            for controller in self.controllers.values():
                controller.stop_workers()
            self._state = ScopeState.LOST
        log.error(f"{why}; stopping the shard at once", shard=str(self.shard))
        threading.Thread(
            target=self.informers.shutdown,
            name=f"cbop-shard-{self.shard.index}-discard",
            daemon=True,
        ).start()
        return True

    def healthy(self) -> bool:
        """Liveness of an active scope: its workers and informer threads run."""
        if not self.active:
            return True
        return all(c.healthy() for c in self.controllers.values()) and self.informers.alive()

    def not_ready(self) -> str | None:
        """Return why the scope is not ready (first lists not done, a refusal), or None."""
        if self.synced():
            return None
        for name, check in self.informers.readiness_checks().items():
            why = check()
            if why is not None:
                return f"shard {self.shard}: {name}: {why}"
        return f"shard {self.shard}: caches not synced yet"
