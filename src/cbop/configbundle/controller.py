"""The ConfigBundle controller: what is specific to ConfigBundles, on the generic runtime.

It owns the controller's caches, key mapping and reconciler. Caches: the ConfigBundles;
the ConfigMaps cbop manages and the source ConfigMaps, each selected by its label on the
API server (sources in every namespace in scope and never shard-filtered: a bundle of
any shard may read a source of any namespace); and what revisions need
(:mod:`cbop.revisions.caches`). Each mapping function (:func:`bundles_naming`,
:func:`bundles_reading`, ...) says which bundles an event of its kind concerns, through
an index, without a GET; after a restart the bundles that are not converged go first.
The reconciler is :class:`cbop.configbundle.Reconciler` with the scope's fenced client.
``cbop --once`` uses :func:`new_reconciler` and :func:`reconcile_all` without a manager.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from cbop.api import MANAGED_SELECTOR, SOURCE_SELECTOR, config_map_name_of, target_of
from cbop.configbundle import Reconciler, Requeue, Result
from cbop.configbundle.interfaces import Client, Observer
from cbop.configbundle.settings import (
    REVISION_GRACE,
    ROLLOUT,
    SECRETS_DIGEST_KEY,
    SECRETS_FLAG,
    SECRETS_NAMESPACE,
    ConfigBundleSettings,
)
from cbop.configbundle.status import is_converged
from cbop.informers import (
    IndexFunc,
    MultiNamespaceLister,
    SharedInformerFactory,
    index_by_controller_uid,
)
from cbop.keys import CONFIGMAP_NAME_INDEX, CONTROLLER_UID_INDEX, key_of, object_key
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, PODS, SECRETS
from cbop.metrics.controller import (
    BundleReadinessCollector,
    ConfigMapWriteMetrics,
    SecretsDisabledCollector,
)
from cbop.metrics.revisions import RevisionCollector
from cbop.revisions.bundle import DEFAULT_GRACE
from cbop.revisions.caches import (
    HISTORY,
    OPTED_IN_SELECTOR,
    REVISION_OF_INDEX,
    TEMPLATE_CHANGED,
    WORKLOADS,
    History,
    bundles_of_legacy_pins,
    bundles_of_reader,
    bundles_of_template,
    count_unpinned,
    history_listers,
    index_by_revision_of,
    legacy_namespaces,
    revision_owners,
)
from cbop.revisions.model import PINNED_SELECTOR
from cbop.revisions.policy import PolicyCheck
from cbop.runtime import Builder, Controller, Reads, Scope, reconcile_context
from cbop.runtime.definition import (
    Context,
    ControllerDefinition,
    OptIn,
    PolicyRule,
    SetupFunc,
)
from cbop.runtime.predicates import GENERATION_CHANGED
from cbop.runtime.seams import EventSink
from cbop.secretaccess.digestkey import DigestKey
from cbop.secretaccess.scope import SecretsScope

__all__ = [
    "CONTROLLER_NAME",
    "DEFINITION",
    "MANAGED_SELECTOR",
    "REVISION_GRACE",
    "ROLLOUT",
    "SOURCE_INDEX",
    "ConfigBundleSettings",
    "bundles_naming",
    "bundles_reading",
    "index_by_configmap_name",
    "index_by_source",
    "install",
    "new_reconciler",
    "reconcile_all",
    "setup",
]

#: The controller's name (metrics' ``controller`` label, the workqueue's name, logs).
CONTROLLER_NAME: Final = "configbundle"

#: Index of the ConfigBundle cache: ``namespace/name`` of each source a bundle reads.
SOURCE_INDEX: Final = "source"
#: What precedes ``namespace/name`` of a Secret source in :data:`SOURCE_INDEX` (as in
#: ``status.keySources``): a ConfigMap and a Secret of one name are two sources.
SECRET_SOURCE_PREFIX: Final = "secret:"
#: Index of the ConfigBundle cache: ``namespace/name`` of the Secret a bundle keeps.
SECRET_NAME_INDEX: Final = "secret-name"


def index_by_source(bundle: Mapping[str, Any]) -> list[str]:
    """Index function of the ConfigBundle cache: the keys of the sources ``bundle`` reads.

    Returns:
        ``["namespace/name", ...]`` of ``spec.sources`` (the bundle's namespace where a
        source names none; a ClusterConfigBundle's stamps each their own), a Secret
        source as ``secret:namespace/name``, sorted and each once; ``[]`` without
        sources. Read from the raw spec, so a source that does not exist yet is
        indexed too.
    """
    raw = (bundle.get("spec") or {}).get("sources")
    if not isinstance(raw, list):
        return []
    namespace = (bundle.get("metadata") or {}).get("namespace")
    keys = set()
    for entry in raw:
        for kind, prefix in (("configMap", ""), ("secret", SECRET_SOURCE_PREFIX)):
            ref = entry.get(kind) if isinstance(entry, Mapping) else None
            if isinstance(ref, Mapping) and isinstance(ref.get("name"), str):
                keys.add(prefix + key_of(ref.get("namespace") or namespace, ref["name"]))
    return sorted(keys)


def bundles_reading(
    bundles: MultiNamespaceLister, prefix: str = ""
) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the map function: a source ConfigMap (or Secret) -> the bundles that read it.

    Args:
        bundles: the ConfigBundle lister, with the :data:`SOURCE_INDEX` index.
        prefix: ``""`` for ConfigMap sources, :data:`SECRET_SOURCE_PREFIX` for Secrets.

    Returns:
        ``fn(configmap) -> ["namespace/name", ...]``, sorted: every bundle whose
        ``spec.sources`` names the ConfigMap, in any namespace. Lookups only: no API
        call. Under ``--shards`` the lister holds the shard's bundles, so each shard
        enqueues its own readers.
    """

    def map_source(configmap: Mapping[str, Any]) -> list[str]:
        meta = configmap.get("metadata") or {}
        value = prefix + key_of(meta.get("namespace"), str(meta.get("name", "")))
        return sorted(object_key(b) for b in bundles.by_index(SOURCE_INDEX, value))

    return map_source


def index_by_configmap_name(bundle: Mapping[str, Any]) -> list[str]:
    """Index function of the ConfigBundle cache: the key of the ConfigMap ``bundle`` keeps.

    Returns:
        ``["namespace/configMapName"]`` (the bundle's name when ``configMapName`` is
        unset), or ``[]`` when that name is invalid (the bundle keeps no ConfigMap).
    """
    name = config_map_name_of(bundle)
    if name is None:
        return []
    return [key_of(bundle.get("metadata", {}).get("namespace"), name)]


def index_by_secret_name(bundle: Mapping[str, Any]) -> list[str]:
    """Index function of the ConfigBundle cache: the key of the Secret ``bundle`` keeps.

    Returns:
        ``["namespace/name"]`` of a Secret target (``spec.target.name``, else the
        bundle's name), or ``[]`` for a ConfigMap target or an invalid name.
    """
    target = target_of(bundle)
    if target is None or not target.is_secret:
        return []
    return [key_of(bundle.get("metadata", {}).get("namespace"), target.name)]


def bundles_naming(
    bundles: MultiNamespaceLister, index: str = CONFIGMAP_NAME_INDEX
) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the map function: a managed ConfigMap -> the bundles that keep its name.

    Args:
        bundles: the ConfigBundle lister, with the :data:`CONFIGMAP_NAME_INDEX` index.
        index: :data:`SECRET_NAME_INDEX` for managed Secrets: the bundles that keep the
            Secret's name.

    Returns:
        ``fn(configmap) -> ["namespace/name", ...]``, sorted. A ConfigMap cbop manages
        that is deleted, or released (it then leaves the managed-ConfigMap cache, which
        is a deletion to its handlers), wakes every bundle waiting on its name at once;
        the owner's own key, also among them, is enqueued once (the workqueue
        deduplicates). Lookups only: no API call.
    """

    def map_configmap(configmap: Mapping[str, Any]) -> list[str]:
        meta = configmap.get("metadata") or {}
        value = key_of(meta.get("namespace"), str(meta.get("name", "")))
        return sorted(object_key(b) for b in bundles.by_index(index, value))

    return map_configmap


#: The indexes of the ConfigBundle cache the controller reads.
_BUNDLE_INDEXERS: Final[dict[str, IndexFunc]] = {
    CONFIGMAP_NAME_INDEX: index_by_configmap_name,
    SECRET_NAME_INDEX: index_by_secret_name,
    SOURCE_INDEX: index_by_source,
}


def new_reconciler(
    client: Client,
    informers: SharedInformerFactory,
    *,
    recorder: EventSink | None = None,
    observer: Observer | None = None,
    dry_run: bool = False,
    history: History | None = None,
    pin_policy: PolicyCheck | None = None,
    rollout: bool = True,
    revision_grace: float = DEFAULT_GRACE,
    secrets: SecretsScope | None = None,
) -> Reconciler:
    """Return the ConfigBundle reconciler reading from ``informers``' shared caches.

    Args:
        client: the client the reconciler writes with (fenced under leader election).
        informers: the shared informer factory; the ConfigBundle, managed-ConfigMap
            and source-ConfigMap informers are requested from it (and the ConfigMaps'
            owner index added).
        recorder: where Events go (None: none).
        observer: the ConfigMap write metrics (None: none).
        dry_run: see :class:`cbop.configbundle.Reconciler`.
        history: see :class:`cbop.configbundle.Reconciler` (``cbop --once``: none).
        pin_policy: see :class:`cbop.configbundle.Reconciler`.
        rollout: see :class:`cbop.configbundle.Reconciler`.
        revision_grace: see :class:`cbop.configbundle.Reconciler`.
        secrets: which bundles with a Secret target are served (None: none); with
            Secrets on, the Secret informers are requested too.
    """
    scope = secrets or SecretsScope()
    targets, sources = secret_informers(informers, scope)
    return Reconciler(
        client=client,
        bundles=informers.lister(CONFIGBUNDLES, indexers=_BUNDLE_INDEXERS),
        configmaps=informers.lister(
            CONFIGMAPS,
            label_selector=MANAGED_SELECTOR,
            indexers={
                CONTROLLER_UID_INDEX: index_by_controller_uid,
                REVISION_OF_INDEX: index_by_revision_of,
            },
        ),
        recorder=recorder,
        observer=observer,
        dry_run=dry_run,
        sources=informers.lister(CONFIGMAPS, label_selector=SOURCE_SELECTOR, whole=True),
        source_scope=[ns for ns in informers.scopes if ns] or None,
        history=history,
        pin_policy=pin_policy,
        rollout=rollout,
        revision_grace=revision_grace,
        secrets=scope,
        secret_targets=targets,
        secret_sources=sources,
        digest_key=DigestKey(client, *scope.digest_key, dry_run=dry_run)
        if targets is not None
        else None,
    )


def secret_informers(
    informers: SharedInformerFactory, scope: SecretsScope
) -> tuple[MultiNamespaceLister | None, MultiNamespaceLister | None]:
    """Return listers of the two Secret informers of ``informers`` while Secrets are on.

    The targets (label ``app.kubernetes.io/managed-by=cbop``, with the
    ``controller-uid`` index) and the sources (label ``cbop.dev/source=true``, never
    shard-filtered), each selected on the API server, in the namespaces of
    :meth:`SecretsScope.informer_namespaces`: an unlabelled Secret is never sent to
    cbop. ``(None, None)`` with Secrets off: no Secret informer at all.
    """
    namespaces = scope.informer_namespaces(informers.scopes)
    if not namespaces:
        return None, None
    targets = informers.lister(
        SECRETS,
        label_selector=MANAGED_SELECTOR,
        indexers={CONTROLLER_UID_INDEX: index_by_controller_uid},
        namespaces=namespaces,
    )
    sources = informers.lister(
        SECRETS, label_selector=SOURCE_SELECTOR, whole=True, namespaces=namespaces
    )
    return targets, sources


def setup(
    scope: Scope,
    *,
    recorder: EventSink | None = None,
    observer: Observer | None = None,
    workers: int | None = None,
    priority_queue: bool | None = None,
    pin_policy: PolicyCheck | None = None,
    rollout: bool = True,
    revision_grace: float = DEFAULT_GRACE,
    secrets: SecretsScope | None = None,
) -> Controller:
    """Add the ConfigBundle controller to ``scope`` and return it.

    Args:
        scope: the scope (the process's one, or a shard's): its client, its informers,
            its metrics.
        recorder: where Events go (None: none).
        observer: the ConfigMap write metrics (None: none).
        workers: worker threads (None: the runtime's default, 4).
        priority_queue: see :meth:`cbop.runtime.Builder.with_options` (None: on).
        pin_policy: see :class:`cbop.configbundle.Reconciler`.
        rollout: whether the rollout runs (its workload caches are then read too).
        revision_grace: see :class:`cbop.configbundle.Reconciler`.
        secrets: which bundles with a Secret target are served (None: none).

    Raises:
        ValueError: the scope has a controller of this name already.
    """
    # First: the history's informers take the transforms that keep them small.
    history = history_listers(scope.informers, workloads=rollout)
    reconciler = new_reconciler(
        scope.client,
        scope.informers,
        recorder=recorder,
        observer=observer,
        history=history,
        pin_policy=pin_policy,
        rollout=rollout,
        revision_grace=revision_grace,
        secrets=secrets,
    )
    bundles = scope.lister(CONFIGBUNDLES, indexers=_BUNDLE_INDEXERS)
    configmaps = scope.lister(CONFIGMAPS, label_selector=MANAGED_SELECTOR)
    builder = (
        Builder(scope, CONTROLLER_NAME)
        .for_(CONFIGBUNDLES, converged=is_converged)
        .owns(CONFIGMAPS, label_selector=MANAGED_SELECTOR)
        .watches(CONFIGMAPS, bundles_naming(bundles), label_selector=MANAGED_SELECTOR)
        .watches(CONFIGMAPS, revision_owners, label_selector=MANAGED_SELECTOR)
        .watches(CONFIGMAPS, bundles_of_legacy_pins(configmaps), label_selector=MANAGED_SELECTOR)
        .watches(
            CONFIGMAPS,
            bundles_reading(bundles),
            label_selector=SOURCE_SELECTOR,
            reads=Reads.CLUSTER,
        )
    )
    # With Secrets on: the targets (their owner, and bundles waiting on a name) and the
    # sources, in the namespaces served; the controller waits for both caches.
    served = (secrets or SecretsScope()).informer_namespaces(scope.informers.scopes)
    if served:
        builder = (
            builder.owns(SECRETS, label_selector=MANAGED_SELECTOR, namespaces=served)
            .watches(
                SECRETS,
                bundles_naming(bundles, SECRET_NAME_INDEX),
                label_selector=MANAGED_SELECTOR,
                namespaces=served,
            )
            .watches(
                SECRETS,
                bundles_reading(bundles, SECRET_SOURCE_PREFIX),
                label_selector=SOURCE_SELECTOR,
                reads=Reads.CLUSTER,
                namespaces=served,
            )
        )
    # The history's caches wake bundles, but the controller does not wait for them:
    # without RBAC on pods or the apps group, bundles are still reconciled (nothing past
    # keep is deleted, Pinned says Unknown) and /readyz names the refused list.
    for resource in HISTORY:
        builder = builder.watches(
            resource,
            bundles_of_template(bundles, configmaps),
            label_selector=PINNED_SELECTOR,
            predicates=(TEMPLATE_CHANGED,),
            cache=False,
        )
    for resource in WORKLOADS if rollout else ():
        builder = builder.watches(
            resource,
            bundles_of_reader(bundles),
            label_selector=OPTED_IN_SELECTOR,
            predicates=(GENERATION_CHANGED,),
            cache=False,
        )
    return builder.with_options(workers=workers, priority_queue=priority_queue).complete(reconciler)


def reconcile_all(
    reconciler: Reconciler, bundles: MultiNamespaceLister, attempts: int = 3
) -> list[Result]:
    """Reconcile every cached bundle once, in key order, on the calling thread.

    Used by ``cbop --once``. A lost race (409) is retried up to ``attempts`` times,
    0.2 s, 0.4 s, ... apart. Each reconcile runs in
    :func:`cbop.runtime.reconcile_context`, as under a controller.

    Raises:
        Requeue: the race was lost ``attempts`` times.
        ApiError, ConnectionFailed: a bundle could not be reconciled.
    """
    results = []
    for key in sorted(object_key(b) for b in bundles.list()):
        for attempt in range(attempts):
            try:
                with reconcile_context(CONTROLLER_NAME, key):
                    results.append(reconciler.reconcile(key))
                break
            except Requeue:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))
    return results


def install(context: Context, settings: ConfigBundleSettings) -> SetupFunc:
    """Install the ConfigBundle controller in a process; return its per-scope setup.

    Registers ``cbop_configmap_writes_total``, ``cbop_drift_corrections_total``,
    ``cbop_configbundles{ready}``, ``cbop_configbundles_secrets_disabled``,
    ``cbop_revision_pods_unpinned`` and ``cbop_revision_legacy_pins_namespaces`` (the
    last four read from every scope's cache at scrape time).
    """
    secrets = settings.secrets
    observer = ConfigMapWriteMetrics(context.registry)
    context.registry.register(BundleReadinessCollector(lambda: context.cached(CONFIGBUNDLES)))
    context.registry.register(
        SecretsDisabledCollector(
            lambda: context.cached(CONFIGBUNDLES), lambda b: secrets.refusal(b) is not None
        )
    )
    context.registry.register(
        RevisionCollector(
            lambda: count_unpinned(context.cached(PODS)),
            lambda: legacy_namespaces(
                context.cached(CONFIGMAPS),
                [(r.kind, w) for r in WORKLOADS for w in context.cached(r)],
            ),
        )
    )

    # One check of the pin policy per process, made with the client of the first scope
    # set up: it only reads.
    checks: list[PolicyCheck] = []

    def setup_scope(scope: Scope) -> Controller:
        if not checks:
            checks.append(PolicyCheck(scope.client))
        return setup(
            scope,
            recorder=context.recorder,
            observer=observer,
            workers=context.workers,
            priority_queue=context.priority_queue,
            pin_policy=checks[0],
            rollout=settings.rollout,
            revision_grace=settings.revision_grace_seconds,
            secrets=settings.secrets,
        )

    return setup_scope


#: The ConfigBundle controller as the process sees it (flags, informers, RBAC, install).
DEFINITION: Final = ControllerDefinition(
    name=CONTROLLER_NAME,
    summary="keeps a managed ConfigMap equal to each ConfigBundle",
    settings=ConfigBundleSettings.from_flags,
    install=install,
    flags=(REVISION_GRACE, SECRETS_FLAG, SECRETS_NAMESPACE, SECRETS_DIGEST_KEY),
    resources=(CONFIGBUNDLES, CONFIGMAPS, *HISTORY),
    more_informers=(CONFIGMAPS,),  # the sources (cbop.dev/source=true)
    controllers=1,
    rbac=(
        PolicyRule(
            ("cbop.dev",),
            ("configbundles",),
            ("get", "list", "watch", "patch"),
            "the informer and fresh reads; patch adds and removes the orphan finalizer",
        ),
        PolicyRule(("cbop.dev",), ("configbundles/status",), ("get", "update", "patch"), "status"),
        PolicyRule(
            ("cbop.dev",),
            ("configbundles/finalizers",),
            ("update",),
            "blockOwnerDeletion on the owner reference (OwnerReferencesPermissionEnforcement)",
        ),
        PolicyRule(
            ("",),
            ("configmaps",),
            ("get", "list", "watch", "create", "update", "patch", "delete"),
            "the managed ConfigMaps; list and watch the source ConfigMaps",
        ),
        PolicyRule(
            ("apps",),
            ("replicasets", "controllerrevisions"),
            ("get", "list", "watch"),
            "the history of pinned pod templates (label cbop.dev/pinned=true): a "
            "revision stays while one names it",
        ),
        PolicyRule(
            ("",),
            ("pods",),
            ("get", "list", "watch"),
            "the pods of pinned templates (label cbop.dev/pinned=true): the Pinned "
            "condition checks that they read their revisions",
        ),
        PolicyRule(
            ("admissionregistration.k8s.io",),
            ("mutatingadmissionpolicies", "mutatingadmissionpolicybindings"),
            ("get", "list", "watch"),
            "whether the policy that points pods at revisions (cbop-pin-pods) is "
            "installed and served, told in the Pinned condition of bundles with revisions",
        ),
    ),
    opt_ins=(
        OptIn(
            SECRETS_FLAG,
            informers=(SECRETS, SECRETS),  # the targets and the sources, by label
            rbac=(
                PolicyRule(
                    ("",),
                    ("secrets",),
                    ("get", "list", "watch", "create", "update", "delete"),
                    "the Secret targets (labelled app.kubernetes.io/managed-by=cbop) and "
                    "sources (cbop.dev/source=true): informers, fresh reads, writes",
                ),
            ),
            namespace_rbac=(
                PolicyRule(
                    ("",),
                    ("secrets",),
                    ("get",),
                    "read the digest key by name",
                    resource_names=("cbop-digest-key",),
                ),
                PolicyRule(("",), ("secrets",), ("create",), "make the digest key when absent"),
            ),
        ),
    ),
)
