"""The finalizer of a ConfigBundle, and the release of its ConfigMap (deletionPolicy Orphan).

This module owns :class:`Finalizer`, the part of the reconciler that adds and removes
the ``cbop.dev/orphan`` finalizer (a merge patch carrying the resourceVersion read) and,
when a bundle with ``deletionPolicy: Orphan`` is being deleted, lets go of its ConfigMap
(through the writer, :class:`cbop.configbundle.interfaces.Releaser`: an update without
cbop's owner reference, labels and annotations) before removing the finalizer. A
conflict on either write becomes :class:`cbop.configbundle.interfaces.Requeue`.

It also owns :func:`release_deleted`, the same release without a running cbop (no
caches, no workqueue: reads from the API server, retries lost races from a fresh read),
which ``cbop release`` (:mod:`cbop.cli.release`) runs so that a namespace or a CRD being
deleted is never held by cbop's finalizer while cbop is stopped or gone. Both write the
bodies of :func:`finalizer_patch` and :func:`cbop.configbundle.decision.release_body`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from cbop.api import FINALIZER_ORPHAN, config_map_name_of
from cbop.configbundle.decision import (
    Action,
    Decision,
    FinalizerChange,
    has_finalizer,
    release_body,
)
from cbop.configbundle.desired import is_controlled_by
from cbop.configbundle.interfaces import Client, Releaser, Reporting, Requeue, Result
from cbop.keys import object_key
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError

__all__ = [
    "ATTEMPTS",
    "ConfigMapOutcome",
    "Finalizer",
    "Release",
    "finalizer_patch",
    "release_deleted",
]

#: Tries per write of :func:`release_deleted` when it keeps losing races.
ATTEMPTS: Final = 5


def finalizer_patch(bundle: Mapping[str, Any], change: FinalizerChange) -> dict[str, Any]:
    """Return the merge patch adding or removing ``cbop.dev/orphan`` on ``bundle``.

    The other finalizers are kept in order; the patch carries the ``resourceVersion``
    read, so a bundle changed meanwhile answers 409 Conflict instead of losing a
    finalizer someone added.
    """
    meta = bundle["metadata"]
    finalizers = [f for f in meta.get("finalizers") or () if f != FINALIZER_ORPHAN]
    if change is FinalizerChange.ADD:
        finalizers.append(FINALIZER_ORPHAN)
    return {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}


class ConfigMapOutcome(enum.StrEnum):
    """What :func:`release_deleted` found of the ConfigMap a bundle names."""

    #: Released: owner reference and cbop's labels and annotations off, content kept.
    RELEASED = "released"
    #: Not there (deleted with its namespace by the namespace controller, or by hand).
    GONE = "gone"
    #: There but not controlled by the bundle (released already, or someone else's).
    NOT_CONTROLLED = "not-controlled"


@dataclass(frozen=True)
class Release:
    """What :func:`release_deleted` did for one bundle.

    Attributes:
        bundle: ``namespace/name`` of the bundle.
        configmap: ``namespace/name`` of the ConfigMap it names (None: its spec names
            no valid ConfigMap name).
        outcome: what became of that ConfigMap.
        finalizer_removed: whether this call removed the finalizer (False: it was gone
            already, taken off meanwhile by a running cbop, or the bundle is gone).
    """

    bundle: str
    configmap: str | None
    outcome: ConfigMapOutcome
    finalizer_removed: bool


def _fresh(client: Client, res: Any, namespace: str, name: str) -> Mapping[str, Any] | None:
    try:
        return client.get(res, namespace, name)
    except ApiError as err:
        if err.is_not_found:
            return None
        raise


def _release_configmap(
    client: Client, bundle: Mapping[str, Any], name: str, field_manager: str
) -> ConfigMapOutcome:
    """Release the ConfigMap ``name`` if ``bundle`` still controls it; say what was found."""
    namespace = bundle["metadata"]["namespace"]
    for _ in range(ATTEMPTS):
        current = _fresh(client, CONFIGMAPS, namespace, name)
        if current is None:
            return ConfigMapOutcome.GONE
        if not is_controlled_by(current, bundle):
            return ConfigMapOutcome.NOT_CONTROLLED  # released already (by cbop, say)
        try:
            client.update(
                CONFIGMAPS,
                namespace,
                name,
                release_body(current, bundle),
                field_manager=field_manager,
            )
        except ApiError as err:
            if err.is_conflict or err.is_not_found:
                continue  # changed or gone meanwhile: look again
            raise
        return ConfigMapOutcome.RELEASED
    raise Requeue(f"ConfigMap {namespace}/{name} kept changing while being released")


def release_deleted(
    client: Client,
    bundle: Mapping[str, Any],
    *,
    being_deleted: bool = False,
    field_manager: str = "cbop-release",
) -> Release | None:
    """Release one bundle being deleted as cbop does, without cbop: for ``cbop release``.

    When ``bundle`` (as listed) is being deleted, or its namespace or its CRD is (the
    namespace controller or the CRD's finalizer deletes it next, whatever it holds), and
    it carries ``cbop.dev/orphan``: the
    ConfigMap it names (``spec.configMapName``, else its name; even when the rest of the
    spec is invalid or a source fails), if the bundle still controls it, is updated to
    :func:`cbop.configbundle.decision.release_body` (content kept; owner reference,
    labels and annotations of cbop off; marked ``cbop.dev/released-by``), then the
    finalizer comes off, so the deletion (of the bundle, its namespace or its CRD)
    finishes. Safe while cbop runs (each write carries the resourceVersion read; a lost
    race reads again, and what cbop did meanwhile is not done twice) and idempotent.

    Args:
        client: a client allowed to get and update ConfigMaps, get and patch ConfigBundles.
        bundle: the ConfigBundle as listed.
        being_deleted: whether the bundle's namespace or its CRD is being deleted.
        field_manager: the field manager of the writes.

    Returns:
        What was done, or None when there was nothing to do (not being deleted, no
        finalizer of cbop's, or gone).

    Raises:
        Requeue: a write kept losing races (:data:`ATTEMPTS` times).
        ApiError, ConnectionFailed: another failure of a read or a write.
    """
    meta = bundle["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    deleted = bool(meta.get("deletionTimestamp")) or being_deleted
    if not (deleted and has_finalizer(bundle)):
        return None
    configmap = config_map_name_of(bundle)
    outcome = ConfigMapOutcome.GONE
    if configmap is not None:
        outcome = _release_configmap(client, bundle, configmap, field_manager)
        configmap = f"{namespace}/{configmap}"
    current: Mapping[str, Any] | None = bundle
    for _ in range(ATTEMPTS):
        if current is None or not has_finalizer(current):
            return Release(object_key(bundle), configmap, outcome, finalizer_removed=False)
        patch = finalizer_patch(current, FinalizerChange.REMOVE)
        try:
            client.patch(
                CONFIGBUNDLES,
                namespace,
                name,
                patch,
                patch_type="merge",
                field_manager=field_manager,
            )
        except ApiError as err:
            if not (err.is_conflict or err.is_not_found):
                raise
            current = _fresh(client, CONFIGBUNDLES, namespace, name)
            continue
        return Release(object_key(bundle), configmap, outcome, finalizer_removed=True)
    raise Requeue(f"ConfigBundle {namespace}/{name} kept changing while its finalizer came off")


class Finalizer:
    """The Orphan finalizer of ConfigBundles, and the release it guards (thread-safe).

    Args:
        client: the API client (the finalizer patch).
        writer: writes the release of the object the bundle keeps.
        reports: where the ``Orphaned`` Event goes.
        field_manager: the field manager of the patch.
        dry_run: patch nothing; a release is reported as pending.
    """

    def __init__(
        self,
        *,
        client: Client,
        writer: Releaser,
        reports: Reporting,
        field_manager: str = "cbop",
        dry_run: bool = False,
    ) -> None:
        self._client = client
        self._writer = writer
        self._reports = reports
        self._field_manager = field_manager
        self._dry_run = dry_run

    def set(self, bundle: Mapping[str, Any], change: FinalizerChange) -> Mapping[str, Any]:
        """Add or remove ``cbop.dev/orphan``; return the bundle as patched.

        In a dry run, or when the bundle is gone while the finalizer comes off (a previous
        reconcile removed the last one and the cache has not seen the deletion yet),
        ``bundle`` itself.

        Raises:
            Requeue: the bundle changed since it was read (409).
            ApiError, ConnectionFailed: another failure.
        """
        if self._dry_run:
            return bundle
        meta = bundle["metadata"]
        patch = finalizer_patch(bundle, change)
        try:
            return self._client.patch(
                CONFIGBUNDLES,
                meta["namespace"],
                meta["name"],
                patch,
                patch_type="merge",
                field_manager=self._field_manager,
            )
        except ApiError as err:
            if err.is_conflict:
                raise Requeue("bundle changed while its finalizer was being set") from err
            if err.is_not_found and change is FinalizerChange.REMOVE:
                return bundle
            raise

    def release(self, key: str, bundle: Mapping[str, Any], decision: Decision) -> Result:
        """For deletionPolicy Orphan: let go of the ConfigMap, then drop the finalizer.

        ``decision`` is the ``RELEASE`` decision (its body the ConfigMap released, or
        None when the bundle controls none). An ``Orphaned`` Event follows the release.

        Raises:
            Requeue: the ConfigMap or the bundle changed meanwhile.
            ApiError, ConnectionFailed: another failure.
        """
        if self._dry_run:
            return Result(
                key,
                Action.RELEASE,
                message=f"would release the ConfigMap and remove the {FINALIZER_ORPHAN} "
                f"finalizer: {decision.message}",
                pending=True,
            )
        if decision.body is not None:
            self._writer.release(bundle, decision.body)
            self._reports.event(bundle, "Normal", "Orphaned", decision.message)
        self.set(bundle, FinalizerChange.REMOVE)
        return Result(key, Action.RELEASE, message=decision.message)
