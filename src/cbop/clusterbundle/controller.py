"""The ClusterConfigBundle controllers: their caches, key mappings and definition.

The package adds two controllers to a scope, on shared informers (the
ClusterConfigBundles and Namespaces cluster-wide, and every ConfigBundle through the
very informer the ConfigBundle controller reads, indexed by the label
``cbop.dev/cluster-bundle``):

- the stamp controller (``clusterbundle``, ``--workers`` workers), keyed by the stamp's
  own ``<namespace>/<name>``, so that its workers stamp many namespaces at once and a
  Namespace event enqueues only that namespace's keys;
- the status controller (``clusterbundle-status``, one worker), keyed by the
  ClusterConfigBundle's name, woken by every cache and by the refusals the stamp work
  meets (:class:`Outcomes`).

Each mapping function says which events enqueue what. They need the cluster scope: with
``--namespace`` they do not run, and a ClusterConfigBundle reports nothing rather than
something false. Under ``--shards`` each shard stamps the namespaces whose name hashes
into its range and reports its own failures (:mod:`cbop.clusterbundle.report`), and the
status is written in shard :data:`STATUS_SHARD` only (docs/cluster-bundles.md,
"Sharding").
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import structlog

from cbop import defaults
from cbop.api import LABEL_CLUSTER_BUNDLE, label_value, template_of
from cbop.clusterbundle import report
from cbop.clusterbundle.reconcile import (
    CLUSTER_BUNDLE_INDEX,
    ListingLister,
    Outcomes,
    ReportReconciler,
    StampReconciler,
    StatusReconciler,
    index_by_cluster_bundle,
)
from cbop.keys import key_of
from cbop.kube import CLUSTERCONFIGBUNDLES, CONFIGBUNDLES, NAMESPACES
from cbop.metrics.clusterbundle import ClusterBundleNamespacesCollector
from cbop.runtime import Builder, Controller, Scope
from cbop.runtime.definition import Context, ControllerDefinition, Flag, PolicyRule, SetupFunc
from cbop.runtime.predicates import (
    ANNOTATIONS_CHANGED,
    GENERATION_CHANGED,
    RESOURCE_VERSION_CHANGED,
    UpdatePredicate,
    any_of,
)
from cbop.runtime.seams import EventSink

__all__ = [
    "CONTROLLER_NAME",
    "DEFINITION",
    "REPORT_CONTROLLER_NAME",
    "STAMP_CHANGED",
    "STAMP_OR_STATUS_CHANGED",
    "STATUS_CONTROLLER_NAME",
    "STATUS_SHARD",
    "ClusterBundleControllers",
    "NamedLikeAClusterBundle",
    "bundle_mapper",
    "cluster_bundle_stamp_mapper",
    "install",
    "namespace_mapper",
    "namespace_stamp_mapper",
    "setup",
    "unsupported_scope",
]

log = structlog.get_logger("cbop.clusterbundle")

#: The stamp controller's name (metrics' ``controller`` label, the workqueue's name, logs).
CONTROLLER_NAME: Final = "clusterbundle"
#: The status controller's name.
STATUS_CONTROLLER_NAME: Final = "clusterbundle-status"
#: The report controller's name (sharded only).
REPORT_CONTROLLER_NAME: Final = "clusterbundle-report"
#: The shard whose holder writes every ClusterConfigBundle's status under ``--shards``.
STATUS_SHARD: Final = 0
#: The metadata fields of a ConfigBundle the stamp work judges (besides its spec).
_STAMP_FIELDS: Final = ("generation", "labels", "ownerReferences", "deletionTimestamp")


def _stamp_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    return any(old_meta.get(f) != new_meta.get(f) for f in _STAMP_FIELDS)


def _stamp_or_status_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return _stamp_changed(old, new) or old.get("status") != new.get("status")


#: A ConfigBundle update the stamp work may act on: its spec (generation), label,
#: owner references or deletion changed; a status written by the ConfigBundle
#: controller, a finalizer or a resync pass it not.
STAMP_CHANGED: Final = UpdatePredicate(_stamp_changed, "stamp changed")
#: A ConfigBundle update that may change a ClusterConfigBundle's status: the above, or
#: its status.
STAMP_OR_STATUS_CHANGED: Final = UpdatePredicate(
    _stamp_or_status_changed, "stamp or its status changed"
)
#: A ClusterConfigBundle event that may change a sharded status or report: its spec
#: (generation) or the shards' reports (annotations); its status writes pass neither.
_SPEC_OR_REPORTS: Final = any_of(GENERATION_CHANGED, ANNOTATIONS_CHANGED)


def namespace_mapper(cluster_bundles: ListingLister) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the status map function: a Namespace -> every cached ClusterConfigBundle's name."""

    def map_namespace(namespace: Mapping[str, Any]) -> list[str]:
        return sorted(str(c["metadata"]["name"]) for c in cluster_bundles.list())

    return map_namespace


def namespace_stamp_mapper(
    cluster_bundles: ListingLister, owns: Callable[[str], bool] | None = None
) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the stamp map function: a Namespace -> its stamp key of every ClusterConfigBundle.

    Only that namespace's keys (``<namespace>/<name>``): the other namespaces' stamps do
    not depend on it. ``owns``: a shard's test of a namespace name; another shard's
    namespace maps to nothing.
    """

    def map_namespace(namespace: Mapping[str, Any]) -> list[str]:
        ns_name = str((namespace.get("metadata") or {}).get("name", ""))
        if not ns_name or (owns is not None and not owns(ns_name)):
            return []
        return sorted(key_of(ns_name, str(c["metadata"]["name"])) for c in cluster_bundles.list())

    return map_namespace


def cluster_bundle_stamp_mapper(
    cluster_bundles: ListingLister,
    namespaces: ListingLister,
    owns: Callable[[str], bool] | None = None,
) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the stamp map function: a ClusterConfigBundle -> its stamp key in every namespace.

    Also the keys of every other cached ClusterConfigBundle keeping a ConfigMap of the
    same name: which of them is the older one serving a namespace may have changed.
    ``owns``: a shard's test of a namespace name; only its namespaces' keys.
    """

    def map_cluster_bundle(cluster_bundle: Mapping[str, Any]) -> list[str]:
        name = str((cluster_bundle.get("metadata") or {}).get("name", ""))
        if not name:
            return []
        names = {name}
        config_map = template_of(cluster_bundle)["configMapName"]
        for other in cluster_bundles.list():
            if template_of(other)["configMapName"] == config_map:
                names.add(str(other["metadata"]["name"]))
        spaces = [str(ns["metadata"]["name"]) for ns in namespaces.list()]
        if owns is not None:
            spaces = [ns for ns in spaces if owns(ns)]
        return [key_of(ns, n) for n in sorted(names) for ns in sorted(spaces)]

    return map_cluster_bundle


def bundle_mapper(cluster_bundles: ListingLister) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the status map function: a ConfigBundle -> the ClusterConfigBundle it concerns.

    A stamp maps to the ClusterConfigBundle its label names: its own name, when the
    label is that name's :func:`cbop.api.label_value` (a name past 63 characters is cut
    and hashed in the label), else the label itself; any other bundle to the
    ClusterConfigBundle of its name, if one is cached (it may be a conflict, or one
    resolved). Others map to nothing.
    """

    def map_bundle(bundle: Mapping[str, Any]) -> list[str]:
        meta = bundle.get("metadata") or {}
        label = (meta.get("labels") or {}).get(LABEL_CLUSTER_BUNDLE)
        name = str(meta.get("name", ""))
        if isinstance(label, str) and label:
            return [name] if name and label_value(name) == label else [label]
        return [name] if name and cluster_bundles.get(None, name) is not None else []

    return map_bundle


@dataclass(frozen=True)
class NamedLikeAClusterBundle:
    """Predicate of the stamp controller's ConfigBundle events.

    An event passes when the bundle's name is a cached ClusterConfigBundle's (it is a
    stamp, or in a stamp's way).
    """

    cluster_bundles: ListingLister

    def _passes(self, obj: Mapping[str, Any]) -> bool:
        name = (obj.get("metadata") or {}).get("name")
        return isinstance(name, str) and self.cluster_bundles.get(None, name) is not None

    def create(self, obj: Mapping[str, Any]) -> bool:
        """Whether an added bundle concerns a ClusterConfigBundle."""
        return self._passes(obj)

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        """Whether an updated bundle concerns a ClusterConfigBundle."""
        return self._passes(new)

    def delete(self, obj: Mapping[str, Any]) -> bool:
        """Whether a deleted bundle concerned a ClusterConfigBundle."""
        return self._passes(obj)


def unsupported_scope(scope: Scope) -> str | None:
    """Return why the controllers cannot run in ``scope`` (None: they can).

    They need every namespace (``--namespace`` narrows the caches).
    """
    if any(ns is not None for ns in scope.informers.scopes):
        return "ClusterConfigBundles need the cluster scope; --namespace is given"
    return None


@dataclass(frozen=True)
class ClusterBundleControllers:
    """The controllers :func:`setup` adds, and the outcomes table they share.

    Attributes:
        stamps: the stamp controller.
        status: the status controller (None: a shard other than :data:`STATUS_SHARD`).
        report: the report controller (sharded only).
        outcomes: the failures the stamp work met.
    """

    stamps: Controller
    status: Controller | None
    report: Controller | None
    outcomes: Outcomes


def setup(
    scope: Scope,
    *,
    recorder: EventSink | None = None,
    workers: int | None = None,
    priority_queue: bool | None = None,
) -> ClusterBundleControllers | None:
    """Add the ClusterConfigBundle controllers to ``scope`` and return them.

    Unsharded: the stamp and status controllers over every namespace. In a shard's
    scope: the stamp controller over the namespaces whose name hashes into the shard's
    range, the report controller (its failures on each ClusterConfigBundle), and, in
    shard :data:`STATUS_SHARD`'s scope only, the status controller over cluster-wide
    caches (docs/cluster-bundles.md, Sharding).

    Args:
        scope: the runtime manager (the single leader's scope), or a shard's scope.
        recorder: where Events go (None: none).
        workers: the stamp controller's worker threads (None: the runtime's default,
            4); the status and report controllers have one.
        priority_queue: see :meth:`cbop.runtime.Builder.with_options` (None: on).

    Returns:
        The controllers, or None when :func:`unsupported_scope` says they cannot run
        there (nothing is added, no informer is made).

    Raises:
        ValueError: the scope has a controller of one of these names already.
    """
    if unsupported_scope(scope) is not None:
        return None
    shard = scope.shard
    owns = shard.contains if shard is not None else None
    cluster_bundles = scope.lister(CLUSTERCONFIGBUNDLES, whole=True)
    writes_status = shard is None or shard.index == STATUS_SHARD
    # A shard keeps its own namespaces' Namespace objects; the status writer all.
    own_namespaces = not writes_status
    namespaces = scope.lister(NAMESPACES, whole=writes_status, by_name=own_namespaces)
    bundles = scope.lister(CONFIGBUNDLES, indexers={CLUSTER_BUNDLE_INDEX: index_by_cluster_bundle})
    outcomes = Outcomes()
    status: Controller | None = None
    if writes_status:
        status = _status_controller(
            scope, cluster_bundles, namespaces, bundles, outcomes, priority_queue
        )
        outcomes.changed = status.queue.add
    reporter: Controller | None = None
    if shard is not None:
        reporter = (
            Builder(scope, REPORT_CONTROLLER_NAME)
            .for_(CLUSTERCONFIGBUNDLES, predicates=(_SPEC_OR_REPORTS,), whole=True)
            .with_options(workers=1, priority_queue=priority_queue)
            .complete(
                ReportReconciler(
                    client=scope.client,
                    cluster_bundles=cluster_bundles,
                    outcomes=outcomes,
                    key=report.report_key(shard.index, shard.count),
                )
            )
        )
        outcomes.changed = reporter.queue.add
    stamps = (
        Builder(scope, CONTROLLER_NAME)
        .for_(
            CONFIGBUNDLES,
            predicates=(STAMP_CHANGED, NamedLikeAClusterBundle(cluster_bundles)),
        )
        .watches(
            CLUSTERCONFIGBUNDLES,
            cluster_bundle_stamp_mapper(cluster_bundles, namespaces, owns),
            predicates=(GENERATION_CHANGED,),
            whole=True,
        )
        .watches(
            NAMESPACES,
            namespace_stamp_mapper(cluster_bundles, owns),
            predicates=(RESOURCE_VERSION_CHANGED,),
            whole=writes_status,
            by_name=own_namespaces,
        )
        .with_options(workers=workers, priority_queue=priority_queue)
        .complete(
            StampReconciler(
                client=scope.client,
                cluster_bundles=cluster_bundles,
                namespaces=namespaces,
                bundles=bundles,
                outcomes=outcomes,
                recorder=recorder,
                owns=owns,
            )
        )
    )
    return ClusterBundleControllers(stamps, status, reporter, outcomes)


def _status_controller(  # noqa: PLR0917 - private
    scope: Scope,
    cluster_bundles: ListingLister,
    namespaces: ListingLister,
    bundles: ListingLister,
    outcomes: Outcomes,
    priority_queue: bool | None,
) -> Controller:
    """Add the status controller: over ``bundles`` unsharded, over every stamp sharded."""
    shard = scope.shard
    builder = Builder(scope, STATUS_CONTROLLER_NAME)
    if shard is None:
        builder.for_(CLUSTERCONFIGBUNDLES, predicates=(GENERATION_CHANGED,))
        builder.watches(
            CONFIGBUNDLES, bundle_mapper(cluster_bundles), predicates=(STAMP_OR_STATUS_CHANGED,)
        )
        reports = None
    else:
        # Every namespace's stamp, whichever shard made it; the shards' reports (an
        # annotation change) tell what no stamp shows.
        bundles = scope.lister(
            CONFIGBUNDLES,
            label_selector=LABEL_CLUSTER_BUNDLE,
            indexers={CLUSTER_BUNDLE_INDEX: index_by_cluster_bundle},
            whole=True,
        )
        builder.for_(CLUSTERCONFIGBUNDLES, predicates=(_SPEC_OR_REPORTS,), whole=True)
        builder.watches(
            CONFIGBUNDLES,
            bundle_mapper(cluster_bundles),
            label_selector=LABEL_CLUSTER_BUNDLE,
            predicates=(STAMP_OR_STATUS_CHANGED,),
            whole=True,
        )
        count = shard.count
        reports = functools.partial(report.reported, count=count)
    builder.watches(
        NAMESPACES,
        namespace_mapper(cluster_bundles),
        predicates=(RESOURCE_VERSION_CHANGED,),
        whole=True,
    )
    return builder.with_options(workers=1, priority_queue=priority_queue).complete(
        StatusReconciler(
            client=scope.client,
            cluster_bundles=cluster_bundles,
            namespaces=namespaces,
            bundles=bundles,
            outcomes=outcomes,
            reports=reports,
        )
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

    def setup_scope(scope: Scope) -> ClusterBundleControllers | None:
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
    controllers=2,
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
            ("get", "list", "watch", "patch"),
            "the ClusterConfigBundle informer; under --shards each shard patches its own "
            "annotation reporting its failed namespaces to the status writer",
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
