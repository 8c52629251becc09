"""Assembles a controller, as controller-runtime's builder: "for this kind, owns that kind".

A second controller takes a few lines::

    Builder(scope, "rollout")
        .for_(DEPLOYMENTS)                                  # its own objects -> their keys
        .owns(CONFIGMAPS, label_selector="app=x")           # dependents -> owner's key
        .watches(CONFIGBUNDLES, map_bundle_to_deployments)  # anything else -> keys
        .with_options(workers=2)
        .complete(reconciler)

:meth:`Builder.complete` creates the controller's workqueue (named after the controller,
with the scope's workqueue metrics), its metric hooks, one event handler per watched
informer (informers come from the scope's shared factory, so a resource watched by two
controllers is listed and watched once), and adds the controller to the scope, which
starts its workers while its lease is held. The reconciler is built beforehand from the
scope's client and listers (:meth:`cbop.runtime.Scope.lister`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cbop.kube import Resource
from cbop.runtime.controller import DEFAULT_WEDGED_AFTER, DEFAULT_WORKERS, Controller
from cbop.runtime.handlers import (
    ConvergedFunc,
    MapFunc,
    enqueue_controller_owner,
    enqueue_object,
)
from cbop.runtime.predicates import Predicate
from cbop.runtime.reconcile import Reconciler
from cbop.runtime.scope import Reads, Scope
from cbop.workqueue import PriorityQueue, RateLimiter, RateLimitingQueue

__all__ = ["Builder"]


@dataclass
class _Watch:
    resource: Resource
    map_func: MapFunc
    label_selector: str | None
    converged: ConvergedFunc | None = None
    predicates: tuple[Predicate, ...] = ()
    reads: Reads = Reads.SHARD
    cache: bool = True


@dataclass
class _Options:
    workers: int = DEFAULT_WORKERS
    priority_queue: bool = True
    rate_limiter: RateLimiter[str] | None = None
    wedged_after: float = DEFAULT_WEDGED_AFTER
    watches: list[_Watch] = field(default_factory=list)


class Builder:
    """Builds one controller and adds it to a scope.

    Args:
        scope: the :class:`cbop.runtime.scope.Scope` that supplies the client, the
            informers and the metrics, and runs the controller while its lease is held.
        name: the controller's name, unique in the scope (logs, metrics labels, the
            workqueue's name); the scope's ``name_suffix`` is appended
            (``configbundle-shard-1``).

    Every method but :meth:`complete` returns the builder, for chaining.
    """

    def __init__(self, scope: Scope, name: str) -> None:
        self._scope = scope
        self._name = name + scope.name_suffix
        self._for: Resource | None = None
        self._options = _Options()

    def for_(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        converged: ConvergedFunc | None = None,
        predicates: Sequence[Predicate] = (),
        reads: Reads = Reads.SHARD,
    ) -> Builder:
        """Reconcile objects of ``resource``: each event enqueues the object's own key.

        Args:
            resource: the kind reconciled.
            label_selector: a server-side label selector for its informer.
            converged: ``fn(obj) -> bool``, whether an object of the initial list
                needs only a look; those it says are not go in at normal priority
                instead of low (see :mod:`cbop.runtime.handlers`). None: all low.
            predicates: events they refuse enqueue nothing
                (:mod:`cbop.runtime.predicates`).
            reads: which of its objects the controller watches (:class:`Reads`: the
                scope's, by default).

        Raises:
            ValueError: called twice.
        """
        if self._for is not None:
            raise ValueError(f"controller {self._name}: for_ was already given {self._for}")
        self._for = resource
        self._options.watches.append(
            _Watch(
                resource,
                enqueue_object,
                label_selector,
                converged=converged,
                predicates=tuple(predicates),
                reads=reads,
            )
        )
        return self

    def owns(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        predicates: Sequence[Predicate] = (),
    ) -> Builder:
        """Watch dependents of ``resource``, mapped to their controller owner's key.

        Each event enqueues the key of the object's controller owner when that owner is
        of the :meth:`for_` kind (group and kind compared, version ignored), unless
        ``predicates`` refuse it.

        Raises:
            ValueError: :meth:`for_` was not called first.
        """
        owner = self._for
        if owner is None:
            raise ValueError(f"controller {self._name}: owns needs for_ first")
        mapper = enqueue_controller_owner(owner.group, owner.kind)
        self._options.watches.append(
            _Watch(resource, mapper, label_selector, predicates=tuple(predicates))
        )
        return self

    def watches(
        self,
        resource: Resource,
        map_func: MapFunc,
        *,
        label_selector: str | None = None,
        predicates: Sequence[Predicate] = (),
        reads: Reads = Reads.SHARD,
        cache: bool = True,
    ) -> Builder:
        """Watch ``resource``: each event ``predicates`` pass enqueues ``map_func``'s keys.

        ``reads``: which of its objects (:class:`Reads`: the scope's, by default).
        ``cache=False``: the controller starts without waiting for this informer to
        sync (see :meth:`cbop.runtime.Controller.watch`).
        """
        self._options.watches.append(
            _Watch(
                resource,
                map_func,
                label_selector,
                predicates=tuple(predicates),
                reads=reads,
                cache=cache,
            )
        )
        return self

    def with_options(
        self,
        *,
        workers: int | None = None,
        priority_queue: bool | None = None,
        rate_limiter: RateLimiter[str] | None = None,
        wedged_after: float | None = None,
    ) -> Builder:
        """Set controller options; ``None`` keeps the current value.

        Args:
            workers: worker threads (default 4).
            priority_queue: a priority workqueue (default; the initial list and resyncs
                go behind real changes, as controller-runtime since v0.23); False: the
                plain rate-limiting queue.
            rate_limiter: the queue's rate limiter (default: client-go's default
                controller rate limiter).
            wedged_after: seconds one reconcile may run before liveness fails (600).
        """
        opts = self._options
        if workers is not None:
            opts.workers = workers
        if priority_queue is not None:
            opts.priority_queue = priority_queue
        if rate_limiter is not None:
            opts.rate_limiter = rate_limiter
        if wedged_after is not None:
            opts.wedged_after = wedged_after
        return self

    def complete(self, reconciler: Reconciler) -> Controller:
        """Create the controller, wire its sources, and add it to the scope.

        Returns:
            The controller (its workers start once the scope's lease is held).

        Raises:
            ValueError: no :meth:`for_`, or a controller of that name already exists.
        """
        if self._for is None:
            raise ValueError(f"controller {self._name}: for_ is required")
        scope = self._scope
        if self._name in scope.controllers:
            raise ValueError(f"a controller named {self._name} already exists")
        opts = self._options
        queue_metrics = scope.queue_metrics
        queue_type = PriorityQueue if opts.priority_queue else RateLimitingQueue
        queue: RateLimitingQueue[str] = queue_type(
            opts.rate_limiter,
            name=self._name if queue_metrics is not None else None,
            metrics_provider=queue_metrics,
        )
        provider = scope.controller_metrics
        controller = Controller(
            self._name,
            reconciler,
            queue=queue,
            workers=opts.workers,
            metrics=provider.new_controller_metrics(self._name) if provider else None,
            wedged_after=opts.wedged_after,
        )
        for watch in opts.watches:
            informers = scope.informers.informers_for(
                watch.resource,
                label_selector=watch.label_selector,
                whole=watch.reads.whole,
                by_name=watch.reads.by_name,
            )
            for informer in informers.values():
                controller.watch(
                    informer,
                    watch.map_func,
                    converged=watch.converged,
                    predicates=watch.predicates,
                    cache=watch.cache,
                )
        scope.add(controller)
        return controller
