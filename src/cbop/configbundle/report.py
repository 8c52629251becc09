"""What a ConfigBundle reconcile reports: status, Events, write counts.

This module owns :class:`StatusReporter`, the part of the reconciler that tells the user
and the metrics what happened: the bundle's ``status``, written only when its content
changes and read back as written while the cache catches up
(:class:`cbop.runtime.OwnWrites`); the Events of each action; the ConfigMap write
counts; the status of a refused or failed reconcile. The other parts report through
it (:class:`cbop.configbundle.interfaces.Reporting`). In a dry run it writes and
counts nothing.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from types import EllipsisType
from typing import Any

import structlog

from cbop.api import (
    BundleSpec,
    Kind,
    Reason,
    SpecError,
    config_map_name_of,
    content_hash,
    target_of,
)
from cbop.configbundle.decision import Action, Decision
from cbop.configbundle.interfaces import NO_OBSERVER, Client, Observer, RejectedError
from cbop.configbundle.status import ConditionStatus, compute_status, status_equal
from cbop.keys import object_key
from cbop.kube import CONFIGBUNDLES, ApiError, ConnectionFailed
from cbop.revisions.model import PinnedVerdict
from cbop.runtime.ownwrites import OwnWrites
from cbop.runtime.seams import EventSink, EventType

__all__ = ["StatusReporter"]

log = structlog.get_logger("cbop.configbundle")


class StatusReporter:
    """Status, Events and write counts of ConfigBundle reconciles (thread-safe).

    Args:
        client: the API client (the status patch).
        recorder: where Events go (None: none).
        observer: the metrics hooks (None: none).
        dry_run: write no status, record no Event, count nothing.
        now: wall clock for condition transition times.
        field_manager: the field manager of the status patch.
    """

    def __init__(
        self,
        *,
        client: Client,
        recorder: EventSink | None = None,
        observer: Observer | None = None,
        dry_run: bool = False,
        now: Callable[[], datetime.datetime] | None = None,
        field_manager: str = "cbop",
    ) -> None:
        self._client = client
        self._recorder = recorder
        self._observer = observer or NO_OBSERVER
        self._dry_run = dry_run
        self._now = now or (lambda: datetime.datetime.now(datetime.UTC))
        self._field_manager = field_manager
        # The last status written per bundle. A reconcile that still finds the bundle
        # as it was before the write in the cache (the watch event of the write is on
        # its way) compares with what was written, so a stale read never writes the
        # same status again with a new lastTransitionTime.
        self._own_status: OwnWrites[dict[str, Any]] = OwnWrites()

    def event(
        self,
        bundle: Mapping[str, Any],
        type_: EventType,
        reason: str,
        message: str,
        *,
        routine: bool = False,
    ) -> None:
        """Record an Event; ``routine`` ones (what the spec asked for) only at ``--events all``."""
        if self._recorder is not None and not self._dry_run:
            self._recorder.event(bundle, type_, reason, message, routine=routine)

    def count(self, operation: str, *, kind: Kind = Kind.CONFIGMAP) -> None:
        """Count one successful ConfigMap (or Secret) write: create, update, delete."""
        if self._dry_run:
            return
        if kind is Kind.SECRET:
            self._observer.secret_write(operation)
        else:
            self._observer.configmap_write(operation)

    def record(self, bundle: Mapping[str, Any], decision: Decision) -> None:
        """Record the Event of the action ``decision`` carried out (and count a drift)."""
        action = decision.action
        if action is Action.NONE:
            return
        if decision.adopted:
            self.event(bundle, "Normal", "Adopted", decision.message)
        elif action in (Action.CREATE, Action.UPDATE, Action.REPLACE) and decision.drift:
            if not self._dry_run:
                self._observer.drift_corrected()
            self.event(bundle, "Normal", "DriftCorrected", decision.message)
        elif action is Action.CREATE:
            self.event(bundle, "Normal", "Created", decision.message, routine=True)
        elif action is Action.UPDATE:
            self.event(bundle, "Normal", "Updated", decision.message, routine=True)
        elif action is Action.REPLACE:
            self.event(bundle, "Normal", "Replaced", decision.message)
        elif action is Action.CONFLICT:
            secret = decision.desired is not None and decision.desired.kind is Kind.SECRET
            reason = Reason.SECRET_CONFLICT if secret else Reason.CONFIGMAP_CONFLICT
            self.event(bundle, "Warning", reason.value, decision.message)
        elif action is Action.INVALID and decision.error is not None:
            self.event(bundle, "Warning", decision.error.reason.value, decision.message)

    def rejected(
        self, bundle: Mapping[str, Any], spec: BundleSpec | SpecError, err: RejectedError
    ) -> None:
        """Report a ConfigMap the API server refused for good: status and a Warning Event."""
        self.write_status(bundle, spec, "False", err.condition_reason, err.message)
        self.event(bundle, "Warning", err.condition_reason.value, err.message)

    def failed(
        self, bundle: Mapping[str, Any], spec: BundleSpec | SpecError, err: ApiError
    ) -> None:
        """Best effort: say in status why the reconcile failed (``ReconcileError``).

        Never raises: a status that cannot be written is logged at debug level, so the
        caller re-raises ``err`` itself.
        """
        if isinstance(err, ConnectionFailed):
            message = f"a write got no answer from the API server: {err}"
        else:
            message = f"the API server refused a write: {err.message or err.reason}"
        try:
            self.write_status(bundle, spec, "False", Reason.RECONCILE_ERROR, message)
        except ApiError as status_err:
            log.debug("status not written", error=str(status_err))

    def write_status(
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
        For a Secret target it is never computed here (that would be an unkeyed digest
        of Secret content): the status keeps the one it has.

        Raises:
            ApiError, ConnectionFailed: the patch failed (but for 404: the bundle is gone).
        """
        if self._dry_run:
            return False
        bundle = self._with_own_status(bundle)
        valid = spec if isinstance(spec, BundleSpec) else None
        target = valid.target if valid is not None else target_of(bundle)
        secret = target is not None and target.is_secret
        kept_spec = isinstance(spec, SpecError) and spec.spec is not None
        if valid is not None and desired_hash is None:
            if secret:
                desired_hash = (bundle.get("status") or {}).get("contentHash")
            else:
                desired_hash = content_hash(valid.data, valid.binary_data)
        # A bundle without sources has no provenance fields (none are written, so no
        # bundle of before sources gets a status write); a composed one has its own.
        provenance = None
        if valid is not None:
            provenance = valid.provenance if valid.composed else {}
        name = None if secret else (valid.config_map_name if valid else config_map_name_of(bundle))
        key_count = valid.key_count if valid else None
        if valid is None and isinstance(spec, SpecError) and spec.spec is not None:
            # Composing failed: the ConfigMap keeps the last good content, and the
            # status keeps saying which (its hash and key count).
            kept = bundle.get("status") or {}
            name = None if secret else spec.spec.config_map_name
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
            # A Secret is named once the spec parsed (not while SecretsDisabled: none is kept).
            secret_name=target.name
            if secret and target is not None and (valid is not None or kept_spec)
            else None,
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

    def written_version(self, bundle: Mapping[str, Any]) -> str | None:
        """Return the resourceVersion of ``bundle`` that its last status write produced.

        None unless that write was decided from ``bundle`` as given (its uid and
        resourceVersion) and its answer was read.
        """
        return self._own_status.written_version(object_key(bundle), bundle)

    def _with_own_status(self, bundle: Mapping[str, Any]) -> Mapping[str, Any]:
        """Return ``bundle`` as it is once this reporter's last status write lands.

        That is ``bundle`` with the written status while the cache has not caught up with
        the write (:class:`cbop.runtime.OwnWrites`); else ``bundle`` itself. Never
        mutates it.
        """
        written = self._own_status.pending(object_key(bundle), bundle)
        if written is None:
            return bundle
        return {**bundle, "status": written}
