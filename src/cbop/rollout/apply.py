"""The rollout's one write: the server-side apply to a workload, and its conflicts.

This module owns :class:`WorkloadApplier`, the part of the rollout reconciler that
sends the apply under cbop's field manager and answers what comes back:

* a 409 (another field manager owns the annotation or the baseline label) takes the
  two keys back with force only from owners that wrote them with a plain update
  (``kubectl rollout undo``, ``kubectl edit``: :func:`cbop.rollout.decision.may_take_back`,
  on a fresh GET, since the caches drop ``managedFields``); from a manifest that holds
  them, no force and no retry until the workload's spec or the digest changes: cbop
  does not fight a GitOps tool;
* until the cache shows its own apply, the same digest is not applied again
  (:class:`cbop.runtime.OwnWrites`, keyed by the resourceVersion the apply returned:
  client-go's controller expectations, since resourceVersions are ordered, KEP-5504).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from cbop.kube import ApiError, Resource
from cbop.rollout.decision import (
    ANNOTATION_CONFIG_HASH,
    FIELD_MANAGER,
    FieldOwner,
    may_take_back,
    other_owners,
)
from cbop.runtime.ownwrites import OwnWrites
from cbop.runtime.seams import Client

__all__ = ["Applied", "WorkloadApplier"]

#: Workloads whose last apply this process remembers until the cache shows it.
_REMEMBERED: Final = 100_000


@dataclass(frozen=True, slots=True)
class Applied:
    """What one :meth:`WorkloadApplier.apply` came to.

    Attributes:
        gone: the workload was deleted meanwhile (404): nothing was written.
        conflict: a 409 cbop does not answer with force: the sentence for the Warning
            Event and the terminal error; else None.
        error: that 409, to chain from; else None.
        took_back: the field managers the keys were taken from with force (they had
            written them with a plain update); empty when no force was needed.
    """

    gone: bool = False
    conflict: str | None = None
    error: ApiError | None = None
    took_back: tuple[FieldOwner, ...] = ()


class WorkloadApplier:
    """Applies cbop's keys to the workloads of one kind (thread-safe).

    Args:
        resource: the workload kind (``DEPLOYMENTS``, ``STATEFULSETS`` or ``DAEMONSETS``).
        client: the API client (the apply, and a GET after a 409).
        field_manager: the server-side apply field manager.
        force: always send ``force=true`` (take the keys from any owner). False by
            default: the apply goes without force, and only a conflict with owners
            that wrote the keys with a plain update is answered with force
            (docs/rollout.md).
    """

    def __init__(
        self,
        *,
        resource: Resource,
        client: Client,
        field_manager: str = FIELD_MANAGER,
        force: bool = False,
    ) -> None:
        self._resource = resource
        self._client = client
        self._field_manager = field_manager
        self._force = force
        self._lock = threading.Lock()
        # key -> mark of an apply refused with a conflict: not tried again until the
        # mark (the workload's UID and generation, the digest) changes.
        self._conflicts: dict[str, Hashable] = {}
        # key -> (uid, digest, resourceVersion) of the last apply, until the cache holds
        # that version or a newer one.
        self._applied: OwnWrites[str] = OwnWrites(maxsize=_REMEMBERED)

    def pending(self, key: str, workload: Mapping[str, Any], digest: str) -> bool:
        """Whether ``digest`` was applied to ``workload`` and the cache does not show it yet.

        True only when the last apply for ``key`` went to the same workload with the
        same digest and the cached ``workload`` is older than what it returned.
        """
        return self._applied.pending(key, workload) == digest

    def refused(self, key: str, mark: Hashable) -> bool:
        """Whether an apply for ``key`` at ``mark`` was refused with a conflict already."""
        with self._lock:
            return self._conflicts.get(key) == mark

    def apply(
        self,
        key: str,
        workload: Mapping[str, Any],
        body: Mapping[str, Any],
        *,
        digest: str,
        mark: Hashable,
    ) -> Applied:
        """Send ``body`` as a server-side apply to ``workload``; take the keys back if allowed.

        Args:
            key: the workload's ``namespace/name``.
            workload: the cached workload (never mutated).
            body: the apply body (:func:`cbop.rollout.decision.apply_body`).
            digest: the digest it carries (remembered until the cache shows the apply).
            mark: what a conflict is remembered by (:meth:`refused`).

        Returns:
            What came of it (:class:`Applied`); a conflict is remembered at ``mark``.

        Raises:
            ApiError, ConnectionFailed: another failure (of the apply or of the GET).
        """
        meta = workload["metadata"]
        took_back: tuple[FieldOwner, ...] = ()
        try:
            try:
                applied = self._patch(meta, body, force=self._force)
            except ApiError as err:
                if not err.is_conflict or self._force:
                    raise
                took_back = self._may_take_back(meta, err)
                applied = self._patch(meta, body, force=True)
        except ApiError as err:
            if err.is_not_found:
                return Applied(gone=True)
            if err.is_conflict:
                with self._lock:
                    self._conflicts[key] = mark
                message = (
                    f"cannot set {ANNOTATION_CONFIG_HASH}: {err.message}; cbop does not take it "
                    "from a manager that applies it (docs/rollout.md)"
                )
                return Applied(conflict=message, error=err)
            raise
        self._applied.record(key, workload, applied, digest)
        return Applied(took_back=took_back)

    def forget(self, key: str) -> None:
        """Drop what is remembered of ``key`` (the workload left the cache)."""
        with self._lock:
            self._conflicts.pop(key, None)
        self._applied.forget(key)

    def _patch(self, meta: Mapping[str, Any], body: Any, *, force: bool) -> dict[str, Any]:
        return self._client.patch(
            self._resource,
            meta["namespace"],
            meta["name"],
            body,
            patch_type="apply",
            field_manager=self._field_manager,
            force=force,
        )

    def _may_take_back(self, meta: Mapping[str, Any], conflict: ApiError) -> tuple[FieldOwner, ...]:
        """After a 409 on the apply: return the owners to take the keys from, or re-raise.

        Reads the workload afresh (the caches drop ``managedFields``) and asks
        :func:`cbop.rollout.decision.may_take_back`; re-raises ``conflict`` when a
        manager that applies the keys owns them.

        Raises:
            ApiError: ``conflict`` (not to be taken), or the GET's own error.
        """
        fresh = self._client.get(self._resource, meta["namespace"], meta["name"])
        if not may_take_back(fresh, self._field_manager):
            raise conflict
        return other_owners(fresh, self._field_manager)
