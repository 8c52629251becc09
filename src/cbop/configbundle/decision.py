"""The reconcile decision: desired vs actual -> one action. Pure; no client, no threads.

:func:`decide` looks at a bundle, its parsed spec (or the reason it cannot be parsed)
and the ConfigMap that exists (or None), and returns a :class:`Decision`: what to write,
if anything, and why. A Secret target is decided by the same rules (:data:`SECRET`,
its render and content from :mod:`cbop.configbundle.secret`), plus one: a Secret of
another type is a conflict, never changed. The act layer
(:mod:`cbop.configbundle.reconcile`) performs it. The order of the checks is the policy:

1. A bundle being deleted gets no ConfigMap writes; only the Orphan finalizer's release
   of the ConfigMap (case "deletionPolicy: Orphan"). A Secret target cbop may not
   write (Secrets off) keeps the finalizer: its Secret cannot be released.
2. ``suspend: true`` -> no writes.
3. An invalid spec -> ``INVALID`` (terminal: only a spec change can fix it).
4. No ConfigMap -> ``CREATE``.
5. A ConfigMap cbop does not control -> ``CONFLICT`` (never modified), unless cbop
   itself released it from a bundle of this namespace and name (``deletionPolicy:
   Orphan``; the ``cbop.dev/released-by`` annotation) and nothing else controls it
   since: then this bundle adopts it (``UPDATE``/``REPLACE`` with ``adopted``).
6. In sync -> ``NONE`` (no write at all).
7. Content must change on an immutable ConfigMap -> ``REPLACE`` (delete + create).
8. Otherwise -> ``UPDATE``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from cbop.api import (
    ANNOTATION_CONTENT_HASH,
    ANNOTATION_MANAGED_ANNOTATIONS,
    ANNOTATION_MANAGED_LABELS,
    ANNOTATION_RELEASED_BY,
    CONDITION_READY,
    FINALIZER_ORPHAN,
    LABEL_BUNDLE,
    LABEL_MANAGED_BY,
    BundleSpec,
    DeletionPolicy,
    Kind,
    Reason,
    SpecError,
    controller_reference,
    is_bundle_reference,
    target_of,
)
from cbop.configbundle import secret
from cbop.configbundle.desired import (
    JSON,
    DesiredConfigMap,
    content_matches,
    desired_configmap,
    in_sync,
    is_controlled_by,
    render,
)
from cbop.keys import object_key


class Action(enum.StrEnum):
    """What the reconcile does to the ConfigMap."""

    NONE = "none"
    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    CONFLICT = "conflict"
    INVALID = "invalid"
    SUSPENDED = "suspended"
    RELEASE = "release"
    DELETING = "deleting"


class FinalizerChange(enum.StrEnum):
    """A change to the bundle's ``cbop.dev/orphan`` finalizer."""

    ADD = "add"
    REMOVE = "remove"


@dataclass(frozen=True, slots=True)
class Decision:
    """One reconcile decision.

    Attributes:
        action: what to do.
        desired: the desired ConfigMap (None when the spec is invalid or not needed).
        body: the ConfigMap body to write for CREATE/UPDATE/REPLACE/RELEASE, else None.
        drift: True when the ConfigMap differs from a spec that cbop had already applied
            (someone else edited or deleted it), as opposed to a spec change.
        error: the spec error for INVALID.
        message: a sentence for the user (condition message, Event).
        finalizer: a change to the bundle's Orphan finalizer, or None.
        precondition: for REPLACE, the ``uid`` and ``resourceVersion`` the delete of the
            old ConfigMap is conditional on (so a newer object is never deleted).
        adopted: for UPDATE/REPLACE, the ConfigMap is one this bundle's namesake released
            (``deletionPolicy: Orphan``) and is being taken back.
    """

    action: Action
    desired: DesiredConfigMap | None = None
    body: JSON | None = None
    drift: bool = False
    error: SpecError | None = None
    message: str = ""
    finalizer: FinalizerChange | None = None
    precondition: Mapping[str, str] | None = None
    adopted: bool = False


def has_finalizer(bundle: Mapping[str, Any]) -> bool:
    """Whether the bundle carries cbop's Orphan finalizer."""
    return FINALIZER_ORPHAN in (bundle.get("metadata", {}).get("finalizers") or ())


def _was_synced(bundle: Mapping[str, Any], desired: DesiredConfigMap) -> bool:
    """Whether status says cbop already made the ConfigMap match this generation's content.

    Then a ConfigMap that differs was changed by someone else (drift). The content hash
    in status must be the desired one too: a bundle with sources gets new content from
    a changed source within one generation, and that is no drift.
    """
    status = bundle.get("status") or {}
    if status.get("observedGeneration") != bundle["metadata"].get("generation"):
        return False
    if status.get("contentHash") not in (None, desired.content_hash):
        return False
    return any(
        c.get("type") == CONDITION_READY and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def status_can_wait(bundle: Mapping[str, Any], decision: Decision) -> bool:
    """Whether the status write of ``decision`` may wait for the ConfigMap's watch event.

    True for a ConfigMap update or replace that carries new content within a generation
    whose status already says Ready: what a changed source brings (docs/sources.md). The
    spec did not change, so ``observedGeneration`` and the Ready condition stay true; only
    ``contentHash``, the provenance and ``revision`` are behind, and the reconcile that
    the ConfigMap's own watch event brings writes them. Writing every reader's ConfigMap
    before any reader's status is what makes one source change reach its readers with
    one write each (the status writes follow, as a second round). False for a spec change,
    a bundle not Ready, drift (the status already says this content) and every other
    action: their status is written in the same reconcile.
    """
    if decision.action not in (Action.UPDATE, Action.REPLACE) or decision.drift:
        return False
    desired = decision.desired
    status = bundle.get("status") or {}
    if desired is None or status.get("contentHash") in (None, desired.content_hash):
        return False
    if status.get("observedGeneration") != bundle["metadata"].get("generation"):
        return False
    return any(
        c.get("type") == CONDITION_READY
        and c.get("status") == "True"
        and c.get("observedGeneration") == status.get("observedGeneration")
        for c in status.get("conditions") or ()
    )


def release_body(current: Mapping[str, Any], bundle: Mapping[str, Any]) -> JSON:
    """Return ``current`` without cbop's owner reference, labels and annotations.

    Used for ``deletionPolicy: Orphan``: the ConfigMap stays, content untouched, and is
    no longer managed (nor garbage-collected with the bundle). It is marked
    ``cbop.dev/released-by: <namespace>/<name>`` so that a bundle of the same namespace
    and name can take it back (see :func:`released_to`).
    """
    meta = dict(current["metadata"])
    meta.pop("managedFields", None)
    uid = bundle["metadata"]["uid"]
    meta["ownerReferences"] = [r for r in meta.get("ownerReferences") or () if r.get("uid") != uid]
    annotations = dict(meta.get("annotations") or {})
    labels = dict(meta.get("labels") or {})
    for key in (LABEL_MANAGED_BY, LABEL_BUNDLE):
        labels.pop(key, None)
    for key in (ANNOTATION_CONTENT_HASH, ANNOTATION_MANAGED_LABELS, ANNOTATION_MANAGED_ANNOTATIONS):
        annotations.pop(key, None)
    annotations[ANNOTATION_RELEASED_BY] = object_key(bundle)
    meta["labels"] = labels
    meta["annotations"] = annotations
    return {**current, "metadata": meta}


def released_to(current: Mapping[str, Any], bundle: Mapping[str, Any]) -> bool:
    """Whether ``bundle`` may take back ``current``, a ConfigMap cbop released.

    True when ``current`` carries ``cbop.dev/released-by`` naming the bundle's
    namespace and name, and no controller owner reference (someone who made the
    ConfigMap theirs since keeps it). The bundle's UID is not compared: the bundle that
    released it is gone, and its namesake is what a re-apply brings back.
    """
    annotations = current.get("metadata", {}).get("annotations") or {}
    return (
        annotations.get(ANNOTATION_RELEASED_BY) == object_key(bundle)
        and controller_reference(current) is None
    )


_SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "generation", "selfLink")


def without_server_fields(body: JSON) -> JSON:
    """Return ``body`` without the metadata the API server sets, ready to be created again."""
    meta = {k: v for k, v in body["metadata"].items() if k not in _SERVER_FIELDS}
    return {**body, "metadata": meta}


def _no_conflict(desired: DesiredConfigMap, current: Mapping[str, Any]) -> str | None:
    return None


@dataclass(frozen=True)
class TargetOps:
    """What :func:`decide` needs to know of the kind of a bundle's target.

    Attributes:
        kind: ConfigMap or Secret.
        noun: how messages name it.
        name_field: the spec field that names it (messages say to change it).
        render: the body a write of the desired object makes of the current one.
        content_matches: whether the current object's content is the desired one.
        in_sync: whether writing :attr:`render` would change nothing.
        conflict: why an object the bundle keeps (or may take back) cannot be kept
            as it is (a Secret of another type), or None.
    """

    kind: Kind
    noun: str
    name_field: str
    render: Callable[[DesiredConfigMap, Mapping[str, Any] | None], JSON]
    content_matches: Callable[[DesiredConfigMap, Mapping[str, Any]], bool]
    in_sync: Callable[[DesiredConfigMap, Mapping[str, Any]], bool]
    conflict: Callable[[DesiredConfigMap, Mapping[str, Any]], str | None] = _no_conflict


#: A ConfigMap target (:mod:`cbop.configbundle.desired`).
CONFIGMAP: Final = TargetOps(
    Kind.CONFIGMAP, "ConfigMap", "spec.configMapName", render, content_matches, in_sync
)
#: A Secret target (:mod:`cbop.configbundle.secret`).
SECRET: Final = TargetOps(
    Kind.SECRET,
    "Secret",
    "spec.target.name",
    secret.render,
    secret.content_matches,
    secret.in_sync,
    secret.type_conflict,
)


def decide(
    bundle: Mapping[str, Any],
    spec: BundleSpec | SpecError,
    current: Mapping[str, Any] | None,
    *,
    desired_of: Callable[[Mapping[str, Any], BundleSpec], DesiredConfigMap] = desired_configmap,
    synced: Callable[[DesiredConfigMap, Mapping[str, Any]], bool] = in_sync,
    ops: TargetOps | None = None,
) -> Decision:
    """Decide what to do for ``bundle`` given the ConfigMap that exists.

    Args:
        bundle: the ConfigBundle object (dict), never mutated.
        spec: its parsed spec, or the :class:`SpecError` parsing raised.
        current: the ConfigMap named by the spec as it exists, or None.
        desired_of: computes the desired ConfigMap (default
            :func:`~cbop.configbundle.desired.desired_configmap`); a memoised equivalent
            may be passed (:class:`cbop.configbundle.memo.DecisionMemo`).
        synced: whether a ConfigMap is in sync with the desired one (default
            :func:`~cbop.configbundle.desired.in_sync`), or a memoised equivalent.
        ops: the kind of the target (:data:`CONFIGMAP`, the default, or :data:`SECRET`,
            whose ``desired_of`` and ``synced`` the caller passes too).

    Returns:
        A :class:`Decision`; see the module docstring for the order of the rules.

    Raises:
        ValueError: ``spec``'s target is of another kind than ``ops``: a Secret target
            is never decided as a ConfigMap, nor the other way round.
    """
    meta = bundle["metadata"]
    ops = ops or CONFIGMAP
    target = spec.target if isinstance(spec, BundleSpec) else target_of(bundle)
    if isinstance(spec, BundleSpec) and spec.target.kind is not ops.kind:
        raise ValueError(f"a {spec.target.kind.value} target decided as a {ops.noun} (a bug)")
    name = target.name if target is not None else meta["name"]
    owned = current is not None and is_controlled_by(current, bundle)

    if meta.get("deletionTimestamp"):
        if not has_finalizer(bundle):
            return Decision(Action.DELETING, message="the bundle is being deleted")
        if isinstance(spec, SpecError) and spec.reason is Reason.SECRETS_DISABLED:
            # cbop may not write the Secret, so it cannot release it; removing the
            # finalizer would let the garbage collector delete what Orphan keeps.
            held = SpecError(
                f"{spec.message}. The bundle is being deleted with deletionPolicy Orphan: "
                f"cbop keeps its {FINALIZER_ORPHAN} finalizer until it may release the "
                "Secret (turn Secrets on, or run cbop release with a kubeconfig that may "
                "update Secrets)",
                Reason.SECRETS_DISABLED,
            )
            return Decision(Action.INVALID, error=held, message=held.message)
        body = release_body(current, bundle) if current is not None and owned else None
        return Decision(
            Action.RELEASE,
            body=body,
            message=f"{ops.noun} {name} released (deletionPolicy Orphan)",
            finalizer=FinalizerChange.REMOVE,
        )

    finalizer = None
    # A spec whose sources failed is still a valid spec: its deletionPolicy holds, so an
    # Orphan bundle deleted meanwhile still leaves its ConfigMap (with the last good content).
    parsed = spec if isinstance(spec, BundleSpec) else spec.spec
    if parsed is not None:
        wants = parsed.deletion_policy is DeletionPolicy.ORPHAN
        if wants and not has_finalizer(bundle):
            finalizer = FinalizerChange.ADD
        elif not wants and has_finalizer(bundle):
            finalizer = FinalizerChange.REMOVE

    if isinstance(spec, SpecError):
        return Decision(Action.INVALID, error=spec, message=spec.message, finalizer=finalizer)
    if spec.suspend:
        return Decision(
            Action.SUSPENDED,
            message=f"spec.suspend is true; cbop makes no changes to the {ops.noun}",
            finalizer=finalizer,
        )

    desired = desired_of(bundle, spec)
    if current is None:
        return Decision(
            Action.CREATE,
            desired=desired,
            body=ops.render(desired, None),
            drift=_was_synced(bundle, desired),
            message=f"{ops.noun} {name} created",
            finalizer=finalizer,
        )
    adopted = not owned and released_to(current, bundle)
    if not owned and not adopted:
        ref = controller_reference(current)
        if ref is not None and is_bundle_reference(ref) and ref.get("name") == meta["name"]:
            why = (
                f"{ops.noun} {name} still belongs to an earlier ConfigBundle {meta['name']} "
                f"(uid {ref.get('uid')}); waiting for the garbage collector to delete it"
            )
        elif ref is not None:
            why = (
                f"{ops.noun} {name} exists and is controlled by {ref.get('kind')} "
                f"{ref.get('name')}; cbop will not modify it. Delete it or choose another "
                f"{ops.name_field}"
            )
        else:
            why = (
                f"{ops.noun} {name} exists and is not managed by this ConfigBundle; cbop "
                f"will not modify it. Delete it or choose another {ops.name_field}"
            )
        return Decision(Action.CONFLICT, desired=desired, message=why, finalizer=finalizer)
    kept = ops.conflict(desired, current)
    if kept is not None:
        return Decision(Action.CONFLICT, desired=desired, message=kept, finalizer=finalizer)
    if synced(desired, current):
        return Decision(Action.NONE, desired=desired, finalizer=finalizer)

    drift = _was_synced(bundle, desired)
    message = ""
    if adopted:
        restored = "" if ops.content_matches(desired, current) else "; its content was restored"
        message = (
            f"{ops.noun} {name} taken back: ConfigBundle {meta['name']} released it earlier "
            f"(deletionPolicy Orphan){restored}"
        )
    if current.get("immutable") and not (
        desired.immutable and ops.content_matches(desired, current)
    ):
        return Decision(
            Action.REPLACE,
            desired=desired,
            body=without_server_fields(ops.render(desired, current)),
            drift=drift,
            precondition={
                "uid": current["metadata"]["uid"],
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
            message=message
            if adopted
            else (
                f"{ops.noun} {name} is immutable and its content or immutability had to "
                "change; deleted and recreated it"
            ),
            finalizer=finalizer,
            adopted=adopted,
        )
    return Decision(
        Action.UPDATE,
        desired=desired,
        body=ops.render(desired, current),
        drift=drift,
        message=message
        if adopted
        else (
            f"{ops.noun} {name} was changed outside cbop; restored it"
            if drift
            else f"{ops.noun} {name} updated"
        ),
        finalizer=finalizer,
        adopted=adopted,
    )
