"""A scope: one set of caches and controllers, fenced by one lease, with one life.

As controller-runtime's ``cluster.Cluster`` plus its leader-election runnable group: a
:class:`Scope` holds what a setup function and the :class:`cbop.runtime.Builder` need (a
client to write with, a shared informer factory, the metrics providers) and runs the
controllers they add while its lease is held. One class serves the single leader (the
:class:`cbop.runtime.Manager` itself) and each shard under ``--shards``, so fencing,
starting, draining and losing are written once (:class:`ScopeState`).

Why each controller starts as soon as **its own** informers synced: a controller whose
list is refused (a 403, a missing CRD) then holds back no other. :meth:`Scope.stop`
drains (in-flight reconciles finish, the ``on_drained`` hook flushes Events before the
lease goes back); :meth:`Scope.lose` does not: the lease may be someone else's already.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import Any

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

__all__ = ["Scope", "ScopeState"]

log = structlog.get_logger("cbop.manager")


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
        name_suffix: appended to every controller name built in this scope (``""``
            for the process's only scope).
        shard: the shard the scope serves (None: everything).
        fenced: writes go through the fence handed to :meth:`start` (leader
            election); a write before the scope was started, or once it stopped, is
            refused.
        owns_informers: :meth:`start` starts the informers and :meth:`stop` /
            :meth:`lose` stop them (a shard's scope); False: they belong to the caller.
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
        name_suffix: str = "",
        shard: ShardRange | None = None,
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
        self.name_suffix = name_suffix
        self.shard = shard
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
        label_selector: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        whole: bool = False,
        by_name: bool = False,
        transform: Transform = strip_managed_fields,
        namespaces: Sequence[str | None] | None = None,
    ) -> MultiNamespaceLister:
        """Return a lister over the scope's shared informers of ``resource``.

        See :meth:`cbop.informers.SharedInformerFactory.lister` (``whole``: the whole
        collection even in a shard's scope; ``by_name``: the objects whose own name
        hashes into the shard; ``transform``: what objects go through before they are
        cached, set by the first caller; ``namespaces``: the informers' namespaces when
        not the scope's).
        """
        return self.informers.lister(
            resource,
            label_selector=label_selector,
            indexers=indexers,
            whole=whole,
            by_name=by_name,
            transform=transform,
            namespaces=namespaces,
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
        """Liveness of an active scope: its started workers and its informer threads run."""
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
                return f"{self.describe()}: {name}: {why}"
        return f"{self.describe()}: caches not synced yet"

    @property
    def index(self) -> int:
        """The shard's index (0 for the process's one scope)."""
        return self.shard.index if self.shard is not None else 0

    def describe(self) -> str:
        """Return how logs name the scope: ``shard <range>`` or ``the leader``."""
        return f"shard {self.shard}" if self.shard is not None else "the leader"

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
