"""A bundle's share of revisions: make them, collect them by history, verify the pods.

:class:`BundleRevisions` is what the ConfigBundle reconcile calls, with
``spec.revisions.enabled``, before it writes the plain ConfigMap:

1. **collect**: delete the revisions the bundle no longer keeps (:func:`collection_plan`:
   not the current one, not among the newest ``keep``, named by no cached template or
   pod nor by 0.2.0's pins, owned by nothing else, unnamed for ``grace`` seconds), each
   on the precondition of its UID and resourceVersion. First, so that a namespace's
   ConfigMap quota full of collectable revisions leaves room for the new one;
2. **make** the revision of the current content (one create; a revert finds it and
   writes nothing). A create the API server refuses (a quota, an admission rule) is
   reported (``Ready=False``, reason ``RevisionNotCreated``, the server's message) and
   retried with backoff; the plain ConfigMap is written all the same: a template rolled
   meanwhile reads it by name, which is right for its content;
3. **make again** a revision a cached template names and that is gone (deleted by
   hand), when its content is still at hand: the current content, or another revision
   of the namespace with that content hash;
4. **verify** (:mod:`cbop.revisions.verify`): the ``Pinned`` condition, from the
   opted-in workloads that read the ConfigMap, the pinned ReplicaSets,
   ControllerRevisions and pods, and the policy's presence; a Warning Event on each
   workload a new finding names.

The grace period: the rollout names a revision in a template it applies; the template,
then its ReplicaSet, reach this process's caches some time after. A revision is
deleted only once it has been neither current nor named for ``grace`` seconds (a
monotonic clock, counted from this process's first look: a restart, or a new leader,
waits it out again). The default, 60 s, is far above a healthy watch's delay.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import EllipsisType
from typing import Any, Final, Literal

import cachetools
import structlog

from cbop.api import (
    ANNOTATION_CONTENT_HASH,
    Reason,
    SpecError,
    config_map_name_of,
)
from cbop.api.revisions import LABEL_REVISION_OF, parse_revisions, revision_name
from cbop.clock import Clock, RealClock
from cbop.keys import BY_NAMESPACE, key_of
from cbop.kube import CONFIGMAPS, ApiError
from cbop.locks import YieldingLock
from cbop.revisions.caches import REVISION_OF_INDEX, History
from cbop.revisions.legacy import PARAMS_NAME, legacy_named
from cbop.revisions.model import (
    Candidate,
    PinnedReason,
    PinnedVerdict,
    collection_plan,
    mapping_of,
)
from cbop.revisions.objects import (
    Content,
    body_from,
    bundle_label,
    held_by,
    is_revision_of,
    owned_by,
    ownerless_revision,
    revision_body,
    revision_reference,
    taken_problem,
)
from cbop.revisions.policy import PolicyCheck
from cbop.revisions.verify import Verifier, condition_of, same
from cbop.runtime.seams import Client, EventSink, Lister

__all__ = [
    "DEFAULT_GRACE",
    "KEEP",
    "POLICY_RECHECK",
    "BundleRevisions",
    "Content",
    "RevisionOutcome",
]

log = structlog.get_logger("cbop.revisions")

#: Seconds a revision must have been neither current nor named before it is deleted.
DEFAULT_GRACE: Final = 60.0
#: Seconds until a bundle whose ``Pinned`` condition says the policy is missing is looked
#: at again (it may have been installed meanwhile).
POLICY_RECHECK: Final = 60.0
#: Seconds until a bundle is looked at again while the history caches have not synced.
UNSYNCED_RECHECK: Final = 10.0
#: A field of the outcome the reconcile leaves as it is.
KEEP: Final[EllipsisType] = ...
#: Revisions whose last "needed" time this process remembers.
_REMEMBERED: Final = 100_000
#: A condition's status.
ConditionStatus = Literal["True", "False", "Unknown"]


@dataclass(frozen=True, slots=True)
class RevisionOutcome:
    """What the revisions part of one reconcile found and did.

    Attributes:
        status: what ``status.revision`` is to say: a name, None to remove it (revisions
            off, or no revision of the content), or :data:`KEEP`.
        problem: when set, the Ready condition to report instead of Synced:
            ``(reason, message)``. The plain ConfigMap is kept all the same.
        wrote: whether a revision was created, updated or deleted.
        recheck: seconds until the bundle is looked at again, or None.
        would_create: for a dry run, the revision the reconcile would create, else None.
        pinned: the ``Pinned`` condition to write, None to remove it, or :data:`KEEP`.
        retry: the revision could not be made: after the status is written, the
            reconcile is retried with backoff.
    """

    status: str | EllipsisType | None = KEEP
    problem: tuple[Reason, str] | None = None
    wrote: bool = False
    recheck: float | None = None
    would_create: str | None = None
    pinned: PinnedVerdict | EllipsisType | None = KEEP
    retry: bool = False

    def applied_to(
        self, ready: ConditionStatus, reason: Reason, message: str, requeue: float | None
    ) -> tuple[ConditionStatus, Reason, str, float | None]:
        """Return the Ready condition and requeue to report: ``problem`` over a Synced outcome."""
        if ready != "True":
            return ready, reason, message, requeue
        if self.problem is not None:
            return "False", self.problem[0], self.problem[1], self.recheck
        if self.recheck is not None:
            requeue = self.recheck if requeue is None else min(requeue, self.recheck)
        return ready, reason, message, requeue


def _refused(err: ApiError) -> bool:
    """Whether a create was refused in a way the same request will not overcome by itself.

    A 4xx other than 404 (the namespace is going), 409 and 429: a quota, an admission
    rule, RBAC. A retry with backoff then finds it lifted.
    """
    return 400 <= err.status < 500 and err.status not in (404, 409, 429)


class BundleRevisions:
    """The revisions of ConfigBundles (one per reconciler; thread-safe).

    Args:
        client: the API client (creates, deletes, the update that puts an owner
            reference back).
        configmaps: the managed-ConfigMap cache, with :data:`REVISION_OF_INDEX`.
        history: the caches of what names revisions; None (``cbop --once``): nothing is
            collected beyond the newest ``keep`` and nothing is verified.
        policy: the pin policy's presence (None: not looked at).
        recorder: where the Events on workloads go (None: none).
        count: ``fn(operation)``, one ConfigMap write counted (create, update, delete).
        event: ``fn(bundle, type, reason, message, routine=)``, an Event on the bundle.
        field_manager: the field manager of the writes.
        conflict_recheck: seconds between rechecks of a revision name taken by a
            ConfigMap that is not this bundle's revision.
        rollout: whether the rollout runs (without it no template is pinned).
        grace: see the module docstring.
        clock: a monotonic time source (tests: ``FakeClock``).
    """

    def __init__(
        self,
        *,
        client: Client,
        configmaps: Lister,
        history: History | None,
        policy: PolicyCheck | None = None,
        recorder: EventSink | None = None,
        count: Callable[[str], None] = lambda operation: None,
        event: Callable[..., None] = lambda *args, **kwargs: None,
        field_manager: str = "cbop",
        conflict_recheck: float = 15.0,
        rollout: bool = True,
        grace: float = DEFAULT_GRACE,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._configmaps = configmaps
        self._history = history
        self._verifier = (
            Verifier(
                configmaps=configmaps,
                history=history,
                policy=policy,
                recorder=recorder,
                rollout=rollout,
            )
            if history is not None
            else None
        )
        self._count = count
        self._event = event
        self._field_manager = field_manager
        self._conflict_recheck = conflict_recheck
        self._grace = grace
        self._clock: Clock = clock or RealClock()
        self._lock = YieldingLock()
        # namespace/revision -> when this process last saw it current or named.
        self._needed: cachetools.LRUCache[str, float] = cachetools.LRUCache(_REMEMBERED)

    # -- the reconcile's entry points ------------------------------------------------

    def keep(self, bundle: Mapping[str, Any], desired: Content) -> RevisionOutcome:
        """Collect, make the revision of ``desired``'s content, make missing ones again, verify.

        Called before the plain ConfigMap is written.

        Raises:
            ApiError, ConnectionFailed: a write failed in a way a retry may fix (a
                refused create is reported instead, see :class:`RevisionOutcome`).
        """
        try:
            revisions = parse_revisions(bundle)
        except SpecError as err:
            return RevisionOutcome(status=None, problem=(err.reason, err.message), pinned=None)
        if not revisions.enabled:
            return RevisionOutcome(status=None, pinned=None)
        namespace = desired.namespace
        name = revision_name(desired.name, desired.content_hash)
        label = bundle_label(bundle, desired)
        current = self._configmaps.get(namespace, name)
        if current is not None and not is_revision_of(current, desired.content_hash, label):
            return self._taken(desired, name)
        wrote, wait = self._collect(bundle, namespace, label, name, revisions.keep)
        status: str | None = name
        problem: tuple[Reason, str] | None = None
        if current is None:
            created = self._create(bundle, name, revision_body(bundle, desired, name, label))
            if isinstance(created, RevisionOutcome):
                return created
            if isinstance(created, str):
                problem, status = (Reason.REVISION_NOT_CREATED, created), None
            wrote = wrote or created is True
        elif not owned_by(current, bundle):
            wrote = self._own_again(bundle, current) or wrote
        made = self._make_missing(bundle, desired, label)
        wrote = wrote or bool(made)
        verdict: PinnedVerdict | None = None
        if self._verifier is not None:
            exists = {*made, *([status] if status else [])}
            verdict, objects = self._verifier.verdict(
                bundle, desired.name, exists=exists, cached=self._cached(namespace, label)
            )
            self._verifier.warn(bundle, verdict, objects)
        recheck = wait
        if verdict is not None and verdict.reason in (
            PinnedReason.POLICY_MISSING,
            PinnedReason.POLICY_NOT_SERVED,
        ):
            recheck = POLICY_RECHECK if recheck is None else min(recheck, POLICY_RECHECK)
        return RevisionOutcome(
            status=status,
            problem=problem,
            wrote=wrote,
            recheck=recheck,
            pinned=verdict,
            retry=problem is not None,
        )

    def planned(self, bundle: Mapping[str, Any], desired: Content) -> RevisionOutcome:
        """For a dry run: what :meth:`keep` would find, without writing.

        Returns:
            ``would_create`` set to the revision's name when no ConfigMap of that name is
            in the cache; the ``problem`` the reconcile would report (a name too long for
            the suffix, the name taken); else nothing.
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
        if not is_revision_of(current, desired.content_hash, bundle_label(bundle, desired)):
            return self._taken(desired, name)
        return RevisionOutcome()

    def in_place(self, bundle: Mapping[str, Any]) -> bool:
        """Whether a full reconcile would find nothing to do for revisions (the no-op fast path).

        False when ``status.revision`` names a ConfigMap missing from the cache or one
        without the bundle's owner reference, when a revision is to be deleted or held
        again now, when a revision a template names is gone, when the ``Pinned``
        condition would change, or when revisions are off and ``status.revision`` or
        ``Pinned`` are still there. Cache lookups only, but for the policy check's LISTs
        (at most two a minute, process-wide).
        """
        spec = bundle.get("spec") or {}
        raw = spec.get("revisions") if isinstance(spec, Mapping) else None
        status = bundle.get("status") or {}
        if not (isinstance(raw, Mapping) and raw.get("enabled") is True):
            return "revision" not in status and condition_of(status) is None
        name = status.get("revision")
        plain = config_map_name_of(bundle)
        if not isinstance(name, str) or plain is None:
            return True
        namespace = bundle["metadata"]["namespace"]
        current = self._configmaps.get(namespace, name)
        if current is None or not owned_by(current, bundle):
            return False
        try:
            keep = parse_revisions(bundle).keep
        except SpecError:
            return True
        label = str((current.get("metadata", {}).get("labels") or {}).get(LABEL_REVISION_OF))
        plan = collection_plan(
            self._candidates(bundle, namespace, label, name, note=False),
            current=name,
            keep=keep,
            grace=self._grace,
        )
        if self._history is not None and not self._history.synced():
            return False
        if plan.adopt or (self._history is not None and (plan.delete or plan.wait is not None)):
            return False
        cached = self._cached(namespace, label)
        for missing in self._missing(namespace, plain, cached):
            if self._source_of(namespace, missing[len(plain) + 1 :]) is not None:
                return False
        if self._verifier is None:
            return True
        verdict = self._verifier.verdict(bundle, plain, cached=cached)[0]
        return same(condition_of(status), verdict)

    # -- collection ------------------------------------------------------------------

    def _candidates(
        self, bundle: Mapping[str, Any], namespace: str, label: str, current: str, *, note: bool
    ) -> list[Candidate]:
        """Return the bundle's revisions as the collection sees them.

        With ``note``, a revision seen current (``current``, or ``status.revision`` as
        the reconcile began) or named is noted as needed now; without, nothing is noted
        (a look from the fast path).
        """
        uid = bundle["metadata"]["uid"]
        now = self._clock.now()
        was = (bundle.get("status") or {}).get("revision")
        legacy = legacy_named(self._configmaps.get(namespace, PARAMS_NAME))
        out = []
        for cm in self._configmaps.by_index(REVISION_OF_INDEX, key_of(namespace, label)):
            meta = cm["metadata"]
            name = meta["name"]
            held = held_by(cm, bundle)
            if not held and not ownerless_revision(cm):
                continue
            named = name in legacy or (
                self._history is not None and self._history.named(namespace, name)
            )
            key = key_of(namespace, name)
            with self._lock:
                if note and (named or name in (current, was)):
                    self._needed[key] = now
                seen = self._needed.get(key)
                if seen is None:
                    seen = now
                    if note:
                        self._needed[key] = now
            out.append(
                Candidate(
                    name=name,
                    created=str(meta.get("creationTimestamp", "")),
                    held=held,
                    others=any(r.get("uid") != uid for r in meta.get("ownerReferences") or ()),
                    named=named,
                    idle=now - seen,
                )
            )
        return out

    def _collect(
        self, bundle: Mapping[str, Any], namespace: str, label: str, current: str, keep: int
    ) -> tuple[bool, float | None]:
        """Carry out the collection plan; return (whether anything was written, seconds to wait).

        Without the history caches, or before they have listed their collections (a
        refusal, RBAC), nothing is deleted: nothing tells which templates name a
        revision. Revisions left with no owner are still held again.
        """
        candidates = self._candidates(bundle, namespace, label, current, note=True)
        plan = collection_plan(candidates, current=current, keep=keep, grace=self._grace)
        by_name = {
            cm["metadata"]["name"]: cm
            for cm in self._configmaps.by_index(REVISION_OF_INDEX, key_of(namespace, label))
        }
        wrote = False
        for name in plan.adopt:
            wrote = self._own_again(bundle, by_name[name]) or wrote
        if self._history is None:
            return wrote, None
        if not self._history.synced():
            return wrote, UNSYNCED_RECHECK
        for name in plan.delete:
            wrote = self._delete(by_name[name]) or wrote
        return wrote, plan.wait

    def _delete(self, revision: Mapping[str, Any]) -> bool:
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
        with self._lock:
            self._needed.pop(key_of(meta["namespace"], meta["name"]), None)
        log.info("revision deleted", configmap=meta["name"])
        return True

    # -- making revisions ------------------------------------------------------------

    def _create(
        self, bundle: Mapping[str, Any], name: str, body: Mapping[str, Any]
    ) -> bool | str | RevisionOutcome:
        """Create revision ``name``.

        Returns:
            True when created; False when it was there already (a race); the API
            server's refusal as a sentence; or the outcome of a name taken by another
            ConfigMap.
        """
        namespace = body["metadata"]["namespace"]
        try:
            self._client.create(CONFIGMAPS, namespace, body, field_manager=self._field_manager)
        except ApiError as err:
            if err.is_already_exists:
                fresh = self._fresh(namespace, name)
                hash_ = body["metadata"]["annotations"][ANNOTATION_CONTENT_HASH]
                label = body["metadata"]["labels"][LABEL_REVISION_OF]
                if fresh is not None and not is_revision_of(fresh, hash_, label):
                    return RevisionOutcome(
                        status=None,
                        problem=taken_problem(name, hash_),
                        recheck=self._conflict_recheck,
                        pinned=KEEP,
                    )
                return False
            if not _refused(err):
                raise
            message = (
                f"the API server refused revision {name}: {err.message or err.reason}; "
                "the ConfigMap holds the new content, its pods read it by name until the "
                "revision exists (retried with backoff)"
            )
            self._event(bundle, "Warning", Reason.REVISION_NOT_CREATED.value, message)
            log.warning("revision refused", configmap=name, error=str(err))
            return message
        self._count("create")
        self._event(
            bundle,
            "Normal",
            "RevisionCreated",
            f"ConfigMap {name} created: the revision of "
            f"{body['metadata']['annotations'][ANNOTATION_CONTENT_HASH]}",
            routine=True,
        )
        return True

    def _cached(self, namespace: str, label: str) -> list[str]:
        """Return the names of the revisions labelled ``label`` in the managed-ConfigMap cache."""
        return [
            str(cm["metadata"]["name"])
            for cm in self._configmaps.by_index(REVISION_OF_INDEX, key_of(namespace, label))
        ]

    def _missing(self, namespace: str, plain: str, cached: Collection[str]) -> list[str]:
        """Return the revisions of ``plain`` a cached template names that are gone, sorted.

        The holders of the ``cached`` revisions (which exist) are counted, not read
        (:meth:`History.naming_other`).
        """
        if self._history is None:
            return []
        names = {
            mapping_of(holder)[plain]
            for _, holder in self._history.naming_other(namespace, plain, cached)
        }
        return sorted(n for n in names if self._configmaps.get(namespace, n) is None)

    def _make_missing(self, bundle: Mapping[str, Any], desired: Content, label: str) -> list[str]:
        """Make again each revision a template names that is gone and whose content is at hand.

        The content is at hand when a revision of the namespace (any bundle's) or the
        plain ConfigMap holds the content hash the name carries. Returns the names made.
        """
        made: list[str] = []
        namespace = desired.namespace
        for name in self._missing(namespace, desired.name, self._cached(namespace, label)):
            source = self._source_of(namespace, name[len(desired.name) + 1 :])
            if source is None:
                continue
            body = body_from(bundle, desired, name, label, source)
            if self._create(bundle, name, body) is True:
                log.info("revision made again", configmap=name)
                made.append(name)
        return made

    def _source_of(self, namespace: str, head: str) -> Mapping[str, Any] | None:
        """Return a ConfigMap of cbop's in ``namespace`` whose content hash begins with ``head``."""
        for cm in self._configmaps.by_index(BY_NAMESPACE, namespace):
            meta = cm.get("metadata") or {}
            content = str((meta.get("annotations") or {}).get(ANNOTATION_CONTENT_HASH, ""))
            if content.startswith(f"sha256:{head}") and meta.get("name") != PARAMS_NAME:
                return dict(cm)
        return None

    def _fresh(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return self._client.get(CONFIGMAPS, namespace, name)
        except ApiError as err:
            if err.is_not_found:
                return None
            raise

    def _own_again(self, bundle: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
        """Put the bundle's owner reference back on a revision that lost it.

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

    def _taken(self, desired: Content, name: str) -> RevisionOutcome:
        """Return the outcome when ConfigMap ``name`` exists and is not this revision."""
        return RevisionOutcome(
            status=None,
            problem=taken_problem(name, desired.content_hash),
            recheck=self._conflict_recheck,
        )
