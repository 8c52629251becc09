"""The collection of pins entries nothing references any more (docs/revisions.md).

The rollout writes one entry per template digest into the namespace's pins ConfigMap
(:data:`cbop.api.revisions.PARAMS_NAME`, :mod:`cbop.rollout.pins`); a bundle never lets
go of a revision an entry names. So an entry must go once nothing can create a pod of
its template any more: no ReplicaSet and no ControllerRevision of the namespace carries
its digest (the workloads' ``revisionHistoryLimit`` has dropped them) and no workload's
template carries it. The entry of a workload never rolled, keyed ``Kind.name``
(:func:`cbop.api.revisions.owner_pins_key`), goes once that workload is gone from the
cache of opted-in workloads, or, frozen by its first rollout, once neither the
workload's template nor any ReplicaSet or ControllerRevision it controls is without a
digest (:data:`OWNER_INDEX`). :class:`PinsCollector` reconciles one pins ConfigMap (key
``namespace/cbop-revisions``) from the caches alone and removes such entries with one
merge patch, on the precondition of the resourceVersion it saw.

An entry is never dropped while it is younger than the grace period
(:attr:`cbop.rollout.pins.PinsGuard.grace`, counted from the moment this process first
saw it, so a restart waits it out again), nor while a rollout of this process claimed
it within that period (:class:`cbop.rollout.pins.PinsGuard`): the rollout writes an
entry before the template annotation, and the annotation reaches the workload cache,
and the new ReplicaSet the history cache, some time after. A young unreferenced entry
is looked at again once its grace has passed (``requeue_after``).

What wakes the key: the pins ConfigMap's own events, and a ReplicaSet, ControllerRevision
or opted-in workload that appears, goes or changes its template digest
(:func:`pins_key_of`, :data:`DIGEST_CHANGED`): updates that change nothing else (a
ReplicaSet's status, many per rollout) pass by.

Error policy: a 409 (the pins changed since the cache saw them, a new entry most
likely) or any other failure of the patch is raised for a rate-limited retry; a 404
(the ConfigMap deleted meanwhile) ends the reconcile.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import structlog

from cbop.api.revisions import PARAMS_NAME, is_frozen, owner_pins_key
from cbop.keys import key_of, split_key
from cbop.kube import CONFIGMAPS, ApiError
from cbop.rollout.history import DIGEST_INDEX, template_digest
from cbop.rollout.pins import PinsGuard
from cbop.runtime.predicates import UpdatePredicate
from cbop.runtime.seams import Client, Lister

__all__ = [
    "DIGEST_CHANGED",
    "OWNER_INDEX",
    "PINS_ONLY",
    "PinsCollector",
    "UnpinResult",
    "index_by_owner_without_digest",
    "pins_key_of",
]

log = structlog.get_logger("cbop.rollout.unpin")

#: Index of the history caches: ``namespace/<Kind.name>`` of the workload that controls
#: an entry whose template carries no digest (:func:`index_by_owner_without_digest`).
OWNER_INDEX: Final = "cbop.dev/owner-without-digest"


def index_by_owner_without_digest(obj: Mapping[str, Any]) -> list[str]:
    """Index function: a ReplicaSet or ControllerRevision without a template digest -> its workload.

    Returns:
        ``["namespace/<Kind.name>"]`` (:func:`cbop.api.revisions.owner_pins_key` of the
        controller owner reference: a Deployment for a ReplicaSet, a StatefulSet or
        DaemonSet for a ControllerRevision), or ``[]`` for an entry with a digest or
        without such an owner. While one is listed, a pod of the template without a
        digest may still be created (a rollback to it, a pod recreated mid-rollout).
    """
    if template_digest(obj):
        return []
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            key = owner_pins_key(str(ref.get("kind") or ""), str(ref.get("name") or ""))
            return [key_of(str(meta.get("namespace") or ""), key)] if key else []
    return []


def pins_key_of(obj: Mapping[str, Any]) -> list[str]:
    """Map function: a history entry or opted-in workload -> its namespace's pins key.

    Returns:
        ``["namespace/cbop-revisions"]`` for any namespaced object: a ReplicaSet,
        ControllerRevision or workload that appears or goes may be the last to carry a
        digest, or the last entry without one of its workload (:data:`OWNER_INDEX`).
        The reconcile of a namespace without pins is one cache lookup. The runtime maps
        a deletion's last state too, so a ReplicaSet deleted by the history limit wakes
        its namespace's pins.
    """
    namespace = (obj.get("metadata") or {}).get("namespace")
    return [key_of(str(namespace), PARAMS_NAME)] if namespace else []


#: Updates of history entries and workloads that can change what the pins must keep:
#: another template digest. Status updates (a ReplicaSet's replicas, many per rollout)
#: pass by.
DIGEST_CHANGED: Final = UpdatePredicate(
    lambda old, new: template_digest(old) != template_digest(new), "template digest changed"
)


@dataclass(frozen=True, slots=True)
class _PinsOnly:
    """Predicate of the managed-ConfigMap watch: the pins ConfigMap's events only."""

    def create(self, obj: Mapping[str, Any]) -> bool:
        return _is_pins(obj)

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return _is_pins(new)

    def delete(self, obj: Mapping[str, Any]) -> bool:
        return _is_pins(obj)


def _is_pins(obj: Mapping[str, Any]) -> bool:
    return (obj.get("metadata") or {}).get("name") == PARAMS_NAME


#: Lets through the events of the pins ConfigMap (added, updated, resynced, deleted)
#: and nothing else of the managed-ConfigMap cache.
PINS_ONLY: Final = _PinsOnly()


@dataclass(frozen=True, slots=True)
class UnpinResult:
    """The outcome of one reconcile of a namespace's pins.

    Attributes:
        key: the ``namespace/cbop-revisions`` reconciled.
        dropped: the entries (pins keys) removed by this reconcile.
        requeue_after: seconds until the youngest unreferenced entry is old enough, or
            None.
    """

    key: str
    dropped: tuple[str, ...] = ()
    requeue_after: float | None = None


class PinsCollector:
    """Removes the entries of a namespace's pins that nothing references.

    Args:
        client: the API client (the merge patch).
        configmaps: lister over the managed-ConfigMap cache (the pins).
        history: listers over the ReplicaSets and ControllerRevisions, each with
            :data:`cbop.rollout.history.DIGEST_INDEX` and :data:`OWNER_INDEX`.
        workloads: kind (``Deployment``, ...) -> lister over the opted-in workloads of
            that kind, with :data:`cbop.rollout.history.DIGEST_INDEX`.
        guard: shared with the rollout reconcilers of the same scope; its ``grace``
            and ``clock`` are the collection's too.
    """

    def __init__(
        self,
        *,
        client: Client,
        configmaps: Lister,
        history: Sequence[Lister],
        workloads: Mapping[str, Lister],
        guard: PinsGuard,
    ) -> None:
        self._client = client
        self._configmaps = configmaps
        self._history = tuple(history)
        self._referrers = (*history, *workloads.values())
        self._workloads = dict(workloads)
        self._guard = guard
        self._lock = threading.Lock()
        # namespace -> pins key -> when this process first saw the entry (clock time).
        self._seen: dict[str, dict[str, float]] = {}

    def reconcile(self, key: str) -> UnpinResult:
        """Drop the entries of ``key``'s pins that nothing references and are old enough.

        Args:
            key: ``namespace/cbop-revisions`` (any other name is ignored).

        Returns:
            The :class:`UnpinResult`.

        Raises:
            ApiError, ConnectionFailed: the patch failed other than with 404 (a 409
                included); retry rate-limited.
        """
        split_namespace, name = split_key(key)
        namespace = split_namespace or ""
        params = self._configmaps.get(namespace, PARAMS_NAME) if name == PARAMS_NAME else None
        if params is None:
            with self._lock:
                self._seen.pop(namespace, None)
            return UnpinResult(key)
        data = dict(params.get("data") or {})
        entries = list(data)
        now = self._guard.clock.now()
        grace = self._guard.grace
        with self._lock:
            before = self._seen.get(namespace, {})
            seen = {k: before.get(k, now) for k in entries}
            self._seen[namespace] = seen
        old: list[str] = []
        wait = math.inf
        for entry in entries:
            if self._referenced(namespace, entry, str(data[entry])):
                continue
            age = now - seen[entry]
            if age >= grace:
                old.append(entry)
            else:
                wait = min(wait, grace - age)
        requeue = None if wait == math.inf else wait
        if not old:
            return UnpinResult(key, requeue_after=requeue)
        meta = params["metadata"]

        def send(keys: list[str]) -> None:
            body = {
                "metadata": {"resourceVersion": meta.get("resourceVersion")},
                "data": dict.fromkeys(keys),
            }
            self._client.patch(CONFIGMAPS, namespace, PARAMS_NAME, body, patch_type="merge")

        try:
            dropped = self._guard.drop(namespace, sorted(old), send)
        except ApiError as err:
            if err.is_not_found:
                return UnpinResult(key)
            raise
        if dropped:
            log.info("pins: entries dropped, nothing references them", entries=dropped)
        # A key the guard kept back was claimed by a rollout just now: look once more
        # when that claim has aged (its annotation will have reached the cache).
        if len(dropped) < len(old):
            requeue = grace if requeue is None else min(requeue, grace)
        return UnpinResult(key, tuple(dropped), requeue_after=requeue)

    def _referenced(self, namespace: str, entry: str, value: str) -> bool:
        kind, dot, name = entry.partition(".")
        if dot:  # a workload's own entry (cbop.api.revisions.owner_pins_key)
            lister = self._workloads.get(kind)
            workload = lister.get(namespace, name) if lister is not None else None
            if workload is None:
                return False
            if not is_frozen(value) or not template_digest(workload):
                return True  # never rolled, or rolled back to a template without a digest
            owner = key_of(namespace, entry)
            return any(entries.by_index(OWNER_INDEX, owner) for entries in self._history)
        digest = key_of(namespace, entry)
        return any(cache.by_index(DIGEST_INDEX, digest) for cache in self._referrers)
