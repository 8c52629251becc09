"""A scope: one set of caches and controllers, fenced by one lease, with one life.

As controller-runtime's ``cluster.Cluster`` plus its leader-election runnable group: a
:class:`Scope` holds what a setup function and the :class:`cbop.runtime.Builder` need (a
client to write with, a shared informer factory, the metrics providers) and runs the
controllers they add while its lease is held. What it serves is its :class:`ScopeSpec`
(every namespace for an unsharded process, a shard's slice under ``--shards``), so
fencing, starting, draining and losing are written once (:class:`ScopeState`).

Why each controller starts as soon as **its own** informers synced: a controller whose
list is refused (a 403, a missing CRD) then holds back no other. :meth:`Scope.stop`
drains (in-flight reconciles finish, the ``on_drained`` hook flushes Events before the
lease goes back); :meth:`Scope.lose` does not: the lease may be someone else's already.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

import structlog

from cbop.informers import (
    IndexFunc,
    MultiNamespaceLister,
    SharedInformerFactory,
    Transform,
    strip_managed_fields,
)
from cbop.kube import KubeInterface, Resource
from cbop.runtime.controller import Controller
from cbop.runtime.metrics import ControllerMetricsProvider
from cbop.shardrange import ShardRange
from cbop.stop import StopSignal
from cbop.workqueue import MetricsProvider

__all__ = ["EVERYTHING", "Reads", "Scope", "ScopeSpec", "ScopeState"]

log = structlog.get_logger("cbop.manager")


class Reads(Enum):
    """Which objects of a resource a controller reads in a scope, declared with the resource.

    The same declaration holds in every scope: in the scope of every namespace all
    three read the whole collection.
    """

    #: The objects in the namespaces the scope serves (a shard's only, listed and
    #: watched with the API server's ``shardSelector``).
    SHARD = "shard"
    #: The objects whose own *name* hashes into the scope's range (a shard's Namespace
    #: objects; filtered client-side).
    SHARD_BY_NAME = "shard-by-name"
    #: The whole collection, whatever the scope serves (the ClusterConfigBundles, what
    #: the status writer must see of every shard); not counted as the scope's objects.
    CLUSTER = "cluster"

    @property
    def whole(self) -> bool:
        """``whole`` of :meth:`cbop.informers.SharedInformerFactory.informers_for`."""
        return self is Reads.CLUSTER

    @property
    def by_name(self) -> bool:
        """``by_name`` of :meth:`cbop.informers.SharedInformerFactory.informers_for`."""
        return self is Reads.SHARD_BY_NAME


@dataclass(frozen=True)
class ScopeSpec:
    """What a scope serves, as a leadership source hands it to the manager.

    Attributes:
        shard: the range of the namespace hash space it serves (``ShardRange.of(0, 1)``:
            every namespace); its informers hold that range only.
        name: ``""`` for the process's one scope; ``shard-<i>`` for a shard's, appended
            to its controllers' names (``configbundle-shard-1``) and to its informers'
            names in metrics (``configbundles/*@shard-1``), so several scopes can run at
            once in one process.
        restartable: a lost scope leaves the process running, and one lost because a
            write found its fence closed starts anew once the fence reopens (a shard:
            its coordinator acquires it again later). False: a loss ends the process
            with exit code 1 (the single leader, whose elector campaigns once: a
            restarted pod is a candidate again).
    """

    shard: ShardRange
    name: str = ""
    restartable: bool = False

    @classmethod
    def of_shard(cls, shard: ShardRange) -> ScopeSpec:
        """Return the spec of a shard held through a shard coordinator."""
        return cls(shard, name=f"shard-{shard.index}", restartable=True)

    @property
    def index(self) -> int:
        """The shard's index in its group (0 for the process's one scope)."""
        return self.shard.index

    @property
    def hosts_once(self) -> bool:
        """Whether the controllers a group runs once (one status writer) run here.

        They run in the scope of the group's first shard, fenced by its lease: the
        process's one scope unsharded, shard 0's under ``--shards``.
        """
        return self.shard.index == 0

    @property
    def controller_suffix(self) -> str:
        """What the scope's controller names end in: ``-shard-1``, or nothing."""
        return f"-{self.name}" if self.name else ""

    @property
    def informer_suffix(self) -> str:
        """What its informers' names end in in metrics: ``@shard-1``, or nothing."""
        return f"@{self.name}" if self.name else ""

    def describe(self) -> str:
        """Return how logs name the scope: ``shard <range>`` or ``the leader``."""
        return f"shard {self.shard}" if self.name else "the leader"


#: The scope of an unsharded process: every namespace, and a loss ends the process.
EVERYTHING: Final = ScopeSpec(ShardRange.of(0, 1))


class ScopeState(Enum):
    """Where a :class:`Scope` is in its life."""

    #: Built (controllers may be added); not started.
    IDLE = "idle"
    #: Started: informers run, some controllers wait for their caches.
    SYNCING = "syncing"
    #: Every controller's workers run.
    RUNNING = "running"
    #: Handing over: intake stopped, in-flight reconciles finishing.
    RELEASING = "releasing"
    #: Handed over: workers stopped, owned informers stopped.
    RELEASED = "released"
    #: Lost: workers stopped at once, queues dropped, owned informers discarded.
    LOST = "lost"


class Scope:
    """A client, an informer factory, metrics providers, controllers, and their life.

    Args:
        client: the process's client; the scope writes through ``client.with_fence``
            when ``fenced``, else through ``client`` itself.
        informers: the shared informer factory the scope's controllers read from.
        controller_metrics: creates each controller's metric hooks (optional).
        queue_metrics: the workqueues' metrics provider (optional; unnamed queues
            without it).
        spec: what the scope serves (default: every namespace, :data:`EVERYTHING`).
        fenced: writes go through the fence handed to :meth:`start` (leader
            election); a write before the scope was started, or once it stopped, is
            refused.
        owns_informers: :meth:`start` starts the informers and :meth:`stop` /
            :meth:`lose` stop them (a scope built when its lease was acquired); False:
            they belong to the caller (the process's, started with it so that a
            standby keeps warm caches).
        cache_sync_timeout: seconds a controller waits for its informers' first lists;
            time while a list is refused (CRD not installed, 403) does not count: that
            is waited out.
        on_failed: ``fn(scope, why)``, called (on a scope thread) when a controller's
            caches did not sync in time.
        on_fenced_off: ``fn(scope)``, called (on the writing worker's thread) when a
            write found the fence closed and so lost the scope; must not block.
        on_running: ``fn(scope)``, called once every controller's workers run.
    """

    def __init__(
        self,
        client: KubeInterface,
        *,
        informers: SharedInformerFactory,
        controller_metrics: ControllerMetricsProvider | None = None,
        queue_metrics: MetricsProvider | None = None,
        spec: ScopeSpec = EVERYTHING,
        fenced: bool = False,
        owns_informers: bool = False,
        cache_sync_timeout: float = 120.0,
        on_failed: Callable[[Scope, str], object] | None = None,
        on_fenced_off: Callable[[Scope], object] | None = None,
        on_running: Callable[[Scope], object] | None = None,
    ) -> None:
        #: The client reconcilers write with (fenced when the scope is).
        self.client = client.with_fence(self._fence) if fenced else client
        self.informers = informers
        self.controller_metrics = controller_metrics
        self.queue_metrics = queue_metrics
        self.spec = spec
        self.controllers: dict[str, Controller] = {}
        self.cache_sync_timeout = cache_sync_timeout
        self._owns_informers = owns_informers
        self._on_failed = on_failed
        self._on_fenced_off = on_fenced_off
        self._on_running = on_running
        self._lock = threading.Lock()
        self._state = ScopeState.IDLE
        self._lease_fence: Callable[[], bool] = _closed
        # Set when the scope stops for good (release or loss): no worker starts after.
        self._stop = StopSignal()
        self._started: set[str] = set()

    # ------------------------------------------------------------------ wiring

    def lister(
        self,
        resource: Resource,
        *,
        reads: Reads = Reads.SHARD,
        label_selector: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        transform: Transform = strip_managed_fields,
    ) -> MultiNamespaceLister:
        """Return a lister over the scope's shared informers of ``resource``.

        ``reads``: which of its objects (:class:`Reads`); see
        :meth:`cbop.informers.SharedInformerFactory.lister` for the rest
        (``transform``: what objects go through before they are cached, set by the
        first caller).
        """
        return self.informers.lister(
            resource,
            label_selector=label_selector,
            indexers=indexers,
            whole=reads.whole,
            by_name=reads.by_name,
            transform=transform,
        )

    def add(self, controller: Controller) -> None:
        """Run ``controller``'s workers with the scope (:class:`cbop.runtime.Builder` calls it).

        Raises:
            ValueError: a controller of the same name was added already.
        """
        if controller.name in self.controllers:
            raise ValueError(f"a controller named {controller.name} already exists")
        self.controllers[controller.name] = controller

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> ScopeState:
        """The scope's current :class:`ScopeState`."""
        return self._state

    @property
    def active(self) -> bool:
        """Whether the scope is syncing or running (neither stopping nor stopped)."""
        return self._state in (ScopeState.SYNCING, ScopeState.RUNNING)

    @property
    def lease_fence(self) -> Callable[[], bool]:
        """The lease check handed to :meth:`start` (closed before it; open if None)."""
        return self._lease_fence

    def synced(self) -> bool:
        """Whether every controller's workers run (each one's caches synced)."""
        return self._state is ScopeState.RUNNING

    def _fence(self) -> bool:
        """Return whether a write may be sent (:attr:`client`'s fence): the lease check.

        The first False while the scope is active also loses it (:meth:`lose`): a write
        that finds the fence closed means the lease may be someone else's.
        """
        if self._lease_fence():
            return True
        if self.lose("a write found the lease no longer valid") and self._on_fenced_off:
            self._on_fenced_off(self)
        return False

    # ------------------------------------------------------------------ life

    def start(self, fence: Callable[[], bool] | None = None) -> None:
        """Start: the owned informers now, each controller once its own caches synced.

        Args:
            fence: the lease check guarding every write of a fenced scope (True while
                the lease is held by this process's clock). None: always open.

        Returns at once; one thread per controller waits for its caches.

        Raises:
            RuntimeError: the scope was started before.
        """
        with self._lock:
            if self._state is not ScopeState.IDLE:
                raise RuntimeError(f"scope {self.describe()} was started before")
            self._lease_fence = fence if fence is not None else _open
            self._state = ScopeState.SYNCING
        if self._owns_informers:
            self.informers.start()
        if not self.controllers:
            self._controller_started(None)
        for controller in list(self.controllers.values()):
            threading.Thread(
                target=self._start_once_synced,
                args=(controller,),
                name=f"{controller.name}-sync",
                daemon=True,
            ).start()

    def _start_once_synced(self, controller: Controller) -> None:
        synced = self.informers.wait_for_cache_sync(
            self.cache_sync_timeout,
            stop=self._stop,
            wait_out_refusals=True,
            informers=controller.informers,
        )
        if not synced:
            if self._stop.is_set():
                return
            why = f"the caches of controller {controller.name} did not sync in time"
            log.error(why, timeout=self.cache_sync_timeout)
            if self._on_failed is not None:
                self._on_failed(self, why)
            return
        # The last controller to sync makes the scope RUNNING, and on_running (the
        # caches frozen for the collector) runs before its workers take a key.
        self._controller_started(controller)
        with self._lock:
            if self._stop.is_set():
                return
            controller.start()
        log.info("caches synced; workers started", controller=controller.name)

    def _controller_started(self, controller: Controller | None) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            if controller is not None:
                self._started.add(controller.name)
            if self._state is not ScopeState.SYNCING or self._started != set(self.controllers):
                return
            self._state = ScopeState.RUNNING
        if self._on_running is not None:
            self._on_running(self)

    def stop(self, timeout: float, on_drained: Callable[[float], object] | None = None) -> bool:
        """Hand over: stop intake, drain in-flight reconciles, stop the owned informers.

        Args:
            timeout: seconds the reconciles in flight get to finish.
            on_drained: ``fn(seconds)``, run once the workers stopped and before the
                informers stop (the Event sink's flush: the lease is still held).

        Returns:
            True when every worker finished in time. Blocks up to ``timeout`` plus the
            hook and the informers' stop; a scope already lost returns False at once.
        """
        with self._lock:
            if not self.active and self._state is not ScopeState.IDLE:
                return self._state is ScopeState.RELEASED
            self._stop.set()
            for controller in self.controllers.values():
                controller.stop_workers()  # intake stops before the state says so
            self._state = ScopeState.RELEASING
        log.info("releasing; draining in-flight reconciles", scope=self.describe())
        drained = self.shutdown_controllers(timeout)
        if not drained:
            log.warning("reconciles still running at the shutdown timeout", scope=self.describe())
        if on_drained is not None:
            on_drained(min(1.0, timeout))
        if self._owns_informers:
            self.informers.shutdown()
        with self._lock:
            self._state = ScopeState.RELEASED
        log.info("released", scope=self.describe())
        return drained

    def lose(self, why: str) -> bool:
        """Stop at once: no drain, queues dropped, owned informers discarded.

        Returns immediately (any thread, also a worker's): True when this call stopped
        the scope. Idempotent; does nothing to a scope that is releasing or released (a
        graceful hand-over closes the fence on purpose once it is done) or not started.
        """
        with self._lock:
            if not self.active:
                return False
            self._stop.set()
            for controller in self.controllers.values():
                controller.stop_workers()
            self._state = ScopeState.LOST
        log.error(f"{why}; stopping at once", scope=self.describe())
        if self._owns_informers:
            threading.Thread(
                target=self.informers.shutdown, name=f"{self.describe()}-discard", daemon=True
            ).start()
        return True

    def shutdown_controllers(self, timeout: float) -> bool:
        """Stop all intake, then give all in-flight reconciles one ``timeout`` (seconds).

        Returns:
            Whether every worker finished in time.
        """
        controllers = list(self.controllers.values())
        for controller in controllers:
            controller.stop_workers()
        deadline = time.monotonic() + timeout
        finished = True
        for controller in controllers:
            remaining = max(0.0, deadline - time.monotonic())
            finished = controller.shutdown(remaining) and finished
        return finished

    # ------------------------------------------------------------------ health

    def healthy(self) -> bool:
        """Liveness: its started workers and its informer threads run.

        Informers the scope owns count only while it is active (it stops them when it
        stops); the process's informers count always: they run with the process.
        """
        if self._owns_informers and not self.active:
            return True
        return all(c.healthy() for c in self.controllers.values()) and self.informers.alive()

    def not_ready(self) -> str | None:
        """Return why the scope is not ready (first lists not done, a refusal), or None."""
        if self.synced():
            return None
        for name, check in self.informers.readiness_checks().items():
            why = check()
            if why is not None:
                return f"{self.describe()}: {name}: {why}"
        return f"{self.describe()}: caches not synced yet"

    @property
    def shard(self) -> ShardRange:
        """The range of the namespace hash space the scope serves (:attr:`ScopeSpec.shard`)."""
        return self.spec.shard

    @property
    def index(self) -> int:
        """The shard's index (0 for the process's one scope)."""
        return self.spec.index

    @property
    def name_suffix(self) -> str:
        """What the names of the controllers built in this scope end in (``-shard-1``)."""
        return self.spec.controller_suffix

    @property
    def owns_informers(self) -> bool:
        """Whether the scope starts and stops its informers (else the process does)."""
        return self._owns_informers

    def describe(self) -> str:
        """Return how logs name the scope: ``shard <range>`` or ``the leader``."""
        return self.spec.describe()

    # ------------------------------------------------------------------ readers

    def cached(self, resource: Resource) -> list[Mapping[str, Any]]:
        """Return the objects of ``resource`` in the scope's caches, each once.

        Reads the informers handed out so far (never creates one), for per-process
        readers such as metrics collectors.
        """
        found: dict[str, Mapping[str, Any]] = {}
        for informer in self.informers.informers:
            if informer.resource == resource:
                found.update(informer.indexer().items())
        return list(found.values())

    def object_counts(self) -> dict[str, int]:
        """Return resource plural -> objects cached by the scope's informers.

        Objects cached by two informers of one resource (two label selectors) count
        once; ``whole`` informers (not the shard's own objects) are left out. Read at
        scrape time (``cbop_shard_objects``).
        """
        keys: dict[str, set[str]] = {}
        for informer in self.informers.informers:
            if self.informers.is_whole(informer):
                continue  # not the shard's own objects
            keys.setdefault(informer.resource.plural, set()).update(informer.indexer().list_keys())
        return {plural: len(found) for plural, found in keys.items()}


def _open() -> bool:
    """Let every write through: the fence of a scope without leader election."""
    return True


def _closed() -> bool:
    """Refuse every write: the fence of a scope not started yet."""
    return False
