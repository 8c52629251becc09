"""The plan before the change: the workloads a dry run's pending changes would roll.

``cbop --once --dry-run`` reconciles every bundle without writing. For each bundle whose
pending write changes its ConfigMap as the rollout sees it, this module names the
labelled workloads that the rollout (docs/rollout.md) would roll once the change is
made, so a pull request shows its blast radius before the merge. The verdict is the
rollout's own: :func:`plan_rollouts` hands each workload that reads a changed ConfigMap
to :func:`cbop.rollout.decision.decide`, with its namespace's ConfigMaps as they would
be after every pending write, and lists those decided ``apply`` or ``skip`` (a paused
Deployment), and those held by another field manager with the reason the rollout would
give. :func:`list_workloads` reads the workloads as the rollout's informers do, only in
the namespaces with a pending change; a refused list is a reason ("workloads unknown"),
not an error. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from cbop.configbundle import Result
from cbop.informers import ListWatchProblem
from cbop.keys import split_key
from cbop.kube import ApiError, Resource
from cbop.rollout import ROLLOUT_SELECTOR, decide, referenced_configmaps
from cbop.rollout import Action as RolloutAction
from cbop.rollout.controller import WORKLOADS
from cbop.rollout.decision import (
    ANNOTATION_CONFIG_HASH,
    FIELD_MANAGER,
    ManagedConfigMap,
    in_last_applied,
    managed_references,
    may_take_back,
    other_owners,
)
from cbop.runtime.seams import Lister

__all__ = [
    "ROLLOUTS_OFF",
    "Plan",
    "Rolled",
    "Workload",
    "changed_namespaces",
    "list_workloads",
    "plan_rollouts",
]

#: Why no workload is listed under ``--no-rollout``.
ROLLOUTS_OFF: Final = "rollouts are off (--no-rollout)"
#: Items per page of the workload lists.
_PAGE: Final = 500
#: What a Deployment the rollout skips (``spec.paused``) is held by.
_PAUSED: Final = "paused; rolls once resumed"


@dataclass(frozen=True, slots=True)
class Rolled:
    """A workload the pending change would roll.

    Attributes:
        kind: ``Deployment``, ``StatefulSet`` or ``DaemonSet``.
        name: its name (in the bundle's namespace).
        held: ``""`` when the rollout would roll it at once; else why it would not yet
            or not at all: a paused Deployment (rolls once resumed), or another field
            manager that applies ``cbop.dev/config-hash`` (a ``RolloutConflict``).
    """

    kind: str
    name: str
    held: str = ""

    def as_json(self) -> dict[str, str]:
        """Return ``{"kind": ..., "name": ...}``, with ``"held"`` when it is set."""
        out = {"kind": self.kind, "name": self.name}
        if self.held:
            out["held"] = self.held
        return out

    def __str__(self) -> str:
        """``Kind/name``, with `` (held)`` when it is set."""
        return f"{self.kind}/{self.name}" + (f" ({self.held})" if self.held else "")


@dataclass(frozen=True, slots=True)
class Plan:
    """What one bundle's pending change would roll.

    Attributes:
        workloads: the workloads, in the order of :data:`cbop.rollout.controller.WORKLOADS`
            (Deployments, StatefulSets, DaemonSets), then by name.
        unknown: ``""`` when ``workloads`` is the answer; else why the workloads could
            not be listed (a refused list, ``--no-rollout``), and ``workloads`` is empty.
    """

    workloads: tuple[Rolled, ...] = ()
    unknown: str = ""


@dataclass(frozen=True, slots=True)
class Workload:
    """A listed workload and its kind (listed items carry no ``kind``).

    Attributes:
        resource: the workload's resource (one of :data:`cbop.rollout.controller.WORKLOADS`).
        obj: the object as the API server listed it, ``managedFields`` included.
    """

    resource: Resource
    obj: Mapping[str, Any]

    @property
    def name(self) -> str:
        """The workload's ``metadata.name``."""
        return str(self.obj["metadata"]["name"])


@dataclass(frozen=True, slots=True)
class _Change:
    key: str
    configmap: Mapping[str, Any]


def _as_the_rollout_sees(name: str, configmap: Mapping[str, Any] | None) -> ManagedConfigMap | None:
    """Return ``configmap`` as the rollout counts it in a digest, None when it does not.

    Asks :func:`cbop.rollout.decision.managed_references` about a pod template reading
    only ``name``, so managed-or-not and the content hash are the rollout's own.
    """
    if configmap is None:
        return None
    probe = {"spec": {"template": {"spec": {"volumes": [{"configMap": {"name": name}}]}}}}
    found = managed_references(probe, {name: configmap})
    return found[0] if found else None


def _changes(results: Iterable[Result], configmaps: Lister) -> dict[str, dict[str, _Change]]:
    """Return namespace -> ConfigMap name -> the pending change the rollout would notice."""
    out: dict[str, dict[str, _Change]] = {}
    for result in results:
        body = result.written
        if not result.pending or body is None:
            continue
        namespace = split_key(result.key)[0] or ""
        name = str(body["metadata"]["name"])
        before = _as_the_rollout_sees(name, configmaps.get(namespace, name))
        if before == _as_the_rollout_sees(name, body):
            continue  # labels or annotations only: no workload's digest moves
        out.setdefault(namespace, {})[name] = _Change(result.key, body)
    return out


def changed_namespaces(results: Iterable[Result], configmaps: Lister) -> list[str]:
    """Return the sorted namespaces with a pending change the rollout would notice.

    Args:
        results: the dry run's results.
        configmaps: the managed ConfigMaps as they are now (the run's informer cache).
    """
    return sorted(_changes(results, configmaps))


def _held(workload: Mapping[str, Any], action: RolloutAction) -> str:
    """Why the rollout would not roll a workload it decided ``action`` for, ``""`` if it would."""
    if action is RolloutAction.SKIP:
        return _PAUSED
    owners = other_owners(workload, FIELD_MANAGER)
    if not owners or may_take_back(workload, FIELD_MANAGER):
        return ""  # no 409, or one the rollout answers with force
    appliers = sorted({o.manager for o in owners if o.operation == "Apply"})
    if appliers:
        who = ", ".join(appliers)
        return f"not rolled: {who} applies {ANNOTATION_CONFIG_HASH} (RolloutConflict)"
    if in_last_applied(workload):
        return (
            f"not rolled: kubectl apply keeps {ANNOTATION_CONFIG_HASH} in its "
            "last-applied-configuration (RolloutConflict)"
        )
    return "not rolled (RolloutConflict)"


def plan_rollouts(
    results: Sequence[Result],
    configmaps: Lister,
    workloads: Mapping[str, Sequence[Workload]],
    unknown: Mapping[str, str] | None = None,
) -> dict[str, Plan]:
    """Return, per bundle key with a pending change, the workloads it would roll.

    Pure: reads the arguments only.

    Args:
        results: the dry run's results; a result counts when it is ``pending`` and
            carries the ConfigMap it would write (:attr:`cbop.configbundle.Result.written`)
            and that ConfigMap differs, as the rollout sees it, from the one in
            ``configmaps`` (content, or managed at all).
        configmaps: the managed ConfigMaps as they are now (``get(namespace, name)``).
        workloads: namespace -> the opted-in workloads listed there
            (:func:`list_workloads`); a namespace missing here has none.
        unknown: namespace -> why its workloads could not be listed; its bundles get a
            :class:`Plan` with that reason.

    Returns:
        bundle key (``namespace/name``) -> :class:`Plan`, for the counted results only.
        A workload is listed under every bundle whose changed ConfigMap it reads (the
        rollout coalesces changes made together into one rollout), when
        :func:`cbop.rollout.decision.decide` decides ``apply`` or ``skip`` for it with
        every pending ConfigMap of its namespace in place of the one in ``configmaps``.
    """
    changes = _changes(results, configmaps)
    plans: dict[str, list[Rolled]] = {c.key: [] for by in changes.values() for c in by.values()}
    out: dict[str, Plan] = {}
    order = {res.plural: i for i, res in enumerate(WORKLOADS)}
    for namespace, changed in changes.items():
        reason = (unknown or {}).get(namespace)
        if reason:
            out.update({c.key: Plan(unknown=reason) for c in changed.values()})
            continue
        listed = sorted(
            workloads.get(namespace, ()), key=lambda w: (order[w.resource.plural], w.name)
        )
        for workload in listed:
            names = referenced_configmaps(workload.obj)
            hits = [n for n in names if n in changed]
            if not hits:
                continue
            after: dict[str, Mapping[str, Any]] = {}
            for name in names:
                cm = changed[name].configmap if name in changed else configmaps.get(namespace, name)
                if cm is not None:
                    after[name] = cm
            decision = decide(workload.obj, after)
            if decision.action not in (RolloutAction.APPLY, RolloutAction.SKIP):
                continue
            rolled = Rolled(
                workload.resource.kind, workload.name, _held(workload.obj, decision.action)
            )
            for name in hits:
                plans[changed[name].key].append(rolled)
    for key, rolled_list in plans.items():
        out.setdefault(key, Plan(tuple(rolled_list)))
    return out


def _list_all(
    list_page: Callable[..., dict[str, Any]], resource: Resource, namespace: str | None
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = list_page(
            resource, namespace, label_selector=ROLLOUT_SELECTOR, limit=_PAGE, continue_=token
        )
        items.extend(page.get("items") or ())
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None:
            return items


def list_workloads(
    list_page: Callable[..., dict[str, Any]],
    namespaces: Sequence[str],
    *,
    cluster_scope: bool,
) -> tuple[dict[str, list[Workload]], dict[str, str]]:
    """List the opted-in workloads of ``namespaces``, as the rollout's informers select them.

    Args:
        list_page: :meth:`cbop.kube.KubeClient.list` (one page per call; pages are
            followed with ``continue``, 500 items each).
        namespaces: the namespaces whose workloads are needed.
        cluster_scope: list each kind once across all namespaces (cbop runs without
            ``--namespace``, with the ClusterRole); else once per namespace and kind.

    Returns:
        (namespace -> workloads of the three kinds labelled ``cbop.dev/rollout=true``,
        namespace -> why its workloads are unknown). A refused (403) or failed list
        makes its namespace (at cluster scope, every namespace) unknown, with the
        problem's one line (``forbidden to list deployments.apps in namespace "x"
        (403): ...``), so that a missing ``apps`` rule never fails the dry run.
        Never raises :class:`cbop.kube.ApiError` (a connection failure included).
    """
    wanted = set(namespaces)
    found: dict[str, list[Workload]] = {ns: [] for ns in wanted}
    unknown: dict[str, str] = {}
    scopes: list[str | None] = [None] if cluster_scope else [*sorted(wanted)]
    for scope in scopes:
        for resource in WORKLOADS:
            try:
                items = _list_all(list_page, resource, scope)
            except ApiError as err:
                reason = ListWatchProblem.of("list", resource, scope, err).message
                for ns in wanted if scope is None else {scope}:
                    unknown.setdefault(ns, reason)
                continue
            for item in items:
                ns = str((item.get("metadata") or {}).get("namespace") or scope or "")
                if ns in wanted:
                    found[ns].append(Workload(resource, item))
    return found, unknown
