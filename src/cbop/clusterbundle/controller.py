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
something false. The stamp controller runs in every scope, over the namespaces whose
name hashes into its range; the status controller once per group
(:attr:`cbop.runtime.definition.Setup.once`). Where one scope serves every namespace
the status reads its :class:`Outcomes`; otherwise each scope reports its own failures
(:mod:`cbop.clusterbundle.report`) and the status reads the reports
(docs/cluster-bundles.md, "Sharding").
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import structlog

from cbop import defaults
from cbop.api import LABEL_CLUSTER_BUNDLE, label_value, template_of
from cbop.clusterbundle import report
from cbop.clusterbundle.decision import Failure
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
from cbop.runtime import Builder, Controller, Reads, Scope
from cbop.runtime.definition import (
    Context,
    ControllerDefinition,
    Flag,
    FlagValues,
    PolicyRule,
    Setup,
)
from cbop.runtime.predicates import (
    ANNOTATIONS_CHANGED,
    GENERATION_CHANGED,
    RESOURCE_VERSION_CHANGED,
    Predicate,
    UpdatePredicate,
    any_of,
)
from cbop.runtime.seams import EventSink

__all__ = [
    "CLUSTER_BUNDLES_FLAG",
    "CONTROLLER_NAME",
    "DEFINITION",
    "REPORT_CONTROLLER_NAME",
    "STAMP_CHANGED",
    "STAMP_OR_STATUS_CHANGED",
    "STATUS_CONTROLLER_NAME",
    "ClusterBundleControllers",
    "ClusterBundleSettings",
    "NamedLikeAClusterBundle",
    "bundle_mapper",
    "cluster_bundle_stamp_mapper",
    "install",
    "namespace_mapper",
    "namespace_stamp_mapper",
    "setup",
    "setup_status",
    "unsupported_scope",
]

log = structlog.get_logger("cbop.clusterbundle")

#: The stamp controller's name (metrics' ``controller`` label, the workqueue's name, logs).
CONTROLLER_NAME: Final = "clusterbundle"
#: The status controller's name.
STATUS_CONTROLLER_NAME: Final = "clusterbundle-status"
#: The report controller's name (where failures travel by report).
REPORT_CONTROLLER_NAME: Final = "clusterbundle-report"
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


def _by_report(scope: Scope) -> bool:
    """Whether the stamp work's failures reach the status writer by report.

    They do unless ``scope`` serves every namespace: then the status writer runs in
    the same scope and reads its :class:`Outcomes` (and every ConfigBundle) directly.
    """
    return not scope.shard.everything


@dataclass(frozen=True)
class ClusterBundleSettings:
    """The ClusterConfigBundle controller's settings, from the parsed flags.

    Attributes:
        enabled: serve ClusterConfigBundles (``--cluster-bundles``).
    """

    enabled: bool = defaults.CLUSTER_BUNDLES

    @classmethod
    def from_flags(cls, flags: FlagValues) -> ClusterBundleSettings:
        """Return the settings of the parsed ``flags``."""
        return cls(enabled=flags[CLUSTER_BUNDLES_FLAG])


#: ``--cluster-bundles``.
CLUSTER_BUNDLES_FLAG: Final = Flag(
    "cluster-bundles",
    defaults.CLUSTER_BUNDLES,
    "serve ClusterConfigBundles (needs the cluster scope, and get/list/watch on "
    "namespaces and clusterconfigbundles)",
)


@dataclass(frozen=True)
class ClusterBundleControllers:
    """The controllers :func:`setup` adds to a scope, and the outcomes table they share.

    Attributes:
        stamps: the stamp controller.
        report: the report controller (None where the status writer reads
            ``outcomes`` directly).
        outcomes: the failures the stamp work met; they wake the one controller that
            carries them to the status (the report controller, or the status
            controller of the same scope).
    """

    stamps: Controller
    report: Controller | None
    outcomes: Outcomes


def setup(
    scope: Scope,
    *,
    recorder: EventSink | None = None,
    workers: int | None = None,
    priority_queue: bool | None = None,
    outcomes: Outcomes | None = None,
) -> ClusterBundleControllers | None:
    """Add the stamp controller (and, where failures travel by report, the report one).

    The stamp controller serves the namespaces whose name hashes into the scope's
    range (every namespace unsharded); the report controller writes the scope's
    failures on each ClusterConfigBundle for the status writer (docs/cluster-bundles.md,
    Sharding).

    Args:
        scope: the scope (the process's one, or a shard's).
        recorder: where Events go (None: none).
        workers: the stamp controller's worker threads (None: the runtime's default,
            4); the report controller has one.
        priority_queue: see :meth:`cbop.runtime.Builder.with_options` (None: on).
        outcomes: the scope's outcomes table, when :func:`setup_status` made it
            already (the status writer of the same scope reads it).

    Returns:
        The controllers, or None when :func:`unsupported_scope` says they cannot run
        there (nothing is added, no informer is made).

    Raises:
        ValueError: the scope has a controller of one of these names already.
    """
    if unsupported_scope(scope) is not None:
        return None
    owns = scope.shard.contains
    cluster_bundles = scope.lister(CLUSTERCONFIGBUNDLES, reads=Reads.CLUSTER)
    # A scope keeps its own namespaces' Namespace objects (all of them unsharded).
    namespaces = scope.lister(NAMESPACES, reads=Reads.SHARD_BY_NAME)
    bundles = scope.lister(CONFIGBUNDLES, indexers={CLUSTER_BUNDLE_INDEX: index_by_cluster_bundle})
    outcomes = outcomes if outcomes is not None else Outcomes()
    reporter: Controller | None = None
    if _by_report(scope):
        reporter = (
            Builder(scope, REPORT_CONTROLLER_NAME)
            .for_(CLUSTERCONFIGBUNDLES, predicates=(_SPEC_OR_REPORTS,), reads=Reads.CLUSTER)
            .with_options(workers=1, priority_queue=priority_queue)
            .complete(
                ReportReconciler(
                    client=scope.client,
                    cluster_bundles=cluster_bundles,
                    outcomes=outcomes,
                    key=report.report_key(scope.shard.index, scope.shard.count),
                )
            )
        )
        outcomes.listen(reporter.queue.add)
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
            reads=Reads.CLUSTER,
        )
        .watches(
            NAMESPACES,
            namespace_stamp_mapper(cluster_bundles, owns),
            predicates=(RESOURCE_VERSION_CHANGED,),
            reads=Reads.SHARD_BY_NAME,
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
    return ClusterBundleControllers(stamps, reporter, outcomes)


def setup_status(
    scope: Scope, *, priority_queue: bool | None = None
) -> tuple[Controller, Outcomes | None] | None:
    """Add the status controller, which a group of scopes runs once.

    It reads every ClusterConfigBundle and every Namespace. Where ``scope`` serves
    every namespace it reads every ConfigBundle and the stamp work's :class:`Outcomes`
    (returned, for :func:`setup` of the same scope to fill; a change there wakes it);
    else every stamp (label-selected) and the failures each scope reports on the
    ClusterConfigBundle (:mod:`cbop.clusterbundle.report`), and no table is returned.

    Returns:
        The controller and the table the scope's stamp work must fill (None: it reads
        reports), or None when :func:`unsupported_scope` says it cannot run there.

    Raises:
        ValueError: the scope has a controller of this name already.
    """
    if unsupported_scope(scope) is not None:
        return None
    cluster_bundles = scope.lister(CLUSTERCONFIGBUNDLES, reads=Reads.CLUSTER)
    namespaces = scope.lister(NAMESPACES, reads=Reads.CLUSTER)
    builder = Builder(scope, STATUS_CONTROLLER_NAME)
    outcomes = Outcomes()
    reports: Callable[[Mapping[str, Any]], list[Failure]] | None = None
    if _by_report(scope):
        # Every namespace's stamp, whichever scope made it; the scopes' reports (an
        # annotation change) tell what no stamp shows.
        selector: str | None = LABEL_CLUSTER_BUNDLE
        spec_changed: Predicate = _SPEC_OR_REPORTS
        reports = functools.partial(report.reported, count=scope.shard.count)
    else:
        selector, spec_changed = None, GENERATION_CHANGED
    bundles = scope.lister(
        CONFIGBUNDLES,
        reads=Reads.CLUSTER,
        label_selector=selector,
        indexers={CLUSTER_BUNDLE_INDEX: index_by_cluster_bundle},
    )
    status = (
        builder.for_(CLUSTERCONFIGBUNDLES, predicates=(spec_changed,), reads=Reads.CLUSTER)
        .watches(
            CONFIGBUNDLES,
            bundle_mapper(cluster_bundles),
            label_selector=selector,
            predicates=(STAMP_OR_STATUS_CHANGED,),
            reads=Reads.CLUSTER,
        )
        .watches(
            NAMESPACES,
            namespace_mapper(cluster_bundles),
            predicates=(RESOURCE_VERSION_CHANGED,),
            reads=Reads.CLUSTER,
        )
        .with_options(workers=1, priority_queue=priority_queue)
        .complete(
            StatusReconciler(
                client=scope.client,
                cluster_bundles=cluster_bundles,
                namespaces=namespaces,
                bundles=bundles,
                outcomes=outcomes,
                reports=reports,
            )
        )
    )
    if reports is not None:
        return status, None
    outcomes.listen(status.queue.add)
    return status, outcomes


def install(context: Context, settings: ClusterBundleSettings) -> Setup:
    """Install the controller in a process; return its setup (the status writer once).

    Registers ``cbop_clusterconfigbundle_namespaces{name,state}`` (read from the cached
    statuses at scrape time). A scope it cannot serve is said once in the log.
    """
    context.registry.register(
        ClusterBundleNamespacesCollector(lambda: context.cached(CLUSTERCONFIGBUNDLES))
    )
    said = threading.Event()
    # The table a scope's status writer reads, made before the scope's stamp work.
    tables: weakref.WeakKeyDictionary[Scope, Outcomes] = weakref.WeakKeyDictionary()

    def supported(scope: Scope) -> bool:
        why = unsupported_scope(scope)
        if why is not None and not said.is_set():
            said.set()
            log.info(f"{why}: the ClusterConfigBundle controller does not run")
        return why is None

    def setup_once(scope: Scope) -> Controller | None:
        if not supported(scope):
            return None
        made = setup_status(scope, priority_queue=context.priority_queue)
        if made is None:
            return None
        status, table = made
        if table is not None:
            tables[scope] = table
        return status

    def setup_scope(scope: Scope) -> ClusterBundleControllers | None:
        if not supported(scope):
            return None
        return setup(
            scope,
            recorder=context.recorder,
            workers=context.workers,
            priority_queue=context.priority_queue,
            outcomes=tables.pop(scope, None),
        )

    return Setup(each_scope=setup_scope, once=setup_once)


#: The ClusterConfigBundle controller as the process sees it (flags, informers, RBAC).
DEFINITION: Final = ControllerDefinition(
    name=CONTROLLER_NAME,
    summary="stamps a ConfigBundle into every namespace a ClusterConfigBundle selects",
    settings=ClusterBundleSettings.from_flags,
    install=install,
    flags=(CLUSTER_BUNDLES_FLAG,),
    enabled=lambda settings: settings.enabled,
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
