"""The reconcile act layer: read from the caches, decide, write, report.

Its seams (listers, client, metrics hooks) and :class:`Result` are in
:mod:`cbop.configbundle.interfaces`; the dry-run account in :mod:`cbop.configbundle.dryrun`.

:class:`Reconciler` turns one ``namespace/name`` key into at most a handful of API
writes. It reads the bundle and its ConfigMap from the informer caches (listers), asks
the pure :func:`cbop.configbundle.decision.decide` what to do, performs it, and writes the
bundle's status only when its content changes. It never mutates cached objects.

Error policy (what the controller does with the outcome), as sample-controller's
syncHandler:

- the bundle is gone from the cache -> nothing (the garbage collector handles the
  ConfigMap through its owner reference);
- invalid spec, ConfigMap too large, or the API refusing the ConfigMap write in a way
  no retry can fix (422 Invalid, 413 Request Entity Too Large, 400, 415) -> status
  says so, no requeue: only a spec change (a new watch event) can fix it;
- name taken by a ConfigMap cbop does not own -> status says so, and a recheck after
  ``conflict_recheck`` seconds (cbop does not watch ConfigMaps it does not manage, so
  it cannot hear of such a blocker's deletion otherwise; a blocker that is another
  bundle's managed ConfigMap wakes the bundle as soon as it is deleted or released,
  through the controller's key mapping);
- 409 Conflict (lost an optimistic-concurrency race) -> :class:`Requeue`: a quiet,
  rate-limited retry from fresh cache state;
- AlreadyExists on create (stale cache) -> a fresh GET, then decide again;
- anything else -> status ``ReconcileError`` and the error is re-raised for a
  rate-limited retry.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping
from typing import Any

import cachetools
import structlog

from cbop.api import (
    FINALIZER_ORPHAN,
    BundleSpec,
    Reason,
    SpecError,
    config_map_name_of,
    content_hash,
)
from cbop.configbundle.decision import Action, Decision, FinalizerChange, decide
from cbop.configbundle.diff import configmap_diff
from cbop.configbundle.dryrun import dry_run_account
from cbop.configbundle.interfaces import (
    CONTROLLER_UID_INDEX,
    NO_OBSERVER,
    Client,
    Lister,
    Observer,
    Requeue,
    Result,
)
from cbop.configbundle.memo import DecisionMemo
from cbop.configbundle.status import ConditionStatus, compute_status, status_equal
from cbop.keys import object_key, split_key
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, ConnectionFailed
from cbop.locks import YieldingLock, absent
from cbop.runtime.ownwrites import OwnWrites
from cbop.runtime.seams import EventSink

log = structlog.get_logger("cbop.configbundle")


class Reconciler:
    """Reconciles one ConfigBundle key at a time; safe to call from many threads.

    Args:
        client: the API client (writes, and the rare fresh read).
        bundles: lister over the ConfigBundle informer cache.
        configmaps: lister over the managed-ConfigMap informer cache, with the
            ``controller-uid`` index.
        recorder: where Events go.
        observer: metrics hooks (optional).
        dry_run: send ConfigMap writes with ``dryRun=All`` and skip status and Events;
            the result carries a unified diff of each ConfigMap change.
        conflict_recheck: seconds between rechecks of a name taken by a foreign ConfigMap.
        now: wall clock for condition transition times.
        field_manager: the field manager name sent with writes.
    """

    def __init__(
        self,
        *,
        client: Client,
        bundles: Lister,
        configmaps: Lister,
        recorder: EventSink | None = None,
        observer: Observer | None = None,
        dry_run: bool = False,
        conflict_recheck: float = 15.0,
        now: Callable[[], datetime.datetime] | None = None,
        field_manager: str = "cbop",
    ) -> None:
        self._client = client
        self._bundles = bundles
        self._configmaps = configmaps
        self._recorder = recorder
        self._observer: Observer = observer or NO_OBSERVER
        self._dry_run = dry_run
        self._conflict_recheck = conflict_recheck
        self._now = now or (lambda: datetime.datetime.now(datetime.UTC))
        self._field_manager = field_manager
        # Bundles whose ConfigMap name is taken by a ConfigMap cbop does not watch (it
        # carries no managed-by label): their rechecks read it first instead of trying
        # a create that is bound to fail. Entries expire on their own.
        self._conflicts: cachetools.TTLCache[str, bool] = cachetools.TTLCache(
            maxsize=100_000, ttl=4 * conflict_recheck
        )
        self._conflicts_lock = YieldingLock()
        # The last status written per bundle. A reconcile that still finds the bundle
        # as it was before the write in the cache (the watch event of the write is on
        # its way) compares with what was written, so a stale read never writes the
        # same status again with a new lastTransitionTime.
        self._own_status: OwnWrites[dict[str, Any]] = OwnWrites()
        # Parsed specs, desired ConfigMaps and in-sync verdicts by (uid, generation) and
        # the ConfigMap's (uid, resourceVersion): a no-op reconcile recomputes none.
        self._memo = DecisionMemo()

    # -- entry point ---------------------------------------------------------------

    def reconcile(self, key: str) -> Result:
        """Bring the ConfigMap of bundle ``key`` (``namespace/name``) in line with its spec.

        Returns:
            The :class:`Result` (requeue_after set for name conflicts).

        Raises:
            Requeue: a lost optimistic-concurrency race; retry from fresh state.
            ApiError, ConnectionFailed: other failures (already reported in status when
                possible); retry with backoff.
        """
        namespace, name = split_key(key)
        bundle = self._bundles.get(namespace, name)
        if bundle is None:
            return Result(key, None, message="bundle not found; nothing to do")
        started = time.monotonic()
        if not self._dry_run:
            unchanged = self._unchanged(bundle)
            if unchanged is not None:
                log.debug(
                    "reconciled",
                    action=Action.NONE.value,
                    ready=unchanged.ready,
                    reason=unchanged.reason.value if unchanged.reason else None,
                    duration=round(time.monotonic() - started, 6),
                )
                return unchanged
        # A bundle version in the working set is a follow-up of a recent write; only
        # then, or when this reconcile writes, are the computed parts kept (see memo).
        spec, known = self._memo.lookup(bundle)
        current = self._cached_configmap(bundle, spec)
        self._memo.forget_noop(bundle)
        # The controller binds controller, namespace, name and reconcile_id to every
        # line of the reconcile (cbop.runtime.reconcile_context).
        logger = log
        if current is None and isinstance(spec, BundleSpec) and self._known_conflict(key):
            current = self._fresh_configmap(namespace or "", spec.config_map_name)
        decision = self._memo.decide(bundle, spec, current, keep=known)
        try:
            result = self._act(key, bundle, spec, decision, keep=not known)
        except _RejectedError as err:
            # The API server refused the ConfigMap in a way no retry can fix (a label
            # value it rejects, a request body over its limit): a spec problem, reported
            # like one, and not retried until the spec changes.
            self._write_status(bundle, spec, "False", err.condition_reason, err.message)
            self._event(bundle, "Warning", err.condition_reason.value, err.message)
            result = Result(
                key,
                Action.INVALID,
                ready="False",
                reason=err.condition_reason,
                message=err.message,
                config_map=config_map_name_of(bundle),
            )
        except Requeue:
            logger.debug("reconcile lost a race; requeueing", action=decision.action.value)
            raise
        except ApiError as err:
            self._report_error(bundle, spec, err)
            logger.warning(
                "reconcile failed",
                action=decision.action.value,
                error=str(err),
                duration=round(time.monotonic() - started, 6),
            )
            raise
        self._remember_conflict(key, result.action is Action.CONFLICT)
        if self._dry_run:
            # A dry run reconciled nothing: its line says what is pending, never "reconciled".
            logger.info(
                "dry run: change pending" if result.pending else "dry run: nothing to write",
                action=result.action.value if result.action else None,
                ready_after=result.ready,
                reason=result.reason.value if result.reason else None,
                duration=round(time.monotonic() - started, 6),
            )
            return result
        # A reconcile that found everything in sync (every resync brings one per bundle)
        # is logged at debug level: a converged operator's log stays quiet.
        emit = logger.debug if result.action is Action.NONE else logger.info
        emit(
            "reconciled",
            action=result.action.value if result.action else None,
            ready=result.ready,
            reason=result.reason.value if result.reason else None,
            duration=round(time.monotonic() - started, 6),
        )
        return result

    def _unchanged(self, bundle: Mapping[str, Any]) -> Result | None:
        """Return the outcome of the bundle's last full reconcile if it still holds, else None.

        It holds when that reconcile wrote nothing, the bundle and its ConfigMap in the
        cache are the very versions it was decided against, and no other ConfigMap
        controlled by the bundle has appeared since (one would be deleted as stale).
        Every other input of the decision is part of those objects, and a full
        reconcile drops the stored outcome before it begins, so the answer is the one a
        full reconcile would give, without parsing the spec, deciding again or computing
        the status: what a resync of a converged bundle costs. The ConfigMap's name is
        the one stored with the outcome (the same bundle version has the same spec).
        """
        namespace = bundle["metadata"]["namespace"]
        stored = self._memo.noop(bundle, lambda name: self._configmaps.get(namespace, name))
        if stored is None:
            return None
        known: Result = stored[0]
        name = stored[1]["metadata"]["name"]
        uid = bundle["metadata"]["uid"]
        for cm in self._configmaps.by_index(CONTROLLER_UID_INDEX, uid):
            if cm["metadata"]["name"] != name:
                return None
        return known

    # -- reads ----------------------------------------------------------------------

    def _known_conflict(self, key: str) -> bool:
        # A containment test, which needs no lock (see memo.absent).
        return not absent(self._conflicts, key)

    def _remember_conflict(self, key: str, conflict: bool) -> None:
        if not conflict and absent(self._conflicts, key):
            return
        with self._conflicts_lock:
            if conflict:
                self._conflicts[key] = True
            else:
                self._conflicts.pop(key, None)

    def _cached_configmap(
        self, bundle: Mapping[str, Any], spec: BundleSpec | SpecError
    ) -> Mapping[str, Any] | None:
        if not isinstance(spec, BundleSpec):
            return None
        return self._configmaps.get(bundle["metadata"]["namespace"], spec.config_map_name)

    def _fresh_configmap(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """GET the ConfigMap from the API server, bypassing a cache that may be stale."""
        try:
            return self._client.get(CONFIGMAPS, namespace, name)
        except ApiError as err:
            if err.is_not_found:
                return None
            raise

    # -- act ------------------------------------------------------------------------

    def _act(
        self,
        key: str,
        bundle: Mapping[str, Any],
        spec: BundleSpec | SpecError,
        decision: Decision,
        *,
        keep: bool = False,
    ) -> Result:
        """Carry out ``decision``; with ``keep``, memoise its spec and render if it wrote."""
        meta = bundle["metadata"]
        namespace = meta["namespace"]
        if decision.action is Action.DELETING:
            return Result(key, Action.DELETING, message=decision.message)
        if decision.action is Action.RELEASE:
            return self._release(key, bundle, decision)
        if decision.finalizer is not None and not self._dry_run:
            bundle = self._set_finalizer(bundle, decision.finalizer)

        current = self._cached_configmap(bundle, spec)
        attempts = 0
        while True:
            attempts += 1
            try:
                self._write_configmap(namespace, decision)
                break
            except ApiError as err:
                if attempts > 2:  # a fresh read once, then give up
                    raise
                fresh = self._recover(namespace, spec, decision, err)
                if fresh is _GIVE_UP:
                    raise
                current = fresh if isinstance(fresh, Mapping) else None
                decision = decide(bundle, spec, current)

        stale: list[str] = []
        if decision.action in (Action.NONE, Action.CREATE, Action.UPDATE, Action.REPLACE):
            stale = self._delete_stale(bundle, decision)
        self._record_action(bundle, decision)
        ready, reason, message, requeue = self._outcome(decision)
        diff, pending = "", False
        if self._dry_run:
            diff = configmap_diff(current, decision.body) if decision.body is not None else ""
            after = "Ready" if ready == "True" else reason.value
            message, pending = dry_run_account(decision, message, stale, after)
        assert isinstance(spec, BundleSpec) or decision.action is Action.INVALID
        wrote_status = self._write_status(
            bundle,
            spec,
            ready,
            reason,
            message,
            desired_hash=decision.desired.content_hash if decision.desired else None,
        )
        result = Result(
            key,
            decision.action,
            ready=ready,
            reason=reason,
            message=message,
            config_map=config_map_name_of(bundle),
            requeue_after=requeue,
            diff=diff,
            pending=pending,
        )
        if (
            decision.action is Action.NONE
            and decision.finalizer is None
            and current is not None
            and not (stale or wrote_status or requeue or self._dry_run)
        ):
            self._memo.remember_noop(bundle, current, result)
        elif (
            keep
            and not self._dry_run
            and (
                wrote_status
                or stale
                or decision.finalizer is not None
                or decision.action in (Action.CREATE, Action.UPDATE, Action.REPLACE)
            )
        ):
            # The watch events of its writes bring the bundle back within seconds.
            self._memo.keep(bundle, spec, decision)
        return result

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
        with, or ``_GIVE_UP`` to re-raise ``err``. 409 Conflict becomes :class:`Requeue`.
        """
        assert isinstance(spec, BundleSpec)
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
            raise _RejectedError(err.message) from err
        if err.is_request_entity_too_large:
            size = f"{err.request_bytes:,}-byte " if err.request_bytes is not None else ""
            raise _RejectedError(
                f"the API server refused the {size}request writing ConfigMap {name} as too "
                f"large ({err.status} {err.message or err.reason}); split the bundle or "
                "shrink its values",
                Reason.CONFIGMAP_TOO_LARGE,
            ) from err
        if err.status in _UNRETRYABLE_STATUSES:
            raise _RejectedError(
                f"the API server refused the request writing ConfigMap {name}: "
                f"{err.status} {err.message or err.reason}"
            ) from err
        return _GIVE_UP

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

    # -- reporting ------------------------------------------------------------------

    def _outcome(self, decision: Decision) -> tuple[ConditionStatus, Reason, str, float | None]:
        desired = decision.desired
        if decision.action is Action.INVALID:
            assert decision.error is not None
            return "False", decision.error.reason, decision.error.message, None
        if decision.action is Action.SUSPENDED:
            return "Unknown", Reason.SUSPENDED, decision.message, None
        if decision.action is Action.CONFLICT:
            return "False", Reason.CONFIGMAP_CONFLICT, decision.message, self._conflict_recheck
        assert desired is not None
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
    ) -> bool:
        """Write ``status`` if its content changed; return whether a write was sent.

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
        new_status = compute_status(
            bundle,
            ready=ready,
            reason=reason,
            message=message,
            config_map_name=valid.config_map_name if valid else config_map_name_of(bundle),
            content_hash=desired_hash if valid else None,
            key_count=valid.key_count if valid else None,
            now=self._now(),
        )
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


class _RejectedError(ApiError):
    """The API server refused the ConfigMap for good: report ``condition_reason``, no retry."""

    def __init__(self, message: str, condition_reason: Reason = Reason.INVALID_SPEC) -> None:
        super().__init__(422, "Invalid", message)
        self.condition_reason = condition_reason


#: Refusals of a ConfigMap write that the same request can never overcome: 400 Bad
#: Request and 415 Unsupported Media Type (413 and 422 have their own messages). 403
#: is not among them: RBAC is often granted after the operator starts.
_UNRETRYABLE_STATUSES = frozenset({400, 415})


_GIVE_UP = object()
