"""The rollout controllers: one per workload kind, on the generic runtime (docs/rollout.md).

For each of Deployments, StatefulSets and DaemonSets, :func:`setup` adds a controller
named ``rollout-<kind>`` (``rollout-deployment``, ...) that owns three decisions:

- **its caches**: the workloads of that kind labelled ``cbop.dev/rollout=true``
  (filtered by the API server, so cbop caches only opted-in workloads), with the
  :data:`cbop.rollout.CONFIGMAP_INDEX` index from referenced ConfigMap to workload; and
  the managed ConfigMaps, read through the very informer the ConfigBundle controller
  uses (same resource, scope and selector: the shared factory hands out one informer);
- **its key mapping**: a workload event that changes its generation or labels
  (:data:`WORKLOAD_CHANGED`) enqueues the workload's key (``for_``), a managed
  ConfigMap event the keys of the workloads of that kind whose pod template
  references it (``watches`` with :func:`cbop.rollout.configmap_mapper`, which also
  feeds the controller's :class:`cbop.rollout.ChangeCoalescer`);
- **its reconciler**: :class:`cbop.rollout.RolloutReconciler`, writing with the
  manager's (fenced) client.

Besides them, per workload history kind, ``history-replicaset`` and
``history-controllerrevision`` (:class:`cbop.rollout.history.HistoryReconciler`), and
one controller ``pins`` (:class:`cbop.rollout.unpin.PinsCollector`, one worker, keyed
by ``namespace/cbop-revisions``) that drops the pins entries nothing references; the
rollout reconcilers and it share one :class:`cbop.rollout.pins.PinsGuard` per scope.

``cbop --once`` does not run these controllers.
"""

from __future__ import annotations

from typing import Final

from cbop import defaults
from cbop.api import MANAGED_SELECTOR
from cbop.informers import IndexFunc
from cbop.kube import (
    CONFIGMAPS,
    CONTROLLERREVISIONS,
    DAEMONSETS,
    DEPLOYMENTS,
    REPLICASETS,
    STATEFULSETS,
    Resource,
)
from cbop.metrics.rollout import RolloutMetrics
from cbop.rollout import (
    CONFIGMAP_INDEX,
    ROLLOUT_SELECTOR,
    ChangeCoalescer,
    RolloutObserver,
    RolloutReconciler,
    configmap_mapper,
    index_by_configmap,
)
from cbop.rollout.history import DIGEST_INDEX, HistoryReconciler, index_by_digest, pins_mapper
from cbop.rollout.pins import DEFAULT_PINS_GRACE, PinsGuard
from cbop.rollout.unpin import (
    DIGEST_CHANGED,
    OWNER_INDEX,
    PINS_ONLY,
    PinsCollector,
    index_by_owner_without_digest,
    pins_key_of,
)
from cbop.runtime import Builder, Controller, Scope
from cbop.runtime.definition import Context, ControllerDefinition, Flag, PolicyRule, SetupFunc
from cbop.runtime.predicates import GENERATION_CHANGED, LABELS_CHANGED, any_of
from cbop.runtime.seams import EventSink

__all__ = [
    "DEFINITION",
    "HISTORY",
    "PINS_CONTROLLER",
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
#: The controller that drops the pins entries nothing references
#: (:class:`cbop.rollout.unpin.PinsCollector`).
PINS_CONTROLLER: Final = "pins"
#: The workload history kinds that own the revisions their templates read, one
#: controller each (``history-replicaset``, ``history-controllerrevision``).
HISTORY: Final = (REPLICASETS, CONTROLLERREVISIONS)


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
    pins_grace: float = DEFAULT_PINS_GRACE,
) -> list[Controller]:
    """Add one rollout controller per workload kind to ``manager``; return them.

    Args:
        manager: the runtime manager or a shard's scope (its client, its informers, its
            metrics).
        recorder: where Events go (None: none).
        observer: ``cbop_rollouts_total`` (None: no metrics).
        workers: worker threads per controller (None: the runtime's default, 4).
        priority_queue: see :meth:`cbop.runtime.Builder.with_options` (None: on).
        pins_grace: seconds a pins entry is kept, referenced or not, after it was
            written or first seen (:class:`cbop.rollout.pins.PinsGuard`).

    Raises:
        ValueError: the manager has a controller of one of these names already.
    """
    configmaps = manager.lister(CONFIGMAPS, label_selector=MANAGED_SELECTOR)
    guard = PinsGuard(grace=pins_grace)
    digest_index: dict[str, IndexFunc] = {DIGEST_INDEX: index_by_digest}
    controllers = []
    for resource in WORKLOADS:
        name = controller_name(resource)
        workloads = manager.lister(
            resource,
            label_selector=ROLLOUT_SELECTOR,
            indexers={CONFIGMAP_INDEX: index_by_configmap, **digest_index},
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
            pins_guard=guard,
        )
        controllers.append(
            Builder(manager, name)
            .for_(resource, label_selector=ROLLOUT_SELECTOR, predicates=(WORKLOAD_CHANGED,))
            .watches(
                CONFIGMAPS,
                configmap_mapper(workloads, coalescer),
                label_selector=MANAGED_SELECTOR,
            )
            .with_options(workers=workers, priority_queue=priority_queue)
            .complete(reconciler)
        )
    for resource in HISTORY:
        # No server-side selector can pick the opted-in workloads' entries (they carry
        # the template's labels): the index keeps those with a digest apart.
        history = manager.lister(resource, indexers={DIGEST_INDEX: index_by_digest})
        controllers.append(
            Builder(manager, f"history-{resource.kind.lower()}")
            .for_(resource)
            .watches(CONFIGMAPS, pins_mapper(history), label_selector=MANAGED_SELECTOR)
            .with_options(workers=workers, priority_queue=priority_queue)
            .complete(
                HistoryReconciler(
                    resource=resource,
                    client=manager.client,
                    history=history,
                    configmaps=configmaps,
                )
            )
        )
    collector = PinsCollector(
        client=manager.client,
        configmaps=configmaps,
        history=[
            manager.lister(
                resource,
                indexers={**digest_index, OWNER_INDEX: index_by_owner_without_digest},
            )
            for resource in HISTORY
        ],
        workloads={
            resource.kind: manager.lister(
                resource, label_selector=ROLLOUT_SELECTOR, indexers=digest_index
            )
            for resource in WORKLOADS
        },
        guard=guard,
    )
    builder = Builder(manager, PINS_CONTROLLER).for_(
        CONFIGMAPS, label_selector=MANAGED_SELECTOR, predicates=(PINS_ONLY,)
    )
    for resource in HISTORY:
        builder = builder.watches(resource, pins_key_of, predicates=(DIGEST_CHANGED,))
    for resource in WORKLOADS:
        builder = builder.watches(
            resource, pins_key_of, label_selector=ROLLOUT_SELECTOR, predicates=(DIGEST_CHANGED,)
        )
    controllers.append(
        builder.with_options(workers=1, priority_queue=priority_queue).complete(collector)
    )
    return controllers


def install(context: Context) -> SetupFunc:
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
            pins_grace=float(context.settings.get("pins_grace", DEFAULT_PINS_GRACE)),
        )

    return setup_scope


#: The rollout controllers as the process sees them (flags, informers, RBAC, install).
DEFINITION: Final = ControllerDefinition(
    name="rollout",
    summary="rolls labelled workloads when the managed ConfigMaps they read change",
    install=install,
    flags=(
        Flag(
            "rollout",
            defaults.ROLLOUT,
            "roll Deployments, StatefulSets and DaemonSets labelled cbop.dev/rollout=true "
            "when the managed ConfigMaps they read change (needs get/list/watch/patch on them)",
        ),
        Flag(
            "pins-grace",
            DEFAULT_PINS_GRACE,
            "seconds an entry of a namespace's cbop-revisions pins is kept after it was "
            "written or first seen, even when no workload, ReplicaSet or ControllerRevision "
            "carries its digest (docs/revisions.md)",
        ),
    ),
    enabled=lambda settings: bool(settings.get("rollout")),
    resources=(CONFIGMAPS, *WORKLOADS, *HISTORY),
    controllers=len(WORKLOADS) + len(HISTORY) + 1,
    rbac=(
        PolicyRule(
            ("apps",),
            ("deployments", "statefulsets", "daemonsets"),
            ("get", "list", "watch", "patch"),
            "the opted-in workloads; patch is the server-side apply of the annotation "
            "and the baseline label",
        ),
        PolicyRule(
            ("apps",),
            ("replicasets", "controllerrevisions"),
            ("get", "list", "watch"),
            "the workloads' history, which owns the revisions its templates read",
        ),
        PolicyRule(
            ("",),
            ("configmaps",),
            ("get", "list", "watch", "create", "update", "patch"),
            "the managed ConfigMaps; create and patch the pins (cbop-revisions), update "
            "a revision's owner references",
        ),
    ),
)
