"""A scope: what controllers are set up against (client, informers, metrics, controllers).

As controller-runtime's ``cluster.Cluster`` beside its Manager: a setup function
(``cbop.configbundle.controller.setup``, ...) and the :class:`cbop.runtime.Builder`
need a client to write with, a shared informer factory to read from, the metrics
providers, and somewhere to add the controllers they build. A :class:`Scope` holds
exactly that. The :class:`cbop.runtime.Manager` is the scope of a single-leader process;
with ``--shards`` every held shard gets a scope of its own
(:class:`cbop.runtime.shards.ShardScope`) whose informers hold only that shard's objects
and whose client is fenced by that shard's Lease.

Controller names are unique within a scope; :attr:`Scope.name_suffix` keeps them (and
so the workqueue ``name`` and ``controller`` metric labels) unique in the process when
several scopes run at once (``configbundle-shard-1``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from cbop.informers import IndexFunc, MultiNamespaceLister, SharedInformerFactory
from cbop.kube import KubeClient, Resource
from cbop.runtime.controller import Controller
from cbop.runtime.metrics import ControllerMetricsProvider
from cbop.workqueue import MetricsProvider

__all__ = ["Scope"]


class Scope:
    """A client, an informer factory, metrics providers and the controllers built on them.

    Args:
        client: the client reconcilers write with (fenced as the scope requires).
        informers: the shared informer factory the scope's controllers read from.
        controller_metrics: creates each controller's metric hooks (optional).
        queue_metrics: the workqueues' metrics provider (optional; unnamed queues
            without it).
        name_suffix: appended to every controller name built in this scope (``""``
            for the process's only scope).
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        informers: SharedInformerFactory,
        controller_metrics: ControllerMetricsProvider | None = None,
        queue_metrics: MetricsProvider | None = None,
        name_suffix: str = "",
    ) -> None:
        #: The client reconcilers write with.
        self.client = client
        self.informers = informers
        self.controller_metrics = controller_metrics
        self.queue_metrics = queue_metrics
        self.name_suffix = name_suffix
        self.controllers: dict[str, Controller] = {}

    def lister(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
    ) -> MultiNamespaceLister:
        """Return a lister over the scope's shared informers of ``resource``.

        See :meth:`cbop.informers.SharedInformerFactory.lister`.
        """
        return self.informers.lister(resource, label_selector=label_selector, indexers=indexers)

    def add(self, controller: Controller) -> None:
        """Run ``controller``'s workers with the scope (:class:`cbop.runtime.Builder` calls it).

        Raises:
            ValueError: a controller of the same name was added already.
        """
        if controller.name in self.controllers:
            raise ValueError(f"a controller named {controller.name} already exists")
        self.controllers[controller.name] = controller

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
        once. Read at scrape time (``cbop_shard_objects``).
        """
        keys: dict[str, set[str]] = {}
        for informer in self.informers.informers:
            keys.setdefault(informer.resource.plural, set()).update(informer.indexer().list_keys())
        return {plural: len(found) for plural, found in keys.items()}
