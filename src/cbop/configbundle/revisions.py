"""The revision ConfigMaps of a ConfigBundle reconcile (``spec.revisions``).

This module owns :class:`RevisionWrites`, the part of the act layer
(:class:`cbop.configbundle.Reconciler` is built on it) that keeps, with
``spec.revisions.enabled``, one immutable ConfigMap per content version besides the
ConfigMap of ``configMapName``: ``<configMapName>-<the first 10 hex digits of the
content hash>`` (:func:`cbop.api.revisions.revision_name`), and tells which one
``status.revision`` names (docs/revisions.md). It also owns :func:`revision_owners`,
which maps a revision's events to the bundle that owns it, so that a revision deleted by
hand is made again at once.

A revision carries cbop's labels (so the managed-ConfigMap informer holds it), the label
:data:`cbop.api.revisions.LABEL_REVISION_OF`, the content hash annotation, and an owner
reference to the bundle that is not a controller reference: every holder of a revision
(the bundle, and later the ReplicaSets whose template reads it) is an equal owner. An
older revision is deleted by the bundle once it is the only owner left
(:meth:`RevisionWrites._collect`); the garbage collector deletes those whose owners are
all gone (the bundle deleted with them). Not being controlled by the
bundle also keeps revisions out of the deletion of ConfigMaps a bundle controls under a
name it no longer declares (:mod:`cbop.configbundle.writes`).

Writes: a revision is created once; a revision that exists (a revert to earlier
content) is left as it is, unless it lost the bundle's owner reference, which is then
put back with one update. So a steady state writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import EllipsisType
from typing import Any, Final

import structlog

from cbop.api import (
    ANNOTATION_CONTENT_HASH,
    ANNOTATION_MANAGED_ANNOTATIONS,
    ANNOTATION_MANAGED_LABELS,
    API_VERSION,
    KIND,
    LABEL_BUNDLE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    Reason,
    SpecError,
    encode_binary,
    is_bundle_reference,
)
from cbop.api.revisions import (
    LABEL_REVISION_OF,
    PARAMS_NAME,
    parse_pins,
    parse_revisions,
    revision_name,
)
from cbop.configbundle.decision import Action, Decision
from cbop.configbundle.desired import JSON, DesiredConfigMap
from cbop.configbundle.interfaces import Lister
from cbop.configbundle.pinpolicy import PinPolicyCheck, missing_policy_note
from cbop.configbundle.report import ReconcileReports
from cbop.configbundle.status import ConditionStatus
from cbop.keys import key_of
from cbop.kube import CONFIGMAPS, ApiError

log = structlog.get_logger("cbop.configbundle")

__all__ = [
    "KEEP_REVISION",
    "POLICY_RECHECK",
    "REVISION_OF_INDEX",
    "RevisionOutcome",
    "RevisionWrites",
    "index_by_revision_of",
    "pinned_revisions",
    "revision_owners",
    "revision_reference",
    "revisions_pinned_by",
]

#: The decisions after which the plain ConfigMap is as the spec says (or is being made
#: so): only then is the current revision kept.
_KEPT = frozenset({Action.NONE, Action.CREATE, Action.UPDATE, Action.REPLACE})


#: The index of the managed-ConfigMap cache that finds a bundle's revisions
#: (:func:`index_by_revision_of`).
REVISION_OF_INDEX: Final = "revision-of"

#: Seconds until a bundle whose Ready message says the pin policy is missing is looked
#: at again (the policy may have been installed meanwhile).
POLICY_RECHECK: Final = 300.0

#: ``status.revision`` as it is: the reconcile says nothing about revisions.
KEEP_REVISION: Final[EllipsisType] = ...


@dataclass(frozen=True, slots=True)
class RevisionOutcome:
    """What the revisions part of one reconcile found and did.

    Attributes:
        status: what ``status.revision`` is to say: the current revision's name, None
            to remove it (revisions off, or no revision could be kept), or
            :data:`KEEP_REVISION` to leave it as it is (a decision that keeps no
            ConfigMap: suspended, invalid, conflict, a dry run).
        problem: when set, the Ready condition this reconcile reports instead of
            Synced: ``(reason, message)`` (a name too long for the suffix, a revision
            name taken by another ConfigMap). The plain ConfigMap is kept all the same.
        wrote: whether a revision was created, updated or deleted.
        recheck: seconds until the bundle is looked at again for ``problem`` (a name
            taken by a ConfigMap cbop may not watch), or None.
        would_create: for a dry run, the name of the revision the reconcile would
            create (none of that name in the cache), else None.
    """

    status: str | EllipsisType | None = KEEP_REVISION
    problem: tuple[Reason, str] | None = None
    wrote: bool = False
    recheck: float | None = None
    would_create: str | None = None
    note: str | None = None

    def applied_to(
        self, ready: ConditionStatus, reason: Reason, message: str, requeue: float | None
    ) -> tuple[ConditionStatus, Reason, str, float | None]:
        """Return the Ready condition and requeue to report: ``problem`` over a Synced outcome.

        Without a problem, ``note`` (the pin policy is missing) is added to a ``True``
        condition's message, which stays ``True``, and the bundle is looked at again
        within :data:`POLICY_RECHECK` seconds, so the sentence goes once the policy is
        installed.
        """
        if ready != "True":
            return ready, reason, message, requeue
        if self.problem is not None:
            return "False", self.problem[0], self.problem[1], self.recheck
        if self.note is not None:
            recheck = POLICY_RECHECK if requeue is None else min(requeue, POLICY_RECHECK)
            return ready, reason, f"{message}; {self.note}", recheck
        return ready, reason, message, requeue


def revision_reference(bundle: Mapping[str, Any]) -> JSON:
    """Return the owner reference a revision carries to ``bundle``: not a controller.

    ``controller: false``, so the bundle is one owner among equals (the ReplicaSets that
    read the revision are the others), and ``blockOwnerDeletion: false``, so writing it
    needs no permission on the bundle's ``finalizers``.
    """
    meta = bundle["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": False,
        "blockOwnerDeletion": False,
    }


def revision_owners(configmap: Mapping[str, Any]) -> list[str]:
    """Map function of the managed-ConfigMap informer: a revision -> its bundles' keys.

    Returns:
        ``["namespace/name"]`` of each ConfigBundle a non-controller owner reference of
        a ConfigMap labelled :data:`cbop.api.revisions.LABEL_REVISION_OF` names, sorted;
        for a revision left with no owner reference at all (:func:`_ownerless_revision`),
        the bundle its label names (the bundle's name, unless cut and hashed past 63
        characters: such a bundle finds it at its next resync); ``[]`` for any other
        ConfigMap. Lookups only: no API call.
    """
    meta = configmap.get("metadata") or {}
    label = (meta.get("labels") or {}).get(LABEL_REVISION_OF)
    if not isinstance(label, str):
        return []
    namespace = meta.get("namespace")
    if _ownerless_revision(configmap):
        return [key_of(namespace, label)]
    return sorted(
        {
            key_of(namespace, str(ref.get("name", "")))
            for ref in meta.get("ownerReferences") or ()
            if is_bundle_reference(ref) and not ref.get("controller")
        }
    )


def pinned_revisions(params: Mapping[str, Any] | None) -> frozenset[str]:
    """Return the names of the revisions any entry of a pins ConfigMap names.

    Args:
        params: the namespace's pins ConfigMap
            (:data:`cbop.api.revisions.PARAMS_NAME`, from the managed-ConfigMap cache:
            it carries cbop's label), or None when there is none.

    Returns:
        Every revision name on the right of a ``plain=revision`` line of any entry
        (:func:`cbop.api.revisions.parse_pins`); empty without the ConfigMap.
    """
    if params is None:
        return frozenset()
    names: set[str] = set()
    for value in (params.get("data") or {}).values():
        if isinstance(value, str):
            names.update(parse_pins(value).values())
    return frozenset(names)


def revisions_pinned_by(configmaps: Lister) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the map function: the pins ConfigMap -> the bundles holding what it names.

    A revision the pins name is never let go by its bundle (:meth:`RevisionWrites._collect`);
    once the pins stop naming it (the rollout's collection of unreferenced entries), the
    bundle must look again. The runtime maps both the old and the new object of an
    update, so a dropped entry wakes the bundles of the revisions it named.

    Args:
        configmaps: the managed-ConfigMap cache (the revisions are in it).

    Returns:
        ``fn(configmap) -> ["namespace/name", ...]``: for the pins ConfigMap, the keys of
        the bundles whose non-controller owner reference a revision it names carries
        (:func:`revision_owners`), sorted; ``[]`` for any other ConfigMap. Cache lookups
        only: no API call.
    """

    def map_pins(configmap: Mapping[str, Any]) -> list[str]:
        meta = configmap.get("metadata") or {}
        if meta.get("name") != PARAMS_NAME:
            return []
        namespace = str(meta.get("namespace") or "")
        keys: set[str] = set()
        for name in pinned_revisions(configmap):
            revision = configmaps.get(namespace, name)
            if revision is not None:
                keys.update(revision_owners(revision))
        return sorted(keys)

    return map_pins


def index_by_revision_of(configmap: Mapping[str, Any]) -> list[str]:
    """Index function of the managed-ConfigMap cache: a revision -> ``namespace/<bundle label>``.

    The value is the :data:`cbop.api.revisions.LABEL_REVISION_OF` label (the bundle's
    name, cut and hashed past 63 characters as ``cbop.dev/bundle``) in the
    ConfigMap's namespace; ``[]`` for a ConfigMap without it.
    """
    meta = configmap.get("metadata") or {}
    label = (meta.get("labels") or {}).get(LABEL_REVISION_OF)
    if not isinstance(label, str):
        return []
    return [key_of(meta.get("namespace"), label)]


#: The words of :func:`cbop.configbundle.pinpolicy.missing_policy_note` a Ready message
#: carries while the pin policy is missing.
_POLICY_MISSING_MARK: Final = missing_policy_note("").partition(":")[0]


def _ready_message(status: Mapping[str, Any]) -> str | None:
    """Return the message of the Ready condition in ``status``, or None without one."""
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            message = condition.get("message")
            return message if isinstance(message, str) else ""
    return None


def _owned_by(configmap: Mapping[str, Any], bundle: Mapping[str, Any]) -> bool:
    uid = bundle["metadata"]["uid"]
    return any(
        r.get("uid") == uid and is_bundle_reference(r)
        for r in configmap.get("metadata", {}).get("ownerReferences") or ()
    )


def _held_by(configmap: Mapping[str, Any], bundle: Mapping[str, Any]) -> bool:
    """Whether ``configmap`` carries the bundle's revision reference (never a controller one).

    A ConfigMap the bundle controls (its plain ConfigMap, even with the revision label
    set through ``spec.labels``) is never taken for a revision.
    """
    uid = bundle["metadata"]["uid"]
    refs = configmap.get("metadata", {}).get("ownerReferences") or ()
    if any(r.get("uid") == uid and r.get("controller") for r in refs):
        return False
    return any(r.get("uid") == uid and is_bundle_reference(r) for r in refs)


def _ownerless_revision(configmap: Mapping[str, Any]) -> bool:
    """Whether ``configmap`` is a revision cbop made that has no owner reference left.

    The garbage collector never deletes an object without owners, so a revision whose
    references were all taken off (by hand, or by deleting its bundle with
    ``--cascade=orphan``) would stay for ever. Such a revision (cbop's labels, the
    content hash annotation, ``immutable: true``, no owner reference) is taken back by
    the bundle its label names: held again when still among what the bundle keeps, else
    deleted (:meth:`RevisionWrites._collect`).
    """
    meta = configmap.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        not meta.get("ownerReferences")
        and isinstance(labels.get(LABEL_REVISION_OF), str)
        and labels.get(LABEL_MANAGED_BY) == MANAGED_BY_VALUE
        and ANNOTATION_CONTENT_HASH in (meta.get("annotations") or {})
        and configmap.get("immutable") is True
    )


def _is_revision_of(
    configmap: Mapping[str, Any], desired: DesiredConfigMap, bundle_label: str
) -> bool:
    """Whether ``configmap`` is this bundle's revision of ``desired``'s content."""
    meta = configmap.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    return (
        labels.get(LABEL_REVISION_OF) == bundle_label
        and labels.get(LABEL_MANAGED_BY) == MANAGED_BY_VALUE
        and annotations.get(ANNOTATION_CONTENT_HASH) == desired.content_hash
        and configmap.get("immutable") is True
    )


def revision_body(bundle: Mapping[str, Any], desired: DesiredConfigMap, name: str) -> JSON:
    """Return the revision ConfigMap ``name`` of ``desired``'s content, ready to create.

    Its labels are the plain ConfigMap's (``spec.labels`` and cbop's) plus
    :data:`cbop.api.revisions.LABEL_REVISION_OF`; its annotations the plain
    ConfigMap's without cbop's bookkeeping of managed keys (a revision's metadata is
    never updated); ``immutable: true``; the owner reference of
    :func:`revision_reference`.
    """
    labels = dict(desired.labels)
    labels[LABEL_REVISION_OF] = _bundle_label(bundle, desired)
    annotations = {
        k: v
        for k, v in desired.annotations.items()
        if k not in (ANNOTATION_MANAGED_LABELS, ANNOTATION_MANAGED_ANNOTATIONS)
    }
    out: JSON = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": desired.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [revision_reference(bundle)],
        },
        "immutable": True,
    }
    if desired.data:
        out["data"] = dict(desired.data)
    if desired.binary_data:
        out["binaryData"] = encode_binary(desired.binary_data)
    return out


def _bundle_label(bundle: Mapping[str, Any], desired: DesiredConfigMap) -> str:
    """Return the bundle's name as a label value (``cbop.dev/bundle``: cut and hashed past 63)."""
    return str(desired.labels.get(LABEL_BUNDLE, bundle["metadata"]["name"]))


class RevisionWrites(ReconcileReports):
    """The revision ConfigMaps of a reconcile (a base of :class:`Reconciler`).

    The attributes below are the reconciler's state, set by
    :class:`cbop.configbundle.Reconciler`.
    """

    _configmaps: Lister
    _pin_policy: PinPolicyCheck | None

    def _policy_note(self) -> str | None:
        """Return the Ready message's sentence on a missing pin policy, or None."""
        if self._pin_policy is None:
            return None
        missing = self._pin_policy.missing()
        return None if missing is None else missing_policy_note(missing)

    def _revision_in_place(self, bundle: Mapping[str, Any]) -> bool:
        """Whether the revisions part of a full reconcile would find nothing to do.

        For the no-op fast path (:meth:`Reconciler._unchanged`): false when
        ``status.revision`` names a ConfigMap missing from the cache (deleted by hand)
        or one without the bundle's owner reference (taken off by hand), when the
        bundle holds a revision it is to let go of (:meth:`_revision_plan`: one the pins
        named and name no more) or one of its revisions has no owner left, when the
        Ready message does not tell of the pin policy as
        :class:`cbop.configbundle.pinpolicy.PinPolicyCheck` finds it now, or when
        revisions are off and ``status.revision`` is still set. Every other change
        that matters (turning revisions on, new content, another ``keep``) is a spec
        change, which the fast path already tells by the bundle's resourceVersion. Cache
        lookups only, but for the check's GETs (at most two a minute, process-wide).
        """
        spec = bundle.get("spec") or {}
        raw = spec.get("revisions") if isinstance(spec, Mapping) else None
        status = bundle.get("status") or {}
        enabled = isinstance(raw, Mapping) and raw.get("enabled") is True
        if not enabled:
            return "revision" not in status
        name = status.get("revision")
        if not isinstance(name, str):
            return True
        namespace = bundle["metadata"]["namespace"]
        current = self._configmaps.get(namespace, name)
        if current is None or not _owned_by(current, bundle):
            return False
        message = _ready_message(status)
        if self._pin_policy is not None and message is not None:
            # The Ready message must tell of the pin policy as the check finds it now.
            note = self._policy_note()
            if (note is None and _POLICY_MISSING_MARK in message) or (
                note is not None and note not in message
            ):
                return False
        # A revision held past the newest keep while the pins named it, and named no
        # more: the pins' change woke the bundle to let go of it.
        try:
            keep = parse_revisions(bundle).keep
        except SpecError:
            return True
        label = (current.get("metadata", {}).get("labels") or {}).get(LABEL_REVISION_OF)
        if not isinstance(label, str):
            return True
        release, adopt = self._revision_plan(bundle, namespace, label, name, keep)
        return not release and not adopt

    def _keep_revision(self, bundle: Mapping[str, Any], decision: Decision) -> RevisionOutcome:
        """Make sure the revision of the desired content exists; say what status reports.

        Called before the plain ConfigMap is written, so a revision exists before any
        reader can see its content under the plain name.

        Returns:
            The :class:`RevisionOutcome`.

        Raises:
            ApiError, ConnectionFailed: a write failed in a way a retry may fix.
        """
        if decision.action not in _KEPT or decision.desired is None:
            return RevisionOutcome()
        if self._dry_run:
            return self._planned_revision(bundle, decision.desired)
        try:
            revisions = parse_revisions(bundle)
        except SpecError as err:
            return RevisionOutcome(status=None, problem=(err.reason, err.message))
        if not revisions.enabled:
            return RevisionOutcome(status=None)
        desired = decision.desired
        name = revision_name(desired.name, desired.content_hash)
        namespace = desired.namespace
        current = self._configmaps.get(namespace, name)
        wrote = False
        if current is None:
            try:
                self._client.create(
                    CONFIGMAPS,
                    namespace,
                    revision_body(bundle, desired, name),
                    field_manager=self._field_manager,
                )
                self._count("create")
                self._event(
                    bundle,
                    "Normal",
                    "RevisionCreated",
                    f"ConfigMap {name} created: the revision of {desired.content_hash}",
                    routine=True,
                )
                self._collect(bundle, desired, name, revisions.keep)
                return RevisionOutcome(status=name, wrote=True, note=self._policy_note())
            except ApiError as err:
                if not err.is_already_exists:
                    raise
                current = self._fresh_revision(namespace, name)
                if current is None:
                    raise
        if not _is_revision_of(current, desired, _bundle_label(bundle, desired)):
            return self._taken(desired, name)
        if not _owned_by(current, bundle):
            wrote = self._own_again(bundle, current)
        collected = self._collect(bundle, desired, name, revisions.keep)
        return RevisionOutcome(status=name, wrote=wrote or collected, note=self._policy_note())

    def _planned_revision(
        self, bundle: Mapping[str, Any], desired: DesiredConfigMap
    ) -> RevisionOutcome:
        """For a dry run: what :meth:`_keep_revision` would find, without writing.

        Returns:
            ``would_create`` set to the revision's name when no ConfigMap of that name
            is in the cache; the ``problem`` the reconcile would report (a name too
            long for the suffix, the name taken by a ConfigMap that is not this
            bundle's revision of the content); else nothing. A dry run writes no
            status, so ``status`` is not used.
        """
        try:
            revisions = parse_revisions(bundle)
        except SpecError as err:
            return RevisionOutcome(problem=(err.reason, err.message))
        if not revisions.enabled:
            return RevisionOutcome()
        name = revision_name(desired.name, desired.content_hash)
        current = self._configmaps.get(desired.namespace, name)
        if current is None:
            return RevisionOutcome(would_create=name)
        if not _is_revision_of(current, desired, _bundle_label(bundle, desired)):
            return self._taken(desired, name)
        return RevisionOutcome()

    def _taken(self, desired: DesiredConfigMap, name: str) -> RevisionOutcome:
        """Return the outcome when ConfigMap ``name`` exists and is not this revision."""
        return RevisionOutcome(
            status=None,
            problem=(
                Reason.CONFIGMAP_CONFLICT,
                f"ConfigMap {name}, the name of the revision of {desired.content_hash}, "
                "exists and is not that revision of this ConfigBundle; cbop will not "
                "modify it. Delete it, or choose another spec.configMapName",
            ),
            recheck=self._conflict_recheck,
        )

    def _collect(
        self, bundle: Mapping[str, Any], desired: DesiredConfigMap, current: str, keep: int
    ) -> bool:
        """Delete the revisions the bundle no longer keeps and nothing else holds.

        The bundle keeps the current revision, the ``keep - 1`` most recently created
        others (by ``creationTimestamp``, then name), and any revision an entry of the
        namespace's pins names (:meth:`_revision_plan`). Each other revision it holds is
        deleted once its only owner is the bundle, on the precondition of its UID and
        resourceVersion, so a revision that gained an owner meanwhile is never deleted.
        One that still has other owners (ReplicaSets or ControllerRevisions of the
        workloads' history) keeps the bundle's reference until they are gone: the garbage
        collector's patch removing the last of them wakes the bundle, which deletes it
        then (one write, where letting go first would cost an update that races that
        patch). A revision of the bundle's label with no owner at all
        (:func:`_ownerless_revision`) is held again when it is among those kept, else
        deleted the same way. A lost race or a revision already gone is left to the next
        reconcile. Returns whether anything was written.
        """
        wrote = False
        label = _bundle_label(bundle, desired)
        release, adopt = self._revision_plan(bundle, desired.namespace, label, current, keep)
        for cm in adopt:
            wrote = self._own_again(bundle, cm) or wrote
        for cm in release:
            wrote = self._delete_revision(cm) or wrote
        return wrote

    def _revision_plan(
        self, bundle: Mapping[str, Any], namespace: str, label: str, current: str, keep: int
    ) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
        """Return ``(release, adopt)``: the revisions to delete and to hold again now.

        The candidates are the revisions the bundle holds (its non-controller owner
        reference) and those of its label left with no owner (:func:`_ownerless_revision`),
        other than ``current``. Kept are the ``keep - 1`` most recently created and any an
        entry of the namespace's pins ConfigMap names (:func:`pinned_revisions`): a pinned
        revision may be mounted by a pod of a template whose ReplicaSet or
        ControllerRevision has not got its own owner reference on it yet, and nothing
        that something may still mount is deleted (docs/revisions.md). ``release`` is
        every other candidate with no owner but the bundle; ``adopt`` the kept ones
        without an owner. Cache lookups only.
        """
        uid = bundle["metadata"]["uid"]
        candidates = [
            cm
            for cm in self._configmaps.by_index(REVISION_OF_INDEX, key_of(namespace, label))
            if cm["metadata"]["name"] != current
            and (_held_by(cm, bundle) or _ownerless_revision(cm))
        ]
        candidates.sort(
            key=lambda cm: (cm["metadata"].get("creationTimestamp", ""), cm["metadata"]["name"]),
            reverse=True,
        )
        newest, older = candidates[: keep - 1], candidates[keep - 1 :]
        pinned = pinned_revisions(self._configmaps.get(namespace, PARAMS_NAME)) if older else ()
        release = [
            cm
            for cm in older
            if cm["metadata"]["name"] not in pinned
            and all(r.get("uid") == uid for r in cm["metadata"].get("ownerReferences") or ())
        ]
        kept = [*newest, *(cm for cm in older if cm["metadata"]["name"] in pinned)]
        return release, [cm for cm in kept if _ownerless_revision(cm)]

    def _delete_revision(self, revision: Mapping[str, Any]) -> bool:
        meta = revision["metadata"]
        try:
            self._client.delete(
                CONFIGMAPS,
                meta["namespace"],
                meta["name"],
                preconditions={"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
            )
        except ApiError as err:
            if err.is_conflict or err.is_not_found:
                return False
            raise
        self._count("delete")
        log.info("revision deleted", configmap=meta["name"])
        return True

    def _fresh_revision(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return self._client.get(CONFIGMAPS, namespace, name)
        except ApiError as err:
            if err.is_not_found:
                return None
            raise

    def _own_again(self, bundle: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
        """Put the bundle's owner reference back on a revision that lost it (a revert).

        One update carrying the revision's resourceVersion; a lost race (409) or a
        revision deleted meanwhile (404) is left to the next reconcile, which the
        revision's watch event brings.
        """
        meta = dict(current["metadata"])
        meta.pop("managedFields", None)
        meta["ownerReferences"] = [*(meta.get("ownerReferences") or ()), revision_reference(bundle)]
        try:
            self._client.update(
                CONFIGMAPS,
                meta["namespace"],
                meta["name"],
                {**current, "metadata": meta},
                field_manager=self._field_manager,
            )
        except ApiError as err:
            if err.is_conflict or err.is_not_found:
                return False
            raise
        self._count("update")
        return True
