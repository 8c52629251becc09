"""What a ConfigBundle reconcile reports: status, Events, write counts, refusals.

This module owns :class:`ReconcileReports`, the reporting part of the act layer
(:class:`cbop.configbundle.Reconciler` is built on it): the Ready condition an outcome
maps to, the bundle's ``status`` written only when its content changes (and read back
as written while the cache catches up, :class:`cbop.runtime.OwnWrites`), the Events of
each action, the ConfigMap write counts of the metrics hooks, and the status of a
failed reconcile. It also owns :class:`RejectedError`, how a ConfigMap write the API
server refuses for good (422 Invalid, 413 Request Entity Too Large, 400, 415) is
reported: as a spec problem, not retried until the spec changes.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from types import EllipsisType
from typing import Any

import structlog

from cbop.api import BundleSpec, Reason, SpecError, config_map_name_of, content_hash
from cbop.configbundle.decision import Action, Decision
from cbop.configbundle.interfaces import Client, Observer
from cbop.configbundle.status import ConditionStatus, compute_status, status_equal
from cbop.keys import object_key
from cbop.kube import CONFIGBUNDLES, ApiError, ConnectionFailed
from cbop.revisions.model import PinnedVerdict
from cbop.runtime.ownwrites import OwnWrites
from cbop.runtime.seams import EventSink

__all__ = ["UNRETRYABLE_STATUSES", "ReconcileReports", "RejectedError"]

log = structlog.get_logger("cbop.configbundle")


class ReconcileReports:
    """Status, Events and counts of the reconciler (a base of :class:`Reconciler`).

    The attributes below are the reconciler's state, set by
    :class:`cbop.configbundle.Reconciler`.
    """

    _client: Client
    _recorder: EventSink | None
    _observer: Observer
    _dry_run: bool
    _conflict_recheck: float
    _now: Callable[[], datetime.datetime]
    _field_manager: str
    _own_status: OwnWrites[dict[str, Any]]

    def _outcome(self, decision: Decision) -> tuple[ConditionStatus, Reason, str, float | None]:
        desired = decision.desired
        if decision.action is Action.INVALID:
            if decision.error is None:
                raise RuntimeError("an INVALID decision without its error (a bug)")
            return "False", decision.error.reason, decision.error.message, None
        if decision.action is Action.SUSPENDED:
            return "Unknown", Reason.SUSPENDED, decision.message, None
        if decision.action is Action.CONFLICT:
            return "False", Reason.CONFIGMAP_CONFLICT, decision.message, self._conflict_recheck
        if desired is None:
            raise RuntimeError(f"a {decision.action.value} decision without a desired ConfigMap")
        keys = len(desired.data) + len(desired.binary_data)
        return (
            "True",
            Reason.SYNCED,
            f"ConfigMap {desired.name} matches the spec "
            f"({keys} {'key' if keys == 1 else 'keys'}, {desired.content_hash})",
            None,
        )

    def _record_action(self, bundle: Mapping[str, Any], decision: Decision) -> None:
        action = decision.action
        if action is Action.NONE:
            return
        if decision.adopted:
            self._event(bundle, "Normal", "Adopted", decision.message)
        elif action in (Action.CREATE, Action.UPDATE, Action.REPLACE) and decision.drift:
            self._observer.drift_corrected()
            self._event(bundle, "Normal", "DriftCorrected", decision.message)
        elif action is Action.CREATE:
            self._event(bundle, "Normal", "Created", decision.message, routine=True)
        elif action is Action.UPDATE:
            self._event(bundle, "Normal", "Updated", decision.message, routine=True)
        elif action is Action.REPLACE:
            self._event(bundle, "Normal", "Replaced", decision.message)
        elif action is Action.CONFLICT:
            self._event(bundle, "Warning", Reason.CONFIGMAP_CONFLICT.value, decision.message)
        elif action is Action.INVALID and decision.error is not None:
            self._event(bundle, "Warning", decision.error.reason.value, decision.message)

    def _event(
        self,
        bundle: Mapping[str, Any],
        type_: Any,
        reason: str,
        message: str,
        *,
        routine: bool = False,
    ) -> None:
        """Record an Event; ``routine`` ones (what the spec asked for) only at ``--events all``."""
        if self._recorder is not None and not self._dry_run:
            self._recorder.event(bundle, type_, reason, message, routine=routine)

    def _count(self, operation: str) -> None:
        if not self._dry_run:
            self._observer.configmap_write(operation)

    def _report_error(
        self, bundle: Mapping[str, Any], spec: BundleSpec | SpecError, err: ApiError
    ) -> None:
        """Best effort: say in status why the reconcile failed; never mask ``err``."""
        if isinstance(err, ConnectionFailed):
            message = f"a write got no answer from the API server: {err}"
        else:
            message = f"the API server refused a write: {err.message or err.reason}"
        try:
            self._write_status(bundle, spec, "False", Reason.RECONCILE_ERROR, message)
        except ApiError as status_err:
            log.debug("status not written", error=str(status_err))

    def _write_status(
        self,
        bundle: Mapping[str, Any],
        spec: BundleSpec | SpecError,
        ready: ConditionStatus,
        reason: Reason,
        message: str,
        *,
        desired_hash: str | None = None,
        revision: str | EllipsisType | None = ...,
        pinned: PinnedVerdict | EllipsisType | None = ...,
    ) -> bool:
        """Write ``status`` if its content changed; return whether a write was sent.

        ``revision`` is what ``status.revision`` is to say: a name, None to remove it, or
        ``...`` (the default) to leave it as it is; ``pinned`` the ``Pinned`` condition
        the same way (:mod:`cbop.revisions.bundle`).

        ``desired_hash`` is the content hash the decision already computed; it is
        computed here only when the decision had no desired ConfigMap (a suspended
        bundle, an error path), so a resync hashes up to 1 MiB of content once, not twice.
        """
        if self._dry_run:
            return False
        bundle = self._with_own_status(bundle)
        valid = spec if isinstance(spec, BundleSpec) else None
        if valid is not None and desired_hash is None:
            desired_hash = content_hash(valid.data, valid.binary_data)
        # A bundle without sources has no provenance fields (none are written, so no
        # bundle of before sources gets a status write); a composed one has its own.
        provenance = None
        if valid is not None:
            provenance = valid.provenance if valid.composed else {}
        name = valid.config_map_name if valid else config_map_name_of(bundle)
        key_count = valid.key_count if valid else None
        if valid is None and isinstance(spec, SpecError) and spec.spec is not None:
            # Composing failed: the ConfigMap keeps the last good content, and the
            # status keeps saying which (its hash and key count).
            kept = bundle.get("status") or {}
            name = spec.spec.config_map_name
            desired_hash, key_count = kept.get("contentHash"), kept.get("keyCount")
            valid_hash = desired_hash
        else:
            valid_hash = desired_hash if valid else None
        new_status = compute_status(
            bundle,
            ready=ready,
            reason=reason,
            message=message,
            config_map_name=name,
            content_hash=valid_hash,
            key_count=key_count,
            now=self._now(),
            provenance=provenance,
            pinned=pinned,
        )
        if revision is not ...:
            new_status.pop("revision", None)
            if revision is not None:
                new_status["revision"] = revision
            elif "revision" in (bundle.get("status") or {}):
                new_status["revision"] = None  # the merge patch removes it
        if status_equal(bundle.get("status"), new_status):
            return False
        meta = bundle["metadata"]
        try:
            patched = self._client.patch(
                CONFIGBUNDLES,
                meta["namespace"],
                meta["name"],
                {"status": new_status},
                patch_type="merge",
                subresource="status",
                field_manager=self._field_manager,
            )
        except ApiError as err:
            if err.is_not_found:
                return True  # deleted meanwhile; nothing to report to
            raise
        self._own_status.record(object_key(bundle), bundle, patched, new_status)
        return True

    def _with_own_status(self, bundle: Mapping[str, Any]) -> Mapping[str, Any]:
        """Return ``bundle`` as it is once this reconciler's last status write lands.

        That is ``bundle`` with the written status while the cache has not caught up with
        the write (:class:`cbop.runtime.OwnWrites`); else ``bundle`` itself. Never
        mutates it.
        """
        written = self._own_status.pending(object_key(bundle), bundle)
        if written is None:
            return bundle
        return {**bundle, "status": written}


class RejectedError(ApiError):
    """The API server refused the ConfigMap for good: report ``condition_reason``, no retry."""

    def __init__(self, message: str, condition_reason: Reason = Reason.INVALID_SPEC) -> None:
        super().__init__(422, "Invalid", message)
        self.condition_reason = condition_reason


#: Refusals of a ConfigMap write that the same request can never overcome: 400 Bad
#: Request and 415 Unsupported Media Type (413 and 422 have their own messages). 403
#: is not among them: RBAC is often granted after the operator starts.
UNRETRYABLE_STATUSES = frozenset({400, 415})
