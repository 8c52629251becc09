"""The ClusterConfigBundle decision: caches in, stamp actions and a status out.

Pure functions on parsed-JSON dicts; no client, no threads (an import-linter contract).
:func:`decide_namespace` is one stamp's work (create, update or delete the stamp in one
namespace); :func:`decide` applies the same rules to every namespace, for the status;
:func:`status_of` makes the status from that :class:`Plan` and the refusals met while
acting, keeping ``lastTransitionTime`` while a condition holds, so an unchanged world
gives an equal status and nothing is written. Why conflicts are reported, never fought:
in a namespace where another ConfigBundle, or an older ClusterConfigBundle, holds the
name, nothing is written, and the status says so.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from cbop.api import (
    API_VERSION,
    CLUSTER_KIND,
    CONDITION_READY,
    FAILING_REASONS,
    KIND,
    LABEL_CLUSTER_BUNDLE,
    MAX_FAILED_NAMESPACES,
    ClusterReason,
    NamespaceSelector,
    SelectorError,
    controller_reference,
    is_cluster_bundle_reference,
    label_value,
    parse_selector,
    template_of,
)
from cbop.api.ownership import owner_reference_to

__all__ = [
    "FAILING_BUNDLE_REASONS",
    "Create",
    "Delete",
    "Failure",
    "Plan",
    "Update",
    "Verdict",
    "decide",
    "decide_namespace",
    "desired_stamp",
    "is_controlled_by",
    "is_terminating",
    "owner_reference",
    "status_of",
]

#: Reasons of a stamped bundle's ``Ready`` (not ``True``) that make its namespace
#: failed: :data:`cbop.api.FAILING_REASONS`, the one classification of every reason the
#: ConfigBundle controller sets. The transient rest leave it pending.
FAILING_BUNDLE_REASONS: Final = FAILING_REASONS


@dataclass(frozen=True)
class Failure:
    """One namespace that cannot be served: an entry of ``status.failedNamespaces``."""

    namespace: str
    reason: str
    message: str

    def as_status(self) -> dict[str, str]:
        """Return the ``failedNamespaces`` entry."""
        return {"namespace": self.namespace, "reason": self.reason, "message": self.message}


@dataclass(frozen=True)
class Create:
    """Create the stamp ``body`` in ``namespace``."""

    namespace: str
    body: dict[str, Any]


@dataclass(frozen=True)
class Update:
    """Put the stamp in ``namespace`` back.

    ``body`` is the cached stamp corrected, its ``resourceVersion`` kept for optimistic
    concurrency.
    """

    namespace: str
    body: dict[str, Any]


@dataclass(frozen=True)
class Delete:
    """Delete the stamp ``name`` in ``namespace`` (precondition: ``uid``)."""

    namespace: str
    name: str
    uid: str


Action = Create | Update | Delete


@dataclass(frozen=True)
class Plan:
    """What :func:`decide` found for one ClusterConfigBundle.

    Attributes:
        selected: the selected, non-terminating namespaces, sorted.
        actions: writes to make, in namespace order (creates and updates, then deletes).
        failures: namespaces that cannot be served, from the caches alone.
        ready: namespaces whose stamp is Ready for its current spec and needs no write.
        served: namespaces where a stamp is created (an Event says they are served).
        invalid: why the selector cannot be used (then nothing else is decided).
    """

    selected: tuple[str, ...] = ()
    actions: tuple[Action, ...] = ()
    failures: tuple[Failure, ...] = ()
    ready: tuple[str, ...] = ()
    served: tuple[str, ...] = ()
    invalid: str | None = None


def is_terminating(namespace: Mapping[str, Any]) -> bool:
    """Whether a Namespace is being deleted (``deletionTimestamp`` or phase Terminating)."""
    meta = namespace.get("metadata") or {}
    phase = (namespace.get("status") or {}).get("phase")
    return bool(meta.get("deletionTimestamp")) or phase == "Terminating"


def owner_reference(cluster_bundle: Mapping[str, Any]) -> dict[str, Any]:
    """Return the controller owner reference a stamp carries to ``cluster_bundle``.

    ``blockOwnerDeletion`` is true, so a foreground deletion of the ClusterConfigBundle
    waits for its stamps (it needs ``update`` on ``clusterconfigbundles/finalizers``).
    """
    return owner_reference_to(cluster_bundle, CLUSTER_KIND)


def is_controlled_by(bundle: Mapping[str, Any], cluster_bundle: Mapping[str, Any]) -> bool:
    """Whether ``cluster_bundle`` may keep ``bundle`` (a ConfigBundle of the stamp's name).

    True when the bundle's controller reference names this very ClusterConfigBundle (its
    UID), or when it has no controller reference at all but carries this
    ClusterConfigBundle's label (a stamp whose reference was removed by hand: it is
    adopted back). A bundle controlled by anything else is someone else's.
    """
    ref = controller_reference(bundle)
    meta = cluster_bundle["metadata"]
    if ref is None:
        labels = (bundle.get("metadata") or {}).get("labels") or {}
        return bool(labels.get(LABEL_CLUSTER_BUNDLE) == label_value(str(meta["name"])))
    return is_cluster_bundle_reference(ref) and bool(ref.get("uid") == meta.get("uid"))


def desired_stamp(cluster_bundle: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """Return the ConfigBundle to create in ``namespace`` for ``cluster_bundle`` (a new dict).

    It is named after the ClusterConfigBundle and labelled ``cbop.dev/cluster-bundle``
    with :func:`cbop.api.label_value` of that name (cut and hashed past 63 characters).
    """
    name = str(cluster_bundle["metadata"]["name"])
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_CLUSTER_BUNDLE: label_value(name)},
            "ownerReferences": [owner_reference(cluster_bundle)],
        },
        "spec": copy.deepcopy(template_of(cluster_bundle)),
    }


def _corrected(
    stamp: Mapping[str, Any], cluster_bundle: Mapping[str, Any], spec: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Return the stamp put back (a deep copy), or None when it is as it should be.

    Only the spec, this ClusterConfigBundle's label and its controller reference are
    put back; other labels, annotations, finalizers and non-controller references that
    other actors set are kept.
    """
    label = label_value(str(cluster_bundle["metadata"]["name"]))
    ref = owner_reference(cluster_bundle)
    meta = stamp.get("metadata") or {}
    refs = list(meta.get("ownerReferences") or ())
    labels = meta.get("labels") or {}
    if stamp.get("spec") == spec and labels.get(LABEL_CLUSTER_BUNDLE) == label and ref in refs:
        return None
    body = copy.deepcopy(dict(stamp))
    body.pop("status", None)
    body["spec"] = copy.deepcopy(dict(spec))
    new_meta = body.setdefault("metadata", {})
    new_meta.setdefault("labels", {})[LABEL_CLUSTER_BUNDLE] = label
    kept = [r for r in refs if not r.get("controller") and r.get("uid") != ref["uid"]]
    new_meta["ownerReferences"] = [*kept, ref]
    return body


def _ready_condition(bundle: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cond in (bundle.get("status") or {}).get("conditions") or ():
        if cond.get("type") == CONDITION_READY:
            return cond  # type: ignore[no-any-return]
    return None


def _stamp_state(stamp: Mapping[str, Any]) -> Failure | bool:
    """Judge a stamp needing no write: True when Ready, its Failure when failing, else False.

    Only a status written for the stamp's current generation counts (a condition of an
    older spec says nothing of this one). Failing: a reason of
    :data:`FAILING_BUNDLE_REASONS`; False (pending): a copy being made, updated or
    deleted (no status for this generation yet, a transient reason).
    """
    meta = stamp.get("metadata") or {}
    generation = meta.get("generation")
    status = stamp.get("status") or {}
    cond = _ready_condition(stamp)
    if cond is None or status.get("observedGeneration") != generation:
        return False
    if cond.get("observedGeneration", generation) != generation:
        return False
    if cond.get("status") == "True":
        return True
    reason = str(cond.get("reason", ""))
    if reason in FAILING_BUNDLE_REASONS:
        # Ready False or Unknown (Suspended) for a reason that lasts: failed, with the
        # stamp's own reason and message.
        return Failure(str(meta.get("namespace", "")), reason, str(cond.get("message", "")))
    return False


def _age_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """Return the sort key putting older first: ``creationTimestamp``, then name.

    Timestamps are RFC 3339 in UTC, so text order is time order.
    """
    meta = obj.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name", "")))


def _rivals(
    cluster_bundle: Mapping[str, Any], others: Iterable[Mapping[str, Any]]
) -> list[tuple[str, NamespaceSelector]]:
    """Return (name, selector) of each older rival keeping a ConfigMap of the same name.

    Rivals being deleted are left out; those with an unusable selector select nothing.
    """
    own_name = template_of(cluster_bundle)["configMapName"]
    own_age = _age_key(cluster_bundle)
    uid = cluster_bundle["metadata"].get("uid")
    out = []
    for other in others:
        meta = other.get("metadata") or {}
        if meta.get("uid") == uid or meta.get("deletionTimestamp"):
            continue
        if template_of(other)["configMapName"] != own_name or _age_key(other) >= own_age:
            continue
        try:
            selector = parse_selector((other.get("spec") or {}).get("namespaceSelector"))
        except SelectorError:
            continue
        out.append((str(meta.get("name", "")), selector))
    return out


@dataclass(frozen=True)
class Verdict:
    """What one ClusterConfigBundle needs in one namespace (:func:`decide_namespace`).

    Attributes:
        selected: the namespace exists, is not terminating, and the selector selects it.
        action: the one write to make there, or None.
        failure: why the namespace cannot be served, from the caches alone, or None.
        ready: the stamp is Ready for its current spec and needs no write.
    """

    selected: bool = False
    action: Action | None = None
    failure: Failure | None = None
    ready: bool = False


def _judge_selected(  # noqa: PLR0917 - private, called twice
    cluster_bundle: Mapping[str, Any],
    ns_name: str,
    labels: Mapping[str, str],
    current: Mapping[str, Any] | None,
    spec: Mapping[str, Any],
    rivals: Sequence[tuple[str, NamespaceSelector]],
) -> Verdict:
    """Judge a selected namespace: its stamp's write, conflict, or readiness."""
    meta = cluster_bundle["metadata"]
    winner = next((name for name, sel in rivals if sel.matches(labels)), None)
    if winner is not None:
        failure = Failure(
            ns_name,
            ClusterReason.CONFIGMAP_NAME_CONFLICT,
            f"ClusterConfigBundle {winner}, older, keeps ConfigMap "
            f"{spec['configMapName']} in this namespace",
        )
        owned = current is not None and is_controlled_by(current, cluster_bundle)
        return Verdict(True, _delete(current) if owned and current else None, failure)
    if current is None:
        return Verdict(True, Create(ns_name, desired_stamp(cluster_bundle, ns_name)))
    if not is_controlled_by(current, cluster_bundle):
        return Verdict(
            True,
            failure=Failure(
                ns_name,
                ClusterReason.CONFIGBUNDLE_CONFLICT,
                f"ConfigBundle {ns_name}/{meta['name']} exists and is not controlled by "
                f"ClusterConfigBundle {meta['name']}; it is left alone",
            ),
        )
    if (current.get("metadata") or {}).get("deletionTimestamp"):
        return Verdict(True)  # pending: recreated once its deletion (a release) is done
    body = _corrected(current, cluster_bundle, spec)
    if body is not None:
        return Verdict(True, Update(ns_name, body))
    state = _stamp_state(current)
    if isinstance(state, Failure):
        return Verdict(True, failure=state)
    return Verdict(True, ready=state)


def _is_releasable(stamp: Mapping[str, Any], cluster_bundle: Mapping[str, Any]) -> bool:
    """Whether ``stamp`` is this ClusterConfigBundle's own, labelled, not being deleted."""
    stamp_meta = stamp.get("metadata") or {}
    name = cluster_bundle["metadata"]["name"]
    labels = stamp_meta.get("labels") or {}
    return (
        not stamp_meta.get("deletionTimestamp")
        and stamp_meta.get("name") == name
        and labels.get(LABEL_CLUSTER_BUNDLE) == label_value(str(name))
        and is_controlled_by(stamp, cluster_bundle)
    )


def decide_namespace(
    cluster_bundle: Mapping[str, Any],
    namespace: Mapping[str, Any] | None,
    *,
    current: Mapping[str, Any] | None,
    others: Iterable[Mapping[str, Any]] = (),
) -> Verdict:
    """Decide what one ClusterConfigBundle needs in one namespace: one stamp's work.

    The per-namespace part of :func:`decide`, with the same rules: a selected,
    non-terminating namespace gets its stamp created or put back, or is failed for a
    conflict (the older rival wins; a foreign ConfigBundle is left alone); a live
    namespace the selector does not select loses this ClusterConfigBundle's stamp; a
    namespace gone or terminating gets nothing.

    Args:
        cluster_bundle: the ClusterConfigBundle (cached; never mutated).
        namespace: the cached Namespace, or None when it is not cached (gone).
        current: the ConfigBundle named after the ClusterConfigBundle in that
            namespace, whoever made it, or None.
        others: every ClusterConfigBundle, for the configMapName conflicts.

    Returns:
        A :class:`Verdict` (unselected, with no action, for a ClusterConfigBundle being
        deleted or with an unusable selector).
    """
    if namespace is None or is_terminating(namespace):
        return Verdict()
    if cluster_bundle["metadata"].get("deletionTimestamp"):
        return Verdict()
    try:
        selector = parse_selector((cluster_bundle.get("spec") or {}).get("namespaceSelector"))
    except SelectorError:
        return Verdict()
    ns_meta = namespace.get("metadata") or {}
    labels = ns_meta.get("labels") or {}
    ns_name = str(ns_meta.get("name", ""))
    if not selector.matches(labels):
        if current is not None and _is_releasable(current, cluster_bundle):
            return Verdict(action=_delete(current))
        return Verdict()
    spec = template_of(cluster_bundle)
    return _judge_selected(
        cluster_bundle, ns_name, labels, current, spec, _rivals(cluster_bundle, others)
    )


def decide(
    cluster_bundle: Mapping[str, Any],
    *,
    namespaces: Iterable[Mapping[str, Any]],
    bundle_at: Callable[[str], Mapping[str, Any] | None],
    stamps: Iterable[Mapping[str, Any]],
    others: Iterable[Mapping[str, Any]] = (),
) -> Plan:
    """Decide what one ClusterConfigBundle needs (see the module docstring).

    Args:
        cluster_bundle: the ClusterConfigBundle (cached; never mutated).
        namespaces: every cached Namespace.
        bundle_at: ``fn(namespace) -> ConfigBundle or None``: the ConfigBundle named
            after the ClusterConfigBundle in that namespace, whoever made it.
        stamps: the ConfigBundles labelled with this ClusterConfigBundle's name (as
            :func:`cbop.api.label_value` gives it), in any namespace (those whose
            namespace left the selector are deleted when this ClusterConfigBundle
            controls them).
        others: every ClusterConfigBundle (this one may be among them), for the
            configMapName conflicts.

    Returns:
        A :class:`Plan`; nothing is decided for a ClusterConfigBundle being deleted
        (garbage collection removes its stamps) or with an unusable selector (its
        stamps stay where they are until it is fixed).
    """
    meta = cluster_bundle["metadata"]
    if meta.get("deletionTimestamp"):
        return Plan()
    try:
        selector = parse_selector((cluster_bundle.get("spec") or {}).get("namespaceSelector"))
    except SelectorError as err:
        return Plan(invalid=str(err))
    spec = template_of(cluster_bundle)
    rivals = _rivals(cluster_bundle, others)
    live: dict[str, Mapping[str, str]] = {}  # namespace -> its labels
    selected: list[str] = []
    for namespace in namespaces:
        ns_meta = namespace.get("metadata") or {}
        ns_name = str(ns_meta.get("name", ""))
        if is_terminating(namespace):
            continue
        live[ns_name] = ns_meta.get("labels") or {}
        if selector.matches(live[ns_name]):
            selected.append(ns_name)
    selected.sort()
    writes: list[Action] = []
    deletes: list[Action] = []
    failures: list[Failure] = []
    ready: list[str] = []
    served: list[str] = []
    for ns_name in selected:
        verdict = _judge_selected(
            cluster_bundle, ns_name, live[ns_name], bundle_at(ns_name), spec, rivals
        )
        if verdict.failure is not None:
            failures.append(verdict.failure)
        if verdict.ready:
            ready.append(ns_name)
        if isinstance(verdict.action, Delete):
            deletes.append(verdict.action)
        elif verdict.action is not None:
            writes.append(verdict.action)
            if isinstance(verdict.action, Create):
                served.append(ns_name)
    wanted = set(selected)
    for stamp in sorted(stamps, key=_age_key):
        stamp_meta = stamp.get("metadata") or {}
        ns_name = str(stamp_meta.get("namespace", ""))
        if ns_name in wanted or ns_name not in live:
            continue
        if _is_releasable(stamp, cluster_bundle):
            deletes.append(_delete(stamp))
    deletes.sort(key=lambda d: d.namespace)
    return Plan(
        selected=tuple(selected),
        actions=(*writes, *deletes),
        failures=tuple(failures),
        ready=tuple(ready),
        served=tuple(served),
    )


def _delete(stamp: Mapping[str, Any]) -> Delete:
    meta = stamp.get("metadata") or {}
    return Delete(str(meta.get("namespace", "")), str(meta["name"]), str(meta.get("uid", "")))


def status_of(
    cluster_bundle: Mapping[str, Any],
    plan: Plan,
    refusals: Iterable[Failure] = (),
    *,
    now: datetime.datetime,
) -> dict[str, Any]:
    """Return the ``status`` ``cluster_bundle`` should carry after acting on ``plan``.

    Args:
        cluster_bundle: the ClusterConfigBundle (its ``generation`` and current
            conditions: a condition whose status holds keeps its
            ``lastTransitionTime``).
        plan: the decision.
        refusals: namespaces whose stamp the API server refused while acting.
        now: the time a changed condition records (UTC).

    Returns:
        ``{"observedGeneration", "namespaces": {selected, ready, failed},
        "failedNamespaces": [...at most 20, by namespace], "conditions": [Ready]}``.
    """
    meta = cluster_bundle["metadata"]
    generation = meta.get("generation")
    by_namespace = {f.namespace: f for f in (*plan.failures, *refusals)}
    failed = [by_namespace[ns] for ns in sorted(by_namespace)]
    selected = len(plan.selected)
    ready = len(plan.ready)
    if plan.invalid is not None:
        cond_status, reason = "False", ClusterReason.INVALID_SELECTOR
        message = f"spec.namespaceSelector: {plan.invalid}"
    elif failed:
        cond_status, reason = "False", ClusterReason.NAMESPACES_FAILING
        shown = ", ".join(f"{f.namespace} ({f.reason})" for f in failed[:5])
        more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
        message = f"{len(failed)} of {selected} namespaces failing: {shown}{more}"
    elif ready < selected:
        cond_status, reason = "False", ClusterReason.NAMESPACES_PENDING
        message = f"{ready} of {selected} namespaces ready"
    else:
        cond_status, reason = "True", ClusterReason.ALL_NAMESPACES_READY
        message = f"{ready} of {selected} namespaces ready"
    previous = _ready_condition(cluster_bundle)
    transition = (
        previous.get("lastTransitionTime")
        if previous is not None and previous.get("status") == cond_status
        else None
    )
    condition = {
        "type": CONDITION_READY,
        "status": cond_status,
        "observedGeneration": generation,
        "lastTransitionTime": transition or now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reason": reason.value,
        "message": message,
    }
    return {
        "observedGeneration": generation,
        "namespaces": {"selected": selected, "ready": ready, "failed": len(failed)},
        "failedNamespaces": [f.as_status() for f in failed[:MAX_FAILED_NAMESPACES]],
        "conditions": [condition],
    }
