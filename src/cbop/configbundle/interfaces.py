"""The reconciler's seams, the interfaces between its parts, and its result.

This module owns what :class:`cbop.configbundle.reconcile.Reconciler` adds to the
runtime's seams (:class:`cbop.runtime.seams.Lister`, :class:`cbop.runtime.seams.Client`
and :class:`cbop.runtime.seams.EventSink`, re-exported here): :class:`Observer` for its
metrics hooks; the interfaces its parts know each other by (:class:`Reporting`, what a
part reports through; :class:`TargetWriter`, what writes the object a bundle keeps,
:class:`RejectedError`, how it refuses, and :class:`Releaser`, the share of it the
finalizer uses; :class:`RevisionKeeper`); and what one
reconcile hands back to the controller (:class:`Result`, or :class:`Requeue` for a
quiet retry). The parts import this module, never each other, so each is built and
tested alone with fakes of the others, as sample-controller's tests do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from cbop.api import BundleSpec, Kind, Reason, SpecError
from cbop.configbundle.decision import Action, Decision
from cbop.configbundle.status import ConditionStatus
from cbop.keys import CONTROLLER_UID_INDEX
from cbop.kube import ApiError
from cbop.revisions.bundle import Content, RevisionOutcome
from cbop.runtime import Requeue
from cbop.runtime.seams import Client, EventSink, EventType, Lister

__all__ = [
    "CONTROLLER_UID_INDEX",
    "NO_OBSERVER",
    "UNRETRYABLE_STATUSES",
    "Client",
    "EventSink",
    "Lister",
    "Observer",
    "RejectedError",
    "Releaser",
    "Reporting",
    "Requeue",
    "Result",
    "RevisionKeeper",
    "TargetWriter",
]


class Observer(Protocol):
    """Metrics hooks the reconciler calls (provided by :mod:`cbop.metrics`)."""

    def configmap_write(self, operation: str) -> None:
        """Count one successful ConfigMap write: create, update or delete."""
        ...

    def secret_write(self, operation: str) -> None:
        """Count one successful Secret write: create, update or delete."""
        ...

    def drift_corrected(self) -> None:
        """Count one ConfigMap (or Secret) restored after a change made outside cbop."""
        ...


class _NoObserver:
    """The default :class:`Observer`: counts nothing."""

    def configmap_write(self, operation: str) -> None:
        """Do nothing."""

    def secret_write(self, operation: str) -> None:
        """Do nothing."""

    def drift_corrected(self) -> None:
        """Do nothing."""


#: An :class:`Observer` that counts nothing (the reconciler's default).
NO_OBSERVER: Final[Observer] = _NoObserver()


class Reporting(Protocol):
    """What a part of the reconciler reports through: Events on the bundle and write counts.

    :class:`cbop.configbundle.report.StatusReporter` is the one the reconciler builds;
    neither call does anything in a dry run.
    """

    def event(
        self,
        bundle: Mapping[str, Any],
        type_: EventType,
        reason: str,
        message: str,
        *,
        routine: bool = False,
    ) -> None:
        """Record an Event on ``bundle``; ``routine`` ones only at ``--events all``."""
        ...

    def count(self, operation: str, *, kind: Kind = Kind.CONFIGMAP) -> None:
        """Count one successful write of cbop's ConfigMaps (or Secrets): create, update, delete."""
        ...


class Releaser(Protocol):
    """What the finalizer needs of a writer: the release of ``deletionPolicy: Orphan``."""

    def release(self, bundle: Mapping[str, Any], body: Mapping[str, Any]) -> None:
        """Write ``body``, the object without cbop's ownership.

        Raises:
            Requeue: the object changed meanwhile (a gone one is no error).
        """
        ...


class TargetWriter(Releaser, Protocol):
    """What reads and writes the object a bundle keeps (its ConfigMap), for the reconciler.

    :class:`cbop.configbundle.writes.ConfigMapWriter` is the one for ConfigMaps. The
    guarantees each writer gives: cached reads are never mutated; a write that fails
    because the cache was stale is decided again from a fresh read; a lost race is
    :class:`Requeue`; a refusal no retry can fix is :class:`RejectedError`; every
    delete carries the UID it was decided on; in a dry run, writes go with
    ``dryRun=All`` (or not at all) and nothing is counted.
    """

    def cached(self, bundle: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Return the cached object ``bundle`` names (even with a spec that does not parse)."""
        ...

    def recheck(self, key: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """Return object ``name`` read fresh if the last reconcile of ``key`` found it taken.

        Taken by an object cbop does not cache; else None, and no request.
        """
        ...

    def remember(self, key: str, *, taken: bool) -> None:
        """Note whether this reconcile of ``key`` found its name taken (see :meth:`recheck`)."""
        ...

    def apply(
        self,
        bundle: Mapping[str, Any],
        spec: BundleSpec | SpecError,
        decision: Decision,
        current: Mapping[str, Any] | None,
    ) -> tuple[Decision, Mapping[str, Any] | None]:
        """Carry out ``decision``'s write; return the decision carried out, and its object.

        The object is the one the returned decision was made against: another one
        after a recovery from a fresh read.

        Raises:
            Requeue: a lost race.
            RejectedError: a refusal no retry can fix.
            ApiError, ConnectionFailed: any other failure.
        """
        ...

    def controls_others(self, bundle: Mapping[str, Any], name: str) -> bool:
        """Whether the cache shows an object ``bundle`` controls under a name but ``name``."""
        ...

    def delete_stale(self, bundle: Mapping[str, Any], decision: Decision) -> list[str]:
        """Delete the objects ``bundle`` controls under another name; return their names."""
        ...


class RevisionKeeper(Protocol):
    """The revisions part of a reconcile (:class:`cbop.revisions.bundle.BundleRevisions`)."""

    def keep(self, bundle: Mapping[str, Any], desired: Content) -> RevisionOutcome:
        """Collect, make the revision of ``desired``'s content, verify; before the write."""
        ...

    def planned(self, bundle: Mapping[str, Any], desired: Content) -> RevisionOutcome:
        """For a dry run: what :meth:`keep` would find, without writing."""
        ...

    def in_place(self, bundle: Mapping[str, Any]) -> bool:
        """Whether a full reconcile would find nothing to do for revisions (the fast path)."""
        ...


class RejectedError(ApiError):
    """The API server refused the ConfigMap for good: report ``condition_reason``, no retry."""

    def __init__(self, message: str, condition_reason: Reason = Reason.INVALID_SPEC) -> None:
        super().__init__(422, "Invalid", message)
        self.condition_reason = condition_reason


#: Refusals of a ConfigMap write that the same request can never overcome: 400 Bad
#: Request and 415 Unsupported Media Type (413 and 422 have their own messages). 403
#: is not among them: RBAC is often granted after the operator starts.
UNRETRYABLE_STATUSES = frozenset({400, 415})


@dataclass(frozen=True, slots=True)
class Result:
    """The outcome of one reconcile.

    Attributes:
        key: the ``namespace/name`` reconciled.
        action: what was decided (``Action``), or None when the bundle is gone.
        ready: the Ready condition's status after the reconcile ("True"/"False"/"Unknown"),
            or None when no status applies (gone, being deleted).
        reason: the Ready reason, or None.
        message: a one-line account of the outcome.
        config_map: the ConfigMap's name, when known.
        requeue_after: seconds until the key should be looked at again, or None.
        diff: for dry runs, a unified diff of the ConfigMap (else ""), bounded in size
            (see :func:`cbop.configbundle.diff.configmap_diff`).
        pending: for dry runs, whether the reconcile would have written something (the
            ConfigMap, a stale ConfigMap's deletion, the Orphan finalizer, a release);
            ``ready``/``reason`` then say what the bundle would be once it is written.
            Always False outside dry runs.
        written: for dry runs with a pending ConfigMap create, update or replace, the
            ConfigMap as the reconcile would write it (its request body: labels, owner
            reference, ``data`` and ``binaryData``), else None. Never mutated; left out
            of comparisons. ``cbop --once --dry-run`` plans the rollouts with it.
        new_revision: for dry runs, the revision ConfigMap (``spec.revisions``) the
            reconcile would create, ``<configMapName>-<10 hex digits>``, else None.
        secret: the managed Secret's name, for a Secret target (``config_map`` is then
            None), when known.
    """

    key: str
    action: Action | None
    ready: ConditionStatus | None = None
    reason: Reason | None = None
    message: str = ""
    config_map: str | None = None
    requeue_after: float | None = None
    diff: str = ""
    pending: bool = False
    written: Mapping[str, Any] | None = field(default=None, compare=False)
    new_revision: str | None = None
    secret: str | None = None
