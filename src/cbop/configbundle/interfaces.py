"""The reconciler's seams and its result: what it reads, writes through, reports to, returns.

This module owns the protocols :class:`cbop.configbundle.reconcile.Reconciler` is built
on (:class:`Lister` over an informer cache, :class:`Client` for the API calls it
makes, :class:`Observer` for its metrics hooks) and what one reconcile hands back to
the controller (:class:`Result`, or :class:`Requeue` for a quiet retry). Tests build a
reconciler from fakes of these protocols and call it directly, as sample-controller's
tests do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from cbop.api import Reason
from cbop.configbundle.decision import Action
from cbop.configbundle.status import ConditionStatus
from cbop.keys import CONTROLLER_UID_INDEX
from cbop.kube import Resource
from cbop.runtime import Requeue

__all__ = [
    "CONTROLLER_UID_INDEX",
    "NO_OBSERVER",
    "Client",
    "Lister",
    "Observer",
    "Requeue",
    "Result",
]


class Lister(Protocol):
    """Read-only cache view the reconciler reads from (see :mod:`cbop.informers`)."""

    def get(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """Return the cached object or None."""
        ...

    def by_index(self, index_name: str, value: str) -> Sequence[Mapping[str, Any]]:
        """Return cached objects whose index ``index_name`` yields ``value``."""
        ...


class Client(Protocol):
    """The API calls the reconciler makes (satisfied by :class:`cbop.kube.KubeClient`)."""

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        """GET one object; raises ApiError (``is_not_found``)."""
        ...

    def create(
        self,
        res: Resource,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """POST; raises ApiError (``is_already_exists``, ``is_invalid``)."""
        ...

    def update(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        subresource: str | None = None,
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """PUT; raises ApiError (``is_conflict``, ``is_not_found``, ``is_invalid``)."""
        ...

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """PATCH; raises ApiError."""
        ...

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        preconditions: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """DELETE; raises ApiError (``is_not_found``, ``is_conflict`` on preconditions)."""
        ...


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
