"""The ConfigMap a bundle keeps: its reads, its writes, and their recovery.

This module owns :class:`ConfigMapWriter`, the part of the reconciler that reads a
bundle's ConfigMap (from the cache, or fresh from the API server while its name is
taken by a ConfigMap cbop does not cache) and carries out the decision on it: create,
update, replace (a delete with preconditions, then a create), the deletion of stale
ConfigMaps the bundle controls under a name it no longer declares, and the release
of ``deletionPolicy: Orphan``. A write that fails is recovered from where it can be:
AlreadyExists or NotFound (a stale cache) and a ConfigMap made immutable meanwhile are
read afresh and decided again; a 409 Conflict becomes
:class:`cbop.configbundle.interfaces.Requeue`; a refusal no retry can fix becomes
:class:`cbop.configbundle.interfaces.RejectedError`. It is the
:class:`cbop.configbundle.interfaces.TargetWriter` for ConfigMaps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from cbop.api import BundleSpec, Reason, SpecError, config_map_name_of
from cbop.configbundle.decision import Action, Decision, decide
from cbop.configbundle.interfaces import (
    CONTROLLER_UID_INDEX,
    UNRETRYABLE_STATUSES,
    Client,
    Lister,
    RejectedError,
    Reporting,
    Requeue,
)
from cbop.configbundle.taken import TakenNames
from cbop.kube import CONFIGMAPS, ApiError

__all__ = ["ConfigMapWriter"]

#: What :meth:`ConfigMapWriter._recover` answers when the error must be re-raised.
_GIVE_UP: Final = object()
#: Fresh reads (each followed by a new decision and write) after failed writes, at most.
_RECOVERIES: Final = 2


class ConfigMapWriter:
    """Reads and writes the ConfigMap each bundle keeps (thread-safe).

    Args:
        client: the API client (writes, and the rare fresh read).
        configmaps: the managed-ConfigMap cache, with the ``controller-uid`` index.
        reports: where Events (``Deleted``) and write counts go.
        field_manager: the field manager sent with writes.
        dry_run: send writes with ``dryRun=All``; a replace sends only its delete, and
            stale ConfigMaps are named, not deleted.
        conflict_recheck: seconds between rechecks of a name taken by a ConfigMap cbop
            does not cache; what :meth:`remember` notes lasts four of them.
    """

    def __init__(
        self,
        *,
        client: Client,
        configmaps: Lister,
        reports: Reporting,
        field_manager: str = "cbop",
        dry_run: bool = False,
        conflict_recheck: float = 15.0,
    ) -> None:
        self._client = client
        self._configmaps = configmaps
        self._reports = reports
        self._field_manager = field_manager
        self._dry_run = dry_run
        self._taken = TakenNames(client, CONFIGMAPS, ttl=4 * conflict_recheck)

    # -- reads -----------------------------------------------------------------------

    def cached(self, bundle: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Return the cached ConfigMap the bundle names, or None.

        The name is :func:`cbop.api.config_map_name_of`, which a spec that parses
        agrees with, so a spec that does not parse or compose has its ConfigMap too:
        the one a bundle being deleted with ``deletionPolicy: Orphan`` releases, its
        last good content kept.
        """
        name = config_map_name_of(bundle)
        if name is None:
            return None
        return self._configmaps.get(bundle["metadata"]["namespace"], name)

    def recheck(self, key: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """Return ConfigMap ``name`` read fresh if the last reconcile of ``key`` found it taken.

        cbop does not cache a ConfigMap it does not manage, so only a GET tells whether
        such a blocker is still there. Without a note (:meth:`remember`): None, and no
        request.

        Raises:
            ApiError, ConnectionFailed: the GET failed (but for 404).
        """
        return self._taken.recheck(key, namespace, name)

    def remember(self, key: str, *, taken: bool) -> None:
        """Note whether this reconcile of ``key`` found its name taken (for :meth:`recheck`)."""
        self._taken.remember(key, taken=taken)

    # -- writes ----------------------------------------------------------------------

    def apply(
        self,
        bundle: Mapping[str, Any],
        spec: BundleSpec | SpecError,
        decision: Decision,
        current: Mapping[str, Any] | None,
    ) -> tuple[Decision, Mapping[str, Any] | None]:
        """Write what ``decision`` says (if anything), recovering from a stale cache.

        Args:
            bundle: the bundle as cached (its finalizer set, if the reconcile set it).
            spec: its spec, sources composed in.
            decision: what to do; only create, update and replace write.
            current: the ConfigMap ``decision`` was made against.

        Returns:
            ``(decision, current)`` as carried out: after a write that failed on a stale
            cache, the decision made again (:func:`cbop.configbundle.decision.decide`)
            against the ConfigMap read fresh (at most twice).

        Raises:
            Requeue: 409 Conflict (the ConfigMap changed while being written).
            RejectedError: a refusal no retry can fix (422, 413, 400, 415).
            ApiError, ConnectionFailed: any other failure, or a second failure.
        """
        namespace = bundle["metadata"]["namespace"]
        attempts = 0
        while True:
            attempts += 1
            try:
                self._write(namespace, decision)
            except ApiError as err:
                if attempts > _RECOVERIES:
                    raise
                fresh = self._recover(namespace, spec, decision, err)
                if fresh is _GIVE_UP:
                    raise
                current = fresh if isinstance(fresh, Mapping) else None
                decision = decide(bundle, spec, current)
                continue
            return decision, current

    def _write(self, namespace: str, decision: Decision) -> None:
        action, body = decision.action, decision.body
        if body is None or action not in (Action.CREATE, Action.UPDATE, Action.REPLACE):
            return
        name = body["metadata"]["name"]
        common: dict[str, Any] = {"field_manager": self._field_manager, "dry_run": self._dry_run}
        if action is Action.CREATE:
            self._client.create(CONFIGMAPS, namespace, body, **common)
            self._reports.count("create")
        elif action is Action.UPDATE:
            self._client.update(CONFIGMAPS, namespace, name, body, **common)
            self._reports.count("update")
        else:
            self._client.delete(
                CONFIGMAPS,
                namespace,
                name,
                preconditions=decision.precondition,
                dry_run=self._dry_run,
            )
            self._reports.count("delete")
            if not self._dry_run:
                self._client.create(CONFIGMAPS, namespace, body, **common)
                self._reports.count("create")

    def _recover(
        self,
        namespace: str,
        spec: BundleSpec | SpecError,
        decision: Decision,
        err: ApiError,
    ) -> Mapping[str, Any] | object | None:
        """Decide whether a failed write can be retried from a fresh read.

        Returns the freshly read ConfigMap (or None when it is gone) to decide again
        with, or ``_GIVE_UP`` to re-raise ``err``. 409 Conflict becomes :class:`Requeue`.
        """
        if not isinstance(spec, BundleSpec):
            raise RuntimeError("a write failed for a spec that did not parse (a bug)") from err
        name = spec.config_map_name
        if err.is_conflict:
            raise Requeue(f"ConfigMap {namespace}/{name} changed while being written") from err
        if err.is_already_exists or err.is_not_found:
            # The cache was stale: a ConfigMap appeared (ours or someone's) or vanished.
            return self._taken.fresh(namespace, name)
        if err.is_invalid and decision.action is Action.UPDATE and "immutable" in err.message:
            # Someone made the ConfigMap immutable after our cache saw it.
            return self._taken.fresh(namespace, name)
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
        return _GIVE_UP

    def controls_others(self, bundle: Mapping[str, Any], name: str) -> bool:
        """Whether the cache holds a ConfigMap ``bundle`` controls under a name but ``name``.

        Such a ConfigMap (its bundle was renamed, or a relist brought it back) is one
        :meth:`delete_stale` deletes. A cache lookup by the ``controller-uid`` index.
        """
        uid = bundle["metadata"]["uid"]
        return any(
            cm["metadata"]["name"] != name
            for cm in self._configmaps.by_index(CONTROLLER_UID_INDEX, uid)
        )

    def delete_stale(self, bundle: Mapping[str, Any], decision: Decision) -> list[str]:
        """Delete ConfigMaps this bundle controls under a name it no longer declares.

        Each delete carries the ConfigMap's UID; one gone or changed meanwhile (404,
        409) is no error. Returns the names of those ConfigMaps (in a dry run: that
        would be deleted).

        Raises:
            ApiError, ConnectionFailed: another failure of a delete.
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
                self._reports.count("delete")
                self._reports.event(
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

    def release(self, bundle: Mapping[str, Any], body: Mapping[str, Any]) -> None:
        """Update the ConfigMap to ``body``, without cbop's ownership (``deletionPolicy: Orphan``).

        ``body`` is :func:`cbop.configbundle.decision.release_body` of the cached
        ConfigMap (its resourceVersion included). A ConfigMap gone meanwhile is no error.

        Raises:
            Requeue: the ConfigMap changed meanwhile (409).
            ApiError, ConnectionFailed: another failure.
        """
        try:
            self._client.update(
                CONFIGMAPS,
                bundle["metadata"]["namespace"],
                body["metadata"]["name"],
                body,
                field_manager=self._field_manager,
            )
            self._reports.count("update")
        except ApiError as err:
            if err.is_conflict:
                raise Requeue("ConfigMap changed while being released") from err
            if not err.is_not_found:
                raise
