"""The finalizer of a ConfigBundle, and the release of its ConfigMap (deletionPolicy Orphan).

This module owns :class:`FinalizerWrites`, the part of the act layer
(:class:`cbop.configbundle.Reconciler` is built on it) that adds and removes the
``cbop.dev/orphan`` finalizer (a merge patch carrying the resourceVersion read) and,
when a bundle with ``deletionPolicy: Orphan`` is being deleted, lets go of its ConfigMap
(an update without cbop's owner reference, labels and annotations) before removing the
finalizer. A conflict on either write becomes :class:`cbop.configbundle.Requeue`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cbop.api import FINALIZER_ORPHAN
from cbop.configbundle.decision import Action, Decision, FinalizerChange
from cbop.configbundle.interfaces import Requeue, Result
from cbop.configbundle.report import ReconcileReports
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError

__all__ = ["FinalizerWrites"]


class FinalizerWrites(ReconcileReports):
    """The finalizer patch and the Orphan release (a base of :class:`Reconciler`)."""

    def _set_finalizer(
        self, bundle: Mapping[str, Any], change: FinalizerChange
    ) -> Mapping[str, Any]:
        meta = bundle["metadata"]
        finalizers = [f for f in meta.get("finalizers") or () if f != FINALIZER_ORPHAN]
        if change is FinalizerChange.ADD:
            finalizers.append(FINALIZER_ORPHAN)
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
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
                # Already gone: a previous reconcile removed the last finalizer and the
                # cache has not seen the deletion yet. Nothing is left to do.
                return bundle
            raise

    def _release(self, key: str, bundle: Mapping[str, Any], decision: Decision) -> Result:
        """For deletionPolicy Orphan: let go of the ConfigMap, then drop the finalizer."""
        meta = bundle["metadata"]
        if self._dry_run:
            return Result(
                key,
                Action.RELEASE,
                message=f"would release the ConfigMap and remove the {FINALIZER_ORPHAN} "
                f"finalizer: {decision.message}",
                pending=True,
            )
        if decision.body is not None:
            name = decision.body["metadata"]["name"]
            try:
                self._client.update(
                    CONFIGMAPS,
                    meta["namespace"],
                    name,
                    decision.body,
                    field_manager=self._field_manager,
                )
                self._count("update")
            except ApiError as err:
                if err.is_conflict:
                    raise Requeue("ConfigMap changed while being released") from err
                if not err.is_not_found:
                    raise
            self._event(bundle, "Normal", "Orphaned", decision.message)
        self._set_finalizer(bundle, FinalizerChange.REMOVE)
        return Result(key, Action.RELEASE, message=decision.message)
