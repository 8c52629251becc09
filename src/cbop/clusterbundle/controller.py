"""The ClusterConfigBundle controller: its caches, key mapping and definition.

It owns three decisions:

- **its caches**: ClusterConfigBundles and Namespaces (both cluster-wide), and every
  ConfigBundle through the very informer the ConfigBundle controller reads (same
  resource, scope and selector: the shared factory hands out one), with the
  :data:`cbop.clusterbundle.reconcile.CLUSTER_BUNDLE_INDEX` index from the label
  ``cbop.dev/cluster-bundle`` to the stamps;
- **its key mapping**: a ClusterConfigBundle event enqueues its name (``for_``, only
  when its generation changed or on add/delete: its own status writes enqueue
  nothing); a Namespace event that changed it enqueues every ClusterConfigBundle (they
  are few; the selector is matched in the reconcile); a ConfigBundle event enqueues
  the ClusterConfigBundle its label names, or, for an unlabelled bundle, the one it is
  named after (a conflicting bundle deleted is a conflict resolved);
- **its reconciler**: :class:`cbop.clusterbundle.reconcile.ClusterBundleReconciler`.

It needs the cluster scope: with ``--namespace`` it does not run (said once at start),
and a ClusterConfigBundle then reports nothing rather than something false. Under
``--shards`` it does not run either yet: each shard caches only its own namespaces'
ConfigBundles, and one status must count them all (docs/cluster-bundles.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

import structlog

from cbop import defaults
from cbop.api import LABEL_CLUSTER_BUNDLE
from cbop.clusterbundle.reconcile import (
    CLUSTER_BUNDLE_INDEX,
    DEFAULT_PARALLELISM,
    ClusterBundleReconciler,
    ListingLister,
    index_by_cluster_bundle,
)
from cbop.kube import CLUSTERCONFIGBUNDLES, CONFIGBUNDLES, NAMESPACES
from cbop.metrics.clusterbundle import ClusterBundleNamespacesCollector
from cbop.runtime import Builder, Controller, Scope
from cbop.runtime.definition import Context, ControllerDefinition, Flag, PolicyRule, SetupFunc
from cbop.runtime.predicates import GENERATION_CHANGED, RESOURCE_VERSION_CHANGED
from cbop.runtime.seams import EventSink

__all__ = [
    "CONTROLLER_NAME",
    "DEFINITION",
    "bundle_mapper",
    "install",
    "namespace_mapper",
    "setup",
    "unsupported_scope",
]

log = structlog.get_logger("cbop.clusterbundle")

#: The controller's name (metrics' ``controller`` label, the workqueue's name, logs).
CONTROLLER_NAME: Final = "clusterbundle"


def namespace_mapper(cluster_bundles: ListingLister) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the map function: a Namespace -> every cached ClusterConfigBundle's name."""

    def map_namespace(namespace: Mapping[str, Any]) -> list[str]:
        return sorted(str(c["metadata"]["name"]) for c in cluster_bundles.list())

    return map_namespace


def bundle_mapper(cluster_bundles: ListingLister) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the map function: a ConfigBundle -> the ClusterConfigBundle it concerns.

    A stamp maps to the ClusterConfigBundle its label names; any other bundle to the
    ClusterConfigBundle of its name, if one is cached (it may be a conflict, or one
    resolved). Others map to nothing.
    """

    def map_bundle(bundle: Mapping[str, Any]) -> list[str]:
        meta = bundle.get("metadata") or {}
        label = (meta.get("labels") or {}).get(LABEL_CLUSTER_BUNDLE)
        if isinstance(label, str) and label:
            return [label]
        name = str(meta.get("name", ""))
        return [name] if name and cluster_bundles.get(None, name) is not None else []

    return map_bundle


def unsupported_scope(scope: Scope) -> str | None:
    """Return why the controller cannot run in ``scope`` (None: it can).

    It needs every namespace (``--namespace`` narrows the caches) and every ConfigBundle
    (a shard caches only its own namespaces').
    """
    if any(ns is not None for ns in scope.informers.scopes):
        return "ClusterConfigBundles need the cluster scope; --namespace is given"
    if scope.shard is not None:
        return "ClusterConfigBundles are not served under --shards yet"
    return None


def setup(
    scope: Scope,
    *,
    recorder: EventSink | None = None,
    workers: int | None = None,
    priority_queue: bool | None = None,
) -> Controller | None:
    """Add the ClusterConfigBundle controller to ``scope`` and return it.

    Args:
        scope: the runtime manager (the single leader's scope).
        recorder: where Events go (None: none).
        workers: worker threads (None: the runtime's default, 4), and the stamp writes
            one reconcile sends at once.
        priority_queue: see :meth:`cbop.runtime.Builder.with_options` (None: on).

    Returns:
        The controller, or None when :func:`unsupported_scope` says it cannot run there
        (nothing is added, no informer is made).

    Raises:
        ValueError: the scope has a controller of this name already.
    """
    if unsupported_scope(scope) is not None:
        return None
    cluster_bundles = scope.lister(CLUSTERCONFIGBUNDLES)
    reconciler = ClusterBundleReconciler(
        client=scope.client,
        cluster_bundles=cluster_bundles,
        namespaces=scope.lister(NAMESPACES),
        bundles=scope.lister(
            CONFIGBUNDLES, indexers={CLUSTER_BUNDLE_INDEX: index_by_cluster_bundle}
        ),
        recorder=recorder,
        parallelism=workers or DEFAULT_PARALLELISM,
    )
    return (
        Builder(scope, CONTROLLER_NAME)
        .for_(CLUSTERCONFIGBUNDLES, predicates=(GENERATION_CHANGED,))
        .watches(
            NAMESPACES, namespace_mapper(cluster_bundles), predicates=(RESOURCE_VERSION_CHANGED,)
        )
        .watches(
            CONFIGBUNDLES,
            bundle_mapper(cluster_bundles),
            predicates=(RESOURCE_VERSION_CHANGED,),
        )
        .with_options(workers=workers, priority_queue=priority_queue)
        .complete(reconciler)
    )


def install(context: Context) -> SetupFunc:
    """Install the controller in a process; return its per-scope setup.

    Registers ``cbop_clusterconfigbundle_namespaces{name,state}`` (read from the cached
    statuses at scrape time). A scope it cannot serve is said once in the log.
    """
    context.registry.register(
        ClusterBundleNamespacesCollector(lambda: context.cached(CLUSTERCONFIGBUNDLES))
    )
    said = threading.Event()

    def setup_scope(scope: Scope) -> Controller | None:
        why = unsupported_scope(scope)
        if why is not None:
            if not said.is_set():
                said.set()
                log.info(f"{why}: the ClusterConfigBundle controller does not run")
            return None
        return setup(
            scope,
            recorder=context.recorder,
            workers=context.workers,
            priority_queue=context.priority_queue,
        )

    return setup_scope


#: The ClusterConfigBundle controller as the process sees it (flags, informers, RBAC).
DEFINITION: Final = ControllerDefinition(
    name=CONTROLLER_NAME,
    summary="stamps a ConfigBundle into every namespace a ClusterConfigBundle selects",
    install=install,
    flags=(
        Flag(
            "cluster-bundles",
            defaults.CLUSTER_BUNDLES,
            "serve ClusterConfigBundles (needs the cluster scope, and get/list/watch on "
            "namespaces and clusterconfigbundles)",
        ),
    ),
    enabled=lambda settings: bool(settings.get("cluster_bundles")),
    resources=(CLUSTERCONFIGBUNDLES, NAMESPACES, CONFIGBUNDLES),
    controllers=1,
    rbac=(
        PolicyRule(
            ("",),
            ("namespaces",),
            ("get", "list", "watch"),
            "the Namespace informer: which namespaces a selector selects",
        ),
        PolicyRule(
            ("cbop.dev",),
            ("clusterconfigbundles",),
            ("get", "list", "watch"),
            "the ClusterConfigBundle informer",
        ),
        PolicyRule(
            ("cbop.dev",),
            ("clusterconfigbundles/status",),
            ("get", "update", "patch"),
            "status",
        ),
        PolicyRule(
            ("cbop.dev",),
            ("clusterconfigbundles/finalizers",),
            ("update",),
            "blockOwnerDeletion on the stamps' owner reference "
            "(OwnerReferencesPermissionEnforcement)",
        ),
        PolicyRule(
            ("cbop.dev",),
            ("configbundles",),
            ("get", "list", "watch", "create", "update", "delete"),
            "the stamped ConfigBundles: created, put back, deleted when a namespace leaves",
        ),
    ),
)
