"""The history's share of revisions: owner references from ReplicaSets and ControllerRevisions.

A revision ConfigMap is kept while anything of a workload's history reads it
(docs/revisions.md). :class:`HistoryReconciler` gives each ReplicaSet or
ControllerRevision whose pod template carries ``cbop.dev/config-hash`` a non-controller
owner reference (``blockOwnerDeletion: false``) on every revision the pins
(:mod:`cbop.rollout.pins`) name for that digest. When the workload's
``revisionHistoryLimit`` deletes the last such entry, and the bundle no longer holds
the revision among its newest ``keep``, the garbage collector deletes the revision, as
it deletes any object whose owners are all gone.

The watch event of an update reaches the cache after the update's answer; until it
does, the reconciler starts from the answer it got (:class:`cbop.runtime.OwnWrites`),
so a reconcile in between neither sends the same update again nor bases another
entry's update on the stale resourceVersion (either would be refused with 409).

Error policy: an update refused with 409 (the revision changed meanwhile) or any other
failure is raised for a rate-limited retry; a revision gone (404) is skipped.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import structlog

from cbop.api.revisions import LABEL_REVISION_OF, PARAMS_NAME, parse_pins, pins_key
from cbop.keys import key_of, object_key, split_key
from cbop.kube import CONFIGMAPS, ApiError, Resource
from cbop.rollout.decision import ANNOTATION_CONFIG_HASH
from cbop.runtime.ownwrites import OwnWrites
from cbop.runtime.seams import Client, Lister

__all__ = [
    "DIGEST_INDEX",
    "HistoryReconciler",
    "HistoryResult",
    "index_by_digest",
    "pins_mapper",
    "template_digest",
]

log = structlog.get_logger("cbop.rollout.history")

#: Name of the history informers' index: ``namespace/<pins key>`` -> entries.
DIGEST_INDEX: Final = "cbop.dev/config-hash"


def _template(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return the pod template of a ReplicaSet or ControllerRevision (``data.spec``)."""
    spec = (obj.get("data") or {}).get("spec") if obj.get("data") else obj.get("spec")
    template = (spec or {}).get("template") if isinstance(spec, Mapping) else None
    return template if isinstance(template, Mapping) else {}


def template_digest(obj: Mapping[str, Any]) -> str:
    """Return the ``cbop.dev/config-hash`` of a history entry's pod template, or ``""``.

    Args:
        obj: a ReplicaSet (``spec.template``) or ControllerRevision (``data.spec.template``,
            as the StatefulSet and DaemonSet controllers store the template patch).
    """
    meta = _template(obj).get("metadata") or {}
    value = (meta.get("annotations") or {}).get(ANNOTATION_CONFIG_HASH, "")
    return value if isinstance(value, str) else ""


def index_by_digest(obj: Mapping[str, Any]) -> list[str]:
    """Index function: a history entry -> ``namespace/<pins key>`` of its template digest."""
    key = pins_key(template_digest(obj))
    if not key:
        return []
    return [key_of(str((obj.get("metadata") or {}).get("namespace") or ""), key)]


def pins_mapper(history: Lister) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the map function of the ConfigMap watch: the pins -> the entries they name.

    Returns:
        ``fn(configmap) -> ["namespace/name", ...]``: for the pins ConfigMap, the keys of
        the history entries (of the lister's kind) whose digest has an entry in it
        (the rollout writes an entry after its revisions exist); else nothing.
    """

    def map_configmap(configmap: Mapping[str, Any]) -> list[str]:
        meta = configmap.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        if meta.get("name") != PARAMS_NAME:
            return []
        keys: set[str] = set()
        for digest_key in configmap.get("data") or {}:
            for entry in history.by_index(DIGEST_INDEX, key_of(namespace, digest_key)):
                keys.add(object_key(entry))
        return sorted(keys)

    return map_configmap


@dataclass(frozen=True, slots=True)
class HistoryResult:
    """The outcome of one history reconcile.

    Attributes:
        key: the ``namespace/name`` reconciled.
        owned: the revisions given this entry's owner reference by this reconcile.
        requeue_after: always None (the runtime's Result).
    """

    key: str
    owned: tuple[str, ...] = ()
    requeue_after: float | None = None


class HistoryReconciler:
    """Makes one kind of history entry an owner of the revisions its template reads.

    Args:
        resource: ``REPLICASETS`` or ``CONTROLLERREVISIONS``.
        client: the API client (the updates of revisions).
        history: lister over the entries of ``resource``, with :data:`DIGEST_INDEX`.
        configmaps: lister over the managed-ConfigMap cache (the pins and the revisions).
    """

    def __init__(
        self, *, resource: Resource, client: Client, history: Lister, configmaps: Lister
    ) -> None:
        self._resource = resource
        self._client = client
        self._history = history
        self._configmaps = configmaps
        # Revision key -> the revision as this reconciler's last update of it returned it.
        self._updated: OwnWrites[Mapping[str, Any]] = OwnWrites()

    def reconcile(self, key: str) -> HistoryResult:
        """Add entry ``key``'s owner reference to each revision its pins name and lack it.

        One update per revision that lacks it; nothing when all have it, when the
        entry has no digest or its digest no pins.

        Raises:
            ApiError, ConnectionFailed: an update failed other than with 404 (a 409
                included: the revision changed since the cache saw it); retry
                rate-limited.
        """
        split_namespace, name = split_key(key)
        namespace = split_namespace or ""
        entry = self._history.get(namespace, name)
        if entry is None:
            return HistoryResult(key)
        digest_key = pins_key(template_digest(entry))
        params = self._configmaps.get(namespace, PARAMS_NAME)
        if not digest_key or params is None:
            return HistoryResult(key)
        value = (params.get("data") or {}).get(digest_key)
        if not isinstance(value, str):
            return HistoryResult(key)
        meta = entry["metadata"]
        reference = {
            "apiVersion": self._resource.api_version,
            "kind": self._resource.kind,
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": False,
            "blockOwnerDeletion": False,
        }
        owned = []
        for revision_name in sorted(set(parse_pins(value).values())):
            if self._own(namespace, revision_name, reference):
                owned.append(revision_name)
        if owned:
            log.info("history: owns revisions", kind=self._resource.kind, revisions=owned)
        return HistoryResult(key, tuple(owned))

    def _own(self, namespace: str, name: str, reference: Mapping[str, Any]) -> bool:
        cached = self._configmaps.get(namespace, name)
        if cached is None:
            return False
        key = key_of(namespace, name)
        # The cache may not show this reconciler's last update of the revision yet.
        revision = self._updated.pending(key, cached) or cached
        meta = revision.get("metadata") or {}
        if LABEL_REVISION_OF not in (meta.get("labels") or {}):
            return False  # not a revision: never another's ConfigMap
        refs = list(meta.get("ownerReferences") or ())
        if any(ref.get("uid") == reference["uid"] for ref in refs):
            return False
        body = copy.deepcopy(dict(revision))
        body["metadata"].pop("managedFields", None)
        body["metadata"]["ownerReferences"] = [*refs, dict(reference)]
        try:
            written = self._client.update(CONFIGMAPS, namespace, name, body)
        except ApiError as err:
            if err.is_not_found:
                self._updated.forget(key)
                return False
            raise
        self._updated.record(key, revision, written, written)
        return True
