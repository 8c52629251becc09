"""The ConfigBundle reconcile: read from the caches, decide, act through its parts, log.

This module owns :class:`Reconciler`, which the ConfigBundle controller and
``cbop --once`` call with one ``namespace/name`` key at a time. It reads the bundle and
its ConfigMap from the caches once, asks the pure
:func:`cbop.configbundle.decision.decide` (through :class:`cbop.configbundle.memo.DecisionMemo`),
and carries the decision out through the parts it holds, each with its own state and
tests: the sources (:mod:`cbop.configbundle.sources`), the finalizer and the Orphan
release (:mod:`cbop.configbundle.release`), the revisions
(:class:`cbop.revisions.bundle.BundleRevisions`), the ConfigMap writes
(:mod:`cbop.configbundle.writes`), and status, Events and counts
(:mod:`cbop.configbundle.report`). Its seams and :class:`Result` are in
:mod:`cbop.configbundle.interfaces`.

The error policy, as sample-controller's syncHandler: a refusal no retry can fix (an
invalid spec, a ConfigMap too large, 422, 413, 400, 415) is reported in the status and
not requeued; a lost race is a quiet :class:`Requeue`; anything else is reported as
``ReconcileError`` and retried rate-limited. A name taken by a ConfigMap cbop does not
manage is rechecked after ``conflict_recheck`` seconds, because cbop does not watch
such ConfigMaps and cannot hear of their deletion.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Final, NamedTuple

import structlog

from cbop.api import BundleSpec, Kind, Reason, SpecError, config_map_name_of, target_of
from cbop.clock import Clock
from cbop.configbundle.decision import (
    CONFIGMAP,
    SECRET,
    Action,
    Decision,
    TargetOps,
    status_can_wait,
)
from cbop.configbundle.desired import desired_configmap
from cbop.configbundle.diff import configmap_diff, secret_diff
from cbop.configbundle.dryrun import dry_run_account
from cbop.configbundle.interfaces import (
    Client,
    Lister,
    Observer,
    RejectedError,
    Requeue,
    Result,
    RevisionKeeper,
    TargetWriter,
)
from cbop.configbundle.memo import DecisionMemo, Make
from cbop.configbundle.release import Finalizer
from cbop.configbundle.report import StatusReporter
from cbop.configbundle.secretwrites import SecretWriter
from cbop.configbundle.sources import SourceReader
from cbop.configbundle.status import ready_condition
from cbop.configbundle.writes import ConfigMapWriter
from cbop.keys import split_key
from cbop.kube import ApiError
from cbop.revisions.bundle import DEFAULT_GRACE, BundleRevisions, RevisionOutcome
from cbop.revisions.caches import History
from cbop.revisions.policy import PolicyCheck
from cbop.runtime.seams import EventSink
from cbop.secretaccess.digestkey import DigestKey, DigestKeyError
from cbop.secretaccess.scope import SecretsScope

__all__ = ["Reconciler"]

#: The actions that write the ConfigMap (a dry run's result carries the body).
_WRITES: Final = frozenset({Action.CREATE, Action.UPDATE, Action.REPLACE})
#: The decisions after which the plain ConfigMap is as the spec says (or is being made
#: so): only then are the current revision and no stale ConfigMap kept.
_KEPT: Final = frozenset({Action.NONE, *_WRITES})

log = structlog.get_logger("cbop.configbundle")


class _Parts(NamedTuple):
    """The parts that keep one kind of target: its writer, its finalizer, its rules."""

    writer: TargetWriter
    finalizer: Finalizer
    ops: TargetOps
    make: Make


class Reconciler:
    """Reconciles one ConfigBundle key at a time; safe to call from many threads.

    Builds its parts from the arguments below: a :class:`StatusReporter` (``client``,
    ``recorder``, ``observer``, ``now``), a :class:`ConfigMapWriter` (``configmaps``,
    ``conflict_recheck``), a :class:`Finalizer`, a :class:`SourceReader` (``sources``,
    ``source_scope``) and a :class:`BundleRevisions` (``history``, ``pin_policy``,
    ``rollout``, ``revision_grace``, ``clock``); each gets ``field_manager`` and
    ``dry_run`` where it writes.

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
        sources: lister over the source-ConfigMap cache (label ``cbop.dev/source=true``,
            every namespace in scope, never shard-filtered); None: no source is found.
        source_scope: the namespaces cbop watches (``--namespace``), None for all; a
            source elsewhere is reported as not found, naming them.
        history: the caches of the templates and pods that name revisions
            (:func:`cbop.revisions.caches.history_listers`); None: revisions are not
            collected past the newest ``keep`` nor verified (``cbop --once``).
        pin_policy: tells whether the admission policy that points pods at revisions
            is installed, for the ``Pinned`` condition (None: not looked at).
        rollout: whether the rollout runs (without it no template names revisions).
        revision_grace: seconds a revision must have been unnamed before it is deleted
            (:mod:`cbop.revisions.bundle`).
        clock: the monotonic clock of that grace (tests: ``FakeClock``).
        memo: the memo of decisions (None: a new :class:`DecisionMemo`).
        secrets: which bundles with a Secret target are served (default: none; a bundle
            with a Secret target is then ``SecretsDisabled`` and nothing is read or
            written for it).
        secret_targets: lister over the managed-Secret cache, with the
            ``controller-uid`` index (with Secrets on).
        secret_sources: lister over the source-Secret cache (with Secrets on).
        digest_key: the scope's digest key (with Secrets on); with the two listers, the
            reconciler builds a :class:`SecretWriter` beside the ConfigMap writer.
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
        sources: Lister | None = None,
        source_scope: Sequence[str] | None = None,
        history: History | None = None,
        pin_policy: PolicyCheck | None = None,
        rollout: bool = True,
        revision_grace: float = DEFAULT_GRACE,
        clock: Clock | None = None,
        memo: DecisionMemo | None = None,
        secrets: SecretsScope | None = None,
        secret_targets: Lister | None = None,
        secret_sources: Lister | None = None,
        digest_key: DigestKey | None = None,
    ) -> None:
        self._bundles = bundles
        self._secrets = secrets or SecretsScope()
        self._dry_run = dry_run
        self._conflict_recheck = conflict_recheck
        # Parsed specs, desired ConfigMaps and in-sync verdicts by (uid, generation) and
        # the ConfigMap's (uid, resourceVersion): a no-op reconcile recomputes none.
        self._memo = memo or DecisionMemo()
        self._sources = SourceReader(
            sources,
            source_scope,
            secrets=secret_sources,
            secret_scope=self._secrets.namespaces,
            key=digest_key.key if digest_key is not None else None,
        )
        self._reporter = StatusReporter(
            client=client,
            recorder=recorder,
            observer=observer,
            dry_run=dry_run,
            now=now,
            field_manager=field_manager,
        )
        self._writer: TargetWriter = ConfigMapWriter(
            client=client,
            configmaps=configmaps,
            reports=self._reporter,
            field_manager=field_manager,
            dry_run=dry_run,
            conflict_recheck=conflict_recheck,
        )
        self._configmap = _Parts(
            self._writer,
            Finalizer(
                client=client,
                writer=self._writer,
                reports=self._reporter,
                field_manager=field_manager,
                dry_run=dry_run,
            ),
            CONFIGMAP,
            desired_configmap,
        )
        self._secret: _Parts | None = None
        if secret_targets is not None and digest_key is not None:
            secret_writer = SecretWriter(
                client=client,
                secrets=secret_targets,
                digest_key=digest_key,
                reports=self._reporter,
                field_manager=field_manager,
                dry_run=dry_run,
                conflict_recheck=conflict_recheck,
            )
            self._secret = _Parts(
                secret_writer,
                Finalizer(
                    client=client,
                    writer=secret_writer,
                    reports=self._reporter,
                    field_manager=field_manager,
                    dry_run=dry_run,
                ),
                SECRET,
                secret_writer.desired,
            )
        self._revisions: RevisionKeeper = BundleRevisions(
            client=client,
            configmaps=configmaps,
            history=history,
            policy=pin_policy,
            recorder=recorder,
            count=self._reporter.count,
            event=self._reporter.event,
            field_manager=field_manager,
            conflict_recheck=conflict_recheck,
            rollout=rollout,
            grace=revision_grace,
            clock=clock,
        )

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
        parts = self._parts_for(bundle)
        inputs = self._sources.inputs(bundle)
        current = parts.writer.cached(bundle)
        if not self._dry_run:
            unchanged = self._unchanged(parts, bundle, current, inputs)
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
        parsed, known = self._memo.lookup(bundle)
        spec = self._gate(bundle, parsed)
        self._memo.forget_noop(bundle)
        # The controller binds controller, namespace, name and reconcile_id to every
        # line of the reconcile (cbop.runtime.reconcile_context).
        logger = log
        if current is None and isinstance(spec, BundleSpec):
            current = parts.writer.recheck(key, namespace or "", spec.target.name)
        decision = self._memo.decide(
            bundle, spec, current, keep=known, inputs=inputs, ops=parts.ops, make=parts.make
        )
        try:
            result = self._act(
                key,
                bundle,
                spec,
                current,
                decision,
                parts=parts,
                keep=not known,
                parsed=parsed,
                inputs=inputs,
            )
        except RejectedError as err:
            # The API server refused the ConfigMap in a way no retry can fix (a label
            # value it rejects, a request body over its limit): a spec problem, reported
            # like one, and not retried until the spec changes.
            self._reporter.rejected(bundle, spec, err)
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
            self._reporter.failed(bundle, spec, err)
            logger.warning(
                "reconcile failed",
                action=decision.action.value,
                error=str(err),
                duration=round(time.monotonic() - started, 6),
            )
            raise
        parts.writer.remember(key, taken=result.action is Action.CONFLICT)
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

    def _parts_for(self, bundle: Mapping[str, Any]) -> _Parts:
        """Return the parts of ``bundle``'s target: the Secret ones for a Secret cbop serves.

        A Secret target cbop does not serve is decided ``SecretsDisabled`` (:meth:`_gate`),
        which writes nothing; the ConfigMap parts carry that decision, and never write a
        ConfigMap for it (a Secret target has no ConfigMap name).

        Raises:
            RuntimeError: a served Secret target without the Secret parts (a bug).
        """
        target = target_of(bundle)
        if target is None or not target.is_secret or self._secrets.refusal(bundle) is not None:
            return self._configmap
        if self._secret is None:
            raise RuntimeError("Secrets are on, and the reconciler has no Secret writer (a bug)")
        return self._secret

    def _gate(
        self, bundle: Mapping[str, Any], parsed: BundleSpec | SpecError
    ) -> BundleSpec | SpecError:
        """Return the spec to decide on: ``parsed`` with its sources composed in.

        A Secret target that cbop does not serve (:class:`SecretsScope`) is a
        ``SecretsDisabled`` error instead, before anything is read. For one it serves,
        the digest key is read first: a key that cannot be read is reported
        (``ReconcileError``) and retried with backoff, as a failed write is.

        Raises:
            DigestKeyError, ApiError, ConnectionFailed: the digest key cannot be read.
        """
        refusal = self._secrets.refusal(bundle)
        if refusal is not None:
            return refusal
        if isinstance(parsed, BundleSpec) and parsed.target.is_secret and self._secret:
            writer = self._secret.writer
            if isinstance(writer, SecretWriter):
                try:
                    writer.key()
                except DigestKeyError as err:
                    self._reporter.write_status(
                        bundle, parsed, "False", Reason.RECONCILE_ERROR, str(err)
                    )
                    raise
                except ApiError as err:
                    self._reporter.failed(bundle, parsed, err)
                    raise
        return self._sources.compose(bundle, parsed)

    def _unchanged(
        self,
        parts: _Parts,
        bundle: Mapping[str, Any],
        current: Mapping[str, Any] | None,
        inputs: Hashable,
    ) -> Result | None:
        """Return the outcome of the bundle's last full reconcile if it still holds, else None.

        It holds when that reconcile wrote nothing, the bundle and its ConfigMap
        (``current``) in the cache are the very versions it was decided against, the
        revisions need nothing, and no other ConfigMap controlled by the bundle has
        appeared since (one would be deleted as stale). Every other input of the
        decision is part of those objects, and a full reconcile drops the stored
        outcome before it begins, so the answer is the one a full reconcile would give,
        without parsing the spec, deciding again or computing the status: what a resync
        of a converged bundle costs.
        """
        known: Result | None = self._memo.noop(bundle, current, inputs)
        if known is None or current is None or not self._revisions.in_place(bundle):
            return None
        if parts.writer.controls_others(bundle, current["metadata"]["name"]):
            return None
        return known

    # -- act ------------------------------------------------------------------------

    def _act(
        self,
        key: str,
        bundle: Mapping[str, Any],
        spec: BundleSpec | SpecError,
        current: Mapping[str, Any] | None,
        decision: Decision,
        *,
        parts: _Parts,
        keep: bool = False,
        parsed: BundleSpec | SpecError | None = None,
        inputs: Hashable = None,
    ) -> Result:
        """Carry out ``decision``, made against ``current``; with ``keep``, memoise it if it wrote.

        ``spec`` is the spec with its sources composed in; ``parsed`` the spec as parsed
        (what the memo keeps; None: ``spec``), ``inputs`` the sources' versions.
        """
        if decision.action is Action.DELETING:
            return Result(key, Action.DELETING, message=decision.message)
        if decision.action is Action.RELEASE:
            return parts.finalizer.release(key, bundle, decision)
        if decision.finalizer is not None:
            bundle = parts.finalizer.set(bundle, decision.finalizer)
        revision = self._keep_revision(bundle, decision)
        decision, current = parts.writer.apply(bundle, spec, decision, current)
        stale = parts.writer.delete_stale(bundle, decision) if decision.action in _KEPT else []
        secret = parts.ops.kind is Kind.SECRET
        self._reporter.record(bundle, decision)
        ready, reason, message, requeue = ready_condition(
            decision, conflict_recheck=self._conflict_recheck
        )
        ready, reason, message, requeue = revision.applied_to(ready, reason, message, requeue)
        diff, pending = "", False
        if self._dry_run:
            show = secret_diff if secret else configmap_diff
            diff = show(current, decision.body) if decision.body is not None else ""
            after = "Ready" if ready == "True" else reason.value
            message, pending = dry_run_account(
                decision, message, stale, after, revision.would_create
            )
        if not isinstance(spec, BundleSpec) and decision.action is not Action.INVALID:
            # A bug, not bad input: the decision acted on a spec that did not parse.
            raise RuntimeError(f"decided {decision.action.value} for an invalid spec of {key}")
        # New content from a source within a Ready generation: the status follows in the
        # reconcile the ConfigMap's watch event brings, after the other readers' writes.
        wrote_status = False
        if not (ready == "True" and status_can_wait(bundle, decision)):
            wrote_status = self._reporter.write_status(
                bundle,
                spec,
                ready,
                reason,
                message,
                desired_hash=decision.desired.content_hash if decision.desired else None,
                revision=revision.status,
                pinned=revision.pinned,
            )
        if revision.retry and not self._dry_run:
            # The revision was refused (reported in status and an Event): retry with
            # backoff, the plain ConfigMap written meanwhile.
            raise Requeue(f"revision of {key} not created")
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
            # The rollout plans ConfigMap changes only: a Secret's body stays here.
            written=decision.body
            if pending and decision.action in _WRITES and not secret
            else None,
            new_revision=revision.would_create,
            secret=decision.desired.name if secret and decision.desired else None,
        )
        if (
            decision.action is Action.NONE
            and decision.finalizer is None
            and current is not None
            and not (stale or wrote_status or requeue or self._dry_run)
        ):
            self._memo.remember_noop(bundle, current, result, inputs)
        elif (
            wrote_status
            and decision.action is Action.NONE
            and decision.finalizer is None
            and current is not None
            and not (stale or requeue)
            and (written := self._reporter.written_version(bundle)) is not None
        ):
            # Only the status was written: the reconcile its watch event brings would
            # decide the same and write nothing, so it gets this outcome from the memo
            # (for the version the write produced, and only while nothing else moved).
            self._memo.remember_noop(bundle, current, result, inputs, resource_version=written)
            if keep:
                self._memo.keep(bundle, spec if parsed is None else parsed, decision, inputs=inputs)
        elif (
            keep
            and not self._dry_run
            and (
                wrote_status
                or stale
                or decision.finalizer is not None
                or decision.action in _WRITES
            )
        ):
            # The watch events of its writes bring the bundle back within seconds.
            self._memo.keep(bundle, spec if parsed is None else parsed, decision, inputs=inputs)
        return result

    def _keep_revision(self, bundle: Mapping[str, Any], decision: Decision) -> RevisionOutcome:
        """Return what the revisions part of the reconcile found and did (:mod:`cbop.revisions`).

        Only a decision that keeps the ConfigMap (none, create, update, replace) keeps a
        revision (never one of a Secret: refused at admission); a dry run only looks.
        """
        if decision.action not in _KEPT or decision.desired is None:
            return RevisionOutcome()
        if decision.desired.kind is Kind.SECRET:
            return RevisionOutcome()
        if self._dry_run:
            return self._revisions.planned(bundle, decision.desired)
        return self._revisions.keep(bundle, decision.desired)
