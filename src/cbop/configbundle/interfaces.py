"""The reconciler's seams and its result: what it reads, writes through, reports to, returns.

This module owns what :class:`cbop.configbundle.reconcile.Reconciler` adds to the
runtime's seams (:class:`cbop.runtime.seams.Lister`, :class:`cbop.runtime.seams.Client`
and :class:`cbop.runtime.seams.EventSink`, re-exported here): :class:`Observer` for its
metrics hooks, and what one reconcile hands back to the controller (:class:`Result`,
or :class:`Requeue` for a quiet retry). Tests build a reconciler from fakes of these
protocols and call it directly, as sample-controller's tests do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from cbop.api import Reason
from cbop.configbundle.decision import Action
from cbop.configbundle.status import ConditionStatus
from cbop.keys import CONTROLLER_UID_INDEX
from cbop.runtime import Requeue
from cbop.runtime.seams import Client, EventSink, Lister

__all__ = [
    "CONTROLLER_UID_INDEX",
    "NO_OBSERVER",
    "Client",
    "EventSink",
    "Lister",
    "Observer",
    "Requeue",
    "Result",
]


class Observer(Protocol):
    """Metrics hooks the reconciler calls (provided by :mod:`cbop.metrics`)."""

    def configmap_write(self, operation: str) -> None:
        """Count one successful ConfigMap write: create, update or delete."""
        ...

    def drift_corrected(self) -> None:
        """Count one ConfigMap restored after a change made outside cbop."""
        ...


class _NoObserver:
    """The default :class:`Observer`: counts nothing."""

    def configmap_write(self, operation: str) -> None:
        """Do nothing."""

    def drift_corrected(self) -> None:
        """Do nothing."""


#: An :class:`Observer` that counts nothing (the reconciler's default).
NO_OBSERVER: Final[Observer] = _NoObserver()


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
