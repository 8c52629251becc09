"""The ConfigMap writes of a ConfigBundle reconcile, and their recovery.

This module owns :class:`ConfigMapWrites`, the part of the act layer
(:class:`cbop.configbundle.Reconciler` is built on it) that reads a bundle's ConfigMap
(from the cache, or fresh from the API server) and carries out the decision on it:
create, update, replace (a delete with preconditions, then a create) and the deletion
of stale ConfigMaps the bundle controls under a name it no longer declares. A write
that fails is recovered from where it can be: AlreadyExists or NotFound (a stale cache)
and a ConfigMap made immutable meanwhile are read afresh and decided again; a 409
Conflict becomes :class:`cbop.configbundle.Requeue`; a refusal no retry can fix becomes
:class:`cbop.configbundle.report.RejectedError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from cbop.api import BundleSpec, Reason, SpecError, config_map_name_of
from cbop.configbundle.decision import Action, Decision
from cbop.configbundle.interfaces import CONTROLLER_UID_INDEX, Lister, Requeue
from cbop.configbundle.report import UNRETRYABLE_STATUSES, ReconcileReports, RejectedError
from cbop.kube import CONFIGMAPS, ApiError

__all__ = ["GIVE_UP", "ConfigMapWrites"]

#: What :meth:`ConfigMapWrites._recover` answers when the error must be re-raised.
GIVE_UP: Final = object()


class ConfigMapWrites(ReconcileReports):
    """Reads and writes of the managed ConfigMap (a base of :class:`Reconciler`).

    The attributes below are the reconciler's state, set by
    :class:`cbop.configbundle.Reconciler`.
    """

    _configmaps: Lister

    def _cached_configmap(
        self, bundle: Mapping[str, Any], spec: BundleSpec | SpecError
    ) -> Mapping[str, Any] | None:
        """Return the cached ConfigMap the bundle names, or None.

        For a spec that does not parse or compose, the ConfigMap it names all the same
        (:func:`cbop.api.config_map_name_of`): the one a bundle being deleted with
        ``deletionPolicy: Orphan`` releases, its last good content kept.
        """
        name = spec.config_map_name if isinstance(spec, BundleSpec) else config_map_name_of(bundle)
        if name is None:
            return None
        return self._configmaps.get(bundle["metadata"]["namespace"], name)

    def _fresh_configmap(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """GET the ConfigMap from the API server, bypassing a cache that may be stale."""
        try:
            return self._client.get(CONFIGMAPS, namespace, name)
        except ApiError as err:
            if err.is_not_found:
                return None
            raise

    def _write_configmap(self, namespace: str, decision: Decision) -> None:
        action, body = decision.action, decision.body
        if body is None or action not in (Action.CREATE, Action.UPDATE, Action.REPLACE):
            return
        name = body["metadata"]["name"]
        common: dict[str, Any] = {"field_manager": self._field_manager, "dry_run": self._dry_run}
        if action is Action.CREATE:
            self._client.create(CONFIGMAPS, namespace, body, **common)
            self._count("create")
        elif action is Action.UPDATE:
            self._client.update(CONFIGMAPS, namespace, name, body, **common)
            self._count("update")
        else:
            self._client.delete(
                CONFIGMAPS,
                namespace,
                name,
                preconditions=decision.precondition,
                dry_run=self._dry_run,
            )
            self._count("delete")
            if not self._dry_run:
                self._client.create(CONFIGMAPS, namespace, body, **common)
                self._count("create")

    def _recover(
        self,
        namespace: str,
        spec: BundleSpec | SpecError,
        decision: Decision,
        err: ApiError,
    ) -> Mapping[str, Any] | object | None:
        """Decide whether a failed write can be retried from a fresh read.

        Returns the freshly read ConfigMap (or None when it is gone) to decide again
        with, or ``GIVE_UP`` to re-raise ``err``. 409 Conflict becomes :class:`Requeue`.
        """
        if not isinstance(spec, BundleSpec):
            raise RuntimeError("a write failed for a spec that did not parse (a bug)") from err
        name = spec.config_map_name
        if err.is_conflict:
            raise Requeue(f"ConfigMap {namespace}/{name} changed while being written") from err
        if err.is_already_exists or err.is_not_found:
            # The cache was stale: a ConfigMap appeared (ours or someone's) or vanished.
            return self._fresh_configmap(namespace, name)
        if err.is_invalid and decision.action is Action.UPDATE and "immutable" in err.message:
            # Someone made the ConfigMap immutable after our cache saw it.
            return self._fresh_configmap(namespace, name)
        if err.is_invalid:
            raise RejectedError(err.message) from err
        if err.is_request_entity_too_large:
            size = f"{err.request_bytes:,}-byte " if err.request_bytes is not None else ""
            raise RejectedError(
                f"the API server refused the {size}request writing ConfigMap {name} as too "
                f"large ({err.status} {err.message or err.reason}); split the bundle or "
                "shrink its values",
                Reason.CONFIGMAP_TOO_LARGE,
            ) from err
        if err.status in UNRETRYABLE_STATUSES:
            raise RejectedError(
                f"the API server refused the request writing ConfigMap {name}: "
                f"{err.status} {err.message or err.reason}"
            ) from err
        return GIVE_UP

    def _delete_stale(self, bundle: Mapping[str, Any], decision: Decision) -> list[str]:
        """Delete ConfigMaps this bundle controls under a name it no longer declares.

        Returns the names of those ConfigMaps (in a dry run: that would be deleted).
        """
        if decision.desired is None:
            return []
        uid = bundle["metadata"]["uid"]
        names: list[str] = []
        for cm in self._configmaps.by_index(CONTROLLER_UID_INDEX, uid):
            cm_meta = cm["metadata"]
            if cm_meta["name"] == decision.desired.name:
                continue
            names.append(cm_meta["name"])
            if self._dry_run:
                continue
            try:
                self._client.delete(
                    CONFIGMAPS,
                    cm_meta["namespace"],
                    cm_meta["name"],
                    preconditions={"uid": cm_meta["uid"]},
                )
                self._count("delete")
                self._event(
                    bundle,
                    "Normal",
                    "Deleted",
                    f"deleted ConfigMap {cm_meta['name']}: spec.configMapName is now "
                    f"{decision.desired.name}",
                )
            except ApiError as err:
                if not (err.is_not_found or err.is_conflict):
                    raise
        return names
