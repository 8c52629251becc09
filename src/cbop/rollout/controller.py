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

from dataclasses import dataclass, field
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
from cbop.rollout.references import SecretReader
from cbop.runtime import Builder, Controller, Scope
from cbop.runtime.definition import (
    Context,
    ControllerDefinition,
    Flag,
    FlagValues,
    PolicyRule,
    SetupFunc,
)
from cbop.runtime.predicates import GENERATION_CHANGED, LABELS_CHANGED, any_of
from cbop.runtime.seams import EventSink
from cbop.secretaccess import DigestKey, SecretsScope, parse_key_name, parse_namespaces

__all__ = [
    "DEFINITION",
    "ROLLOUT_FLAG",
    "WORKLOADS",
    "WORKLOAD_CHANGED",
    "RolloutSettings",
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


#: ``--rollout``.
ROLLOUT_FLAG: Final = Flag(
    "rollout",
    defaults.ROLLOUT,
    "roll Deployments, StatefulSets and DaemonSets labelled cbop.dev/rollout=true "
    "when the managed ConfigMaps and Secrets they read change (needs get/list/watch/patch "
    "on them)",
)
#: The ConfigBundle controller's flags of Secrets, read here (it offers them): the
#: rollout reads the Secrets it writes, where it writes them, under the same key.
SECRETS_FLAG: Final = Flag("secrets", defaults.SECRETS)
SECRETS_NAMESPACE: Final = Flag("secrets-namespace", "")
SECRETS_DIGEST_KEY: Final = Flag("secrets-digest-key", defaults.SECRETS_DIGEST_KEY)


@dataclass(frozen=True)
class RolloutSettings:
    """The rollout controllers' settings, from the parsed flags.

    Attributes:
        enabled: roll the opted-in workloads (``--rollout``).
        secrets: where the workloads' Secret references are read (``--secrets``,
            ``--secrets-namespace``, ``--secrets-digest-key``; off: they count as
            nothing).
    """

    enabled: bool = defaults.ROLLOUT
    secrets: SecretsScope = field(default_factory=SecretsScope)

    @classmethod
    def from_flags(cls, flags: FlagValues) -> RolloutSettings:
        """Return the settings of the parsed ``flags``.

        Raises:
            ValueError: ``--secrets-digest-key`` is not ``NAMESPACE/NAME``.
        """
        secrets = SecretsScope(
            enabled=flags[SECRETS_FLAG],
            namespaces=parse_namespaces(flags[SECRETS_NAMESPACE]),
            digest_key=parse_key_name(flags[SECRETS_DIGEST_KEY] or defaults.SECRETS_DIGEST_KEY),
        )
        return cls(enabled=flags[ROLLOUT_FLAG], secrets=secrets)


def controller_name(resource: Resource) -> str:
    """Return the controller's name for ``resource``: ``rollout-deployment``, ..."""
    return f"rollout-{resource.kind.lower()}"


def setup(
    scope: Scope,
    *,
    recorder: EventSink | None = None,
    observer: RolloutObserver | None = None,
    workers: int | None = None,
    priority_queue: bool | None = None,
    secrets: SecretsScope | None = None,
) -> list[Controller]:
    """Add one rollout controller per workload kind to ``scope``; return them.

    Args:
        scope: the scope (the process's one, or a shard's): its client, its informers,
            its metrics.
        recorder: where Events go (None: none).
        observer: ``cbop_rollouts_total`` (None: no metrics).
        workers: worker threads per controller (None: the runtime's default, 4).
        priority_queue: see :meth:`cbop.runtime.Builder.with_options` (None: on).
        secrets: where cbop serves Secrets, and the digest key's Secret (None or off:
            Secret references count as nothing, and no Secret is watched). The key is
            read once per scope, when a managed Secret is first read.

    Raises:
        ValueError: the scope has a controller of one of these names already.
    """
    configmaps = scope.lister(CONFIGMAPS, label_selector=MANAGED_SELECTOR)
    served = secrets or SecretsScope()
    namespaces = served.informer_namespaces(scope.informers.scopes)
    reads = None
    if namespaces:
        # The managed-Secret informer is the ConfigBundle controller's: no other watch.
        key = DigestKey(scope.client, *served.digest_key)
        reads = SecretReader(
            secrets=scope.lister(SECRETS, label_selector=MANAGED_SELECTOR, namespaces=namespaces),
            bundles=scope.lister(CONFIGBUNDLES),
            serves=served.serves,
            key=key.key,
        )
    controllers = []
    for resource in WORKLOADS:
        name = controller_name(resource)
        workloads = scope.lister(resource, label_selector=ROLLOUT_SELECTOR, indexers=dict(INDEXERS))
        coalescer = ChangeCoalescer()
        reconciler = RolloutReconciler(
            resource=resource,
            client=scope.client,
            workloads=workloads,
            configmaps=configmaps,
            recorder=recorder,
            observer=observer,
            coalescer=coalescer,
            controller_name=name,
            secrets=reads,
        )
        builder = (
            Builder(scope, name)
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


def install(context: Context, settings: RolloutSettings) -> SetupFunc:
    """Install the rollout controllers in a process; return their per-scope setup.

    Registers ``cbop_rollouts_total{kind}`` (every kind from 0).
    """
    metrics = RolloutMetrics(context.registry)

    def setup_scope(scope: Scope) -> list[Controller]:
        return setup(
            scope,
            recorder=context.recorder,
            observer=metrics,
            workers=context.workers,
            priority_queue=context.priority_queue,
            secrets=settings.secrets,
        )

    return setup_scope


#: The rollout controllers as the process sees them (flags, informers, RBAC, install).
DEFINITION: Final = ControllerDefinition(
    name="rollout",
    summary="rolls labelled workloads when the managed ConfigMaps and Secrets they read change",
    settings=RolloutSettings.from_flags,
    install=install,
    flags=(ROLLOUT_FLAG,),
    enabled=lambda settings: settings.enabled,
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
