"""The rollout controllers: one per workload kind, on the generic runtime (docs/rollout.md).

For each of Deployments, StatefulSets and DaemonSets, :func:`setup` adds a controller
named ``rollout-<kind>`` with its caches (the workloads labelled
``cbop.dev/rollout=true``, filtered by the API server so that only opted-in workloads
are cached, indexed by the ConfigMaps and Secrets they reference; the managed
ConfigMaps and, with ``--secrets``, the managed Secrets, through the very informers the
ConfigBundle controller reads), its key mapping (a workload's generation or labels
changed: its key; a managed ConfigMap or Secret changed: the keys of the workloads that
read it) and its :class:`cbop.rollout.RolloutReconciler`. No other Secret is watched.
``cbop --once`` does not run these controllers.
"""

from __future__ import annotations

from typing import Final

from cbop import defaults
from cbop.api import MANAGED_SELECTOR
from cbop.kube import (
    CONFIGBUNDLES,
    CONFIGMAPS,
    DAEMONSETS,
    DEPLOYMENTS,
    SECRETS,
    STATEFULSETS,
    Resource,
)
from cbop.metrics.rollout import RolloutMetrics
from cbop.rollout import (
    INDEXERS,
    ROLLOUT_SELECTOR,
    ChangeCoalescer,
    RolloutObserver,
    RolloutReconciler,
    configmap_mapper,
    secret_mapper,
)
from cbop.rollout.references import SecretReads
from cbop.runtime import Builder, Controller, Scope
from cbop.runtime.definition import Context, ControllerDefinition, Flag, PolicyRule, SetupFunc
from cbop.runtime.predicates import GENERATION_CHANGED, LABELS_CHANGED, any_of
from cbop.runtime.seams import EventSink
from cbop.secretaccess import DigestKey, SecretsScope, parse_key_name

__all__ = [
    "DEFINITION",
    "WORKLOADS",
    "WORKLOAD_CHANGED",
    "controller_name",
    "install",
    "setup",
]

#: The workload events a rollout reconcile can act on: a new generation (the pod
#: template, ``paused``, a deletion begun) or new labels (opting in or out, the
#: baseline). Status updates, which the workload's controller writes many times per
#: rollout, and resyncs change neither and enqueue nothing.
WORKLOAD_CHANGED: Final = any_of(GENERATION_CHANGED, LABELS_CHANGED)

#: The workload kinds cbop rolls, one controller each.
WORKLOADS: Final = (DEPLOYMENTS, STATEFULSETS, DAEMONSETS)


def controller_name(resource: Resource) -> str:
    """Return the controller's name for ``resource``: ``rollout-deployment``, ..."""
    return f"rollout-{resource.kind.lower()}"


def setup(
    manager: Scope,
    *,
    recorder: EventSink | None = None,
    observer: RolloutObserver | None = None,
    workers: int | None = None,
    priority_queue: bool | None = None,
    secrets: SecretsScope | None = None,
    digest_key: tuple[str, str] = parse_key_name(defaults.SECRETS_DIGEST_KEY),
) -> list[Controller]:
    """Add one rollout controller per workload kind to ``manager``; return them.

    Args:
        manager: the runtime manager or a shard's scope (its client, its informers, its
            metrics).
        recorder: where Events go (None: none).
        observer: ``cbop_rollouts_total`` (None: no metrics).
        workers: worker threads per controller (None: the runtime's default, 4).
        priority_queue: see :meth:`cbop.runtime.Builder.with_options` (None: on).
        secrets: where cbop serves Secrets (None or off: Secret references count as
            nothing, and no Secret is watched).
        digest_key: ``(namespace, name)`` of the digest key Secret
            (``--secrets-digest-key``), read once per scope when a managed Secret is
            first read.

    Raises:
        ValueError: the manager has a controller of one of these names already.
    """
    configmaps = manager.lister(CONFIGMAPS, label_selector=MANAGED_SELECTOR)
    scope = secrets or SecretsScope()
    namespaces = scope.informer_namespaces(manager.informers.scopes)
    reads = None
    if namespaces:
        # The managed-Secret informer is the ConfigBundle controller's: no other watch.
        key = DigestKey(manager.client, *digest_key)
        reads = SecretReads(
            secrets=manager.lister(SECRETS, label_selector=MANAGED_SELECTOR, namespaces=namespaces),
            bundles=manager.lister(CONFIGBUNDLES),
            serves=scope.serves,
            key=key.key,
        )
    controllers = []
    for resource in WORKLOADS:
        name = controller_name(resource)
        workloads = manager.lister(
            resource, label_selector=ROLLOUT_SELECTOR, indexers=dict(INDEXERS)
        )
        coalescer = ChangeCoalescer()
        reconciler = RolloutReconciler(
            resource=resource,
            client=manager.client,
            workloads=workloads,
            configmaps=configmaps,
            recorder=recorder,
            observer=observer,
            coalescer=coalescer,
            controller_name=name,
            secrets=reads,
        )
        builder = (
            Builder(manager, name)
            .for_(resource, label_selector=ROLLOUT_SELECTOR, predicates=(WORKLOAD_CHANGED,))
            .watches(
                CONFIGMAPS,
                configmap_mapper(workloads, coalescer),
                label_selector=MANAGED_SELECTOR,
            )
        )
        if namespaces:
            builder = builder.watches(
                SECRETS,
                secret_mapper(workloads, coalescer),
                label_selector=MANAGED_SELECTOR,
                namespaces=namespaces,
            )
        controllers.append(
            builder.with_options(workers=workers, priority_queue=priority_queue).complete(
                reconciler
            )
        )
    return controllers


def install(context: Context) -> SetupFunc:
    """Install the rollout controllers in a process; return their per-scope setup.

    Registers ``cbop_rollouts_total{kind}`` (every kind from 0). Reads the Secrets'
    flags of the ConfigBundle controller (``--secrets``, ``--secrets-namespace``,
    ``--secrets-digest-key``): the rollout serves Secrets where it does.

    Raises:
        ValueError: ``--secrets-digest-key`` is not ``NAMESPACE/NAME``.
    """
    metrics = RolloutMetrics(context.registry)
    secrets = SecretsScope.from_settings(context.settings)
    digest_key = parse_key_name(
        str(context.settings.get("secrets_digest_key", defaults.SECRETS_DIGEST_KEY))
    )

    def setup_scope(scope: Scope) -> list[Controller]:
        return setup(
            scope,
            recorder=context.recorder,
            observer=metrics,
            workers=context.workers,
            priority_queue=context.priority_queue,
            secrets=secrets,
            digest_key=digest_key,
        )

    return setup_scope


#: The rollout controllers as the process sees them (flags, informers, RBAC, install).
DEFINITION: Final = ControllerDefinition(
    name="rollout",
    summary="rolls labelled workloads when the managed ConfigMaps and Secrets they read change",
    install=install,
    flags=(
        Flag(
            "rollout",
            defaults.ROLLOUT,
            "roll Deployments, StatefulSets and DaemonSets labelled cbop.dev/rollout=true "
            "when the managed ConfigMaps they read change (needs get/list/watch/patch on them)",
        ),
    ),
    enabled=lambda settings: bool(settings.get("rollout")),
    resources=(CONFIGMAPS, *WORKLOADS),
    controllers=len(WORKLOADS),
    rbac=(
        PolicyRule(
            ("apps",),
            ("deployments", "statefulsets", "daemonsets"),
            ("get", "list", "watch", "patch"),
            "the opted-in workloads; patch is the server-side apply of the annotations "
            "and labels cbop sets (docs/rollout.md)",
        ),
        PolicyRule(("",), ("configmaps",), ("get", "list", "watch"), "the managed ConfigMaps"),
    ),
)
