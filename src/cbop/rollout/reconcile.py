"""The rollout reconcile: read the caches, decide, apply through its parts, report.

:class:`RolloutReconciler` reconciles the workloads of one kind by their key: it reads
the workload and the ConfigMaps it references from the caches
(:mod:`cbop.rollout.references`), asks the pure :func:`cbop.rollout.decision.decide`,
and writes at most one server-side apply under its own field manager (the baseline
label, and, to roll, the pod template annotation ``cbop.dev/config-hash``).
docs/rollout.md says when a workload rolls. What the decision does not say is in the
parts the reconciler holds: the revisions the apply writes (:mod:`cbop.rollout.pins`),
changes made together coalesced into one write (:mod:`cbop.rollout.coalesce`), the
apply and its conflicts (:mod:`cbop.rollout.apply`), and the Events and counts
(:mod:`cbop.rollout.report`).

The error policy, as sample-controller's syncHandler: a workload gone from the cache
(deleted, or no longer opted in) or deleted meanwhile (404) -> nothing; a conflict cbop
does not take back -> a Warning Event and :class:`cbop.runtime.TerminalError`, no retry
until the workload's spec or the digest changes; anything else -> re-raised for a
rate-limited retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import structlog

from cbop.keys import split_key
from cbop.kube import Resource
from cbop.revisions.template import TemplatePin, pin_message
from cbop.rollout.apply import WorkloadApplier
from cbop.rollout.coalesce import ChangeCoalescer
from cbop.rollout.decision import FIELD_MANAGER, Action, Decision, apply_body, decide
from cbop.rollout.pins import PinPlanner
from cbop.rollout.references import read_references
from cbop.rollout.report import RolloutObserver, RolloutReporter
from cbop.runtime.reconcile import TerminalError
from cbop.runtime.seams import Client, EventSink, Lister

__all__ = ["RolloutReconciler", "RolloutResult"]

log = structlog.get_logger("cbop.rollout")

#: The actions that write (the baseline alone, or a rollout).
_WRITES: Final = frozenset({Action.RECORD, Action.APPLY})

#: What a report-once Event or a conflict not tried again is keyed by: the workload's
#: UID and generation, and the digest.
Mark = tuple[str, int, str]


def _mark(workload: Mapping[str, Any], digest: str) -> Mark:
    meta = workload.get("metadata") or {}
    return (str(meta.get("uid", "")), int(meta.get("generation") or 0), digest)


@dataclass(frozen=True, slots=True)
class RolloutResult:
    """The outcome of one rollout reconcile.

    Attributes:
        key: the ``namespace/name`` reconciled.
        action: what was decided, or None when the workload is not in the cache.
        digest: the digest the annotation should carry (``""``: no managed reference).
        written: whether an apply was sent and answered (the baseline label, and for
            APPLY the annotation too).
        requeue_after: seconds until the key should be looked at again (coalescing),
            or None.
        message: a one-line account of the outcome.
    """

    key: str
    action: Action | None
    digest: str = ""
    written: bool = False
    requeue_after: float | None = None
    message: str = ""


class RolloutReconciler:
    """Reconciles the ``cbop.dev/config-hash`` annotation of one kind of workload.

    Safe to call from many threads (never for the same key at once: the workqueue
    guarantees it). Builds its parts from the arguments: a :class:`PinPlanner`
    (``configmaps``), a :class:`WorkloadApplier` (``client``, ``field_manager``,
    ``force``) and a :class:`RolloutReporter` (``recorder``, ``observer``).

    Args:
        resource: the workload kind (``DEPLOYMENTS``, ``STATEFULSETS`` or ``DAEMONSETS``).
        client: the API client (the apply).
        workloads: lister over the opted-in workloads of ``resource``.
        configmaps: lister over the managed-ConfigMap informer cache.
        recorder: where Events go (None: none).
        observer: metrics hooks (``cbop_rollouts_total``).
        coalescer: the coalescer the ConfigMap map function feeds (None: write at once).
        field_manager: the server-side apply field manager.
        force: always send ``force=true`` (see :class:`WorkloadApplier`).
        controller_name: the ``controller`` field of the log lines.
    """

    def __init__(
        self,
        *,
        resource: Resource,
        client: Client,
        workloads: Lister,
        configmaps: Lister,
        recorder: EventSink | None = None,
        observer: RolloutObserver | None = None,
        coalescer: ChangeCoalescer | None = None,
        field_manager: str = FIELD_MANAGER,
        force: bool = False,
        controller_name: str | None = None,
    ) -> None:
        self._resource = resource
        self._client = client
        self._workloads = workloads
        self._configmaps = configmaps
        self._coalescer = coalescer
        self._controller_name = controller_name or f"rollout-{resource.kind.lower()}"
        self._pins = PinPlanner(configmaps, resource.kind)
        self._applier = WorkloadApplier(
            resource=resource, client=client, field_manager=field_manager, force=force
        )
        self._reporter = RolloutReporter(resource=resource, recorder=recorder, observer=observer)

    @property
    def resource(self) -> Resource:
        """The workload kind this reconciler handles."""
        return self._resource

    def reconcile(self, key: str) -> RolloutResult:
        """Bring workload ``key`` (``namespace/name``)'s config-hash annotation up to date.

        Returns:
            The :class:`RolloutResult` (``requeue_after`` set while coalescing).

        Raises:
            TerminalError: another manager applies the annotation (a 409 cbop does not
                answer with force); reported in a ``RolloutConflict`` Event, not retried.
            ApiError, ConnectionFailed: a failed apply other than a conflict or a 404;
                retry rate-limited.
        """
        namespace, name = split_key(key)
        as_of = self._coalescer.now() if self._coalescer is not None else 0.0
        workload = self._workloads.get(namespace, name)
        if workload is None:
            self._applier.forget(key)
            self._reporter.forget(key)
            self._settle(key, float("inf"))
            return RolloutResult(key, None, message="not in the cache (gone or not opted in)")
        configmaps, absent = read_references(self._client, self._configmaps, namespace, workload)
        pin, decision = self._pins.plan(workload, decide(workload, configmaps, absent))
        # The controller binds controller, namespace, name and reconcile_id to every
        # line of the reconcile (cbop.runtime.reconcile_context).
        logger = log
        mark = _mark(workload, decision.digest)
        if (
            pin.refused is not None
            and decision.action in (Action.NONE, Action.RECORD)
            and self._reporter.refused(key, workload, pin.refused, mark)
        ):
            logger.warning("rollout: pin not sent again", reason=pin.refused)
        if decision.action is Action.NONE:
            self._settle(key, as_of)
            if decision.digest:
                self._reporter.seen(workload, decision.configmaps)
            logger.debug("rollout: nothing to do", reason=decision.message or "in sync")
            return RolloutResult(key, Action.NONE, decision.digest, message=decision.message)
        if decision.action in _WRITES and self._applier.pending(key, workload, decision.digest):
            self._settle(key, as_of)
            logger.debug("rollout: own apply not in the cache yet", digest=decision.digest)
            return RolloutResult(
                key,
                Action.NONE,
                decision.digest,
                message="this digest was applied; the cache has not caught up yet",
            )
        delay = self._coalescer.delay(key) if self._coalescer is not None else 0.0
        if delay > 0:
            return RolloutResult(
                key,
                decision.action,
                decision.digest,
                requeue_after=delay,
                message="referenced ConfigMaps changed moments ago; waiting for more",
            )
        if decision.action is Action.SKIP:
            self._settle(key, as_of)
            if self._reporter.paused(key, workload, mark, decision.message):
                logger.info("rollout: skipped", reason=decision.message)
            return RolloutResult(key, Action.SKIP, decision.digest, message=decision.message)
        if self._applier.refused(key, mark):
            self._settle(key, as_of)
            return RolloutResult(
                key, decision.action, decision.digest, message="conflict reported; not retried"
            )
        return self._apply(key, workload, decision, pin, as_of=as_of, mark=mark, logger=logger)

    def _apply(
        self,
        key: str,
        workload: Mapping[str, Any],
        decision: Decision,
        pin: TemplatePin,
        *,
        as_of: float,
        mark: Mark,
        logger: Any,
    ) -> RolloutResult:
        roll = decision.action is Action.APPLY
        body = apply_body(
            workload, self._resource.api_version, self._resource.kind, decision.digest, roll=roll
        )
        if roll:
            body = self._pins.body(body, pin, decision.digest)
        applied = self._applier.apply(key, workload, body, digest=decision.digest, mark=mark)
        self._settle(key, as_of)
        if applied.gone:
            return RolloutResult(key, decision.action, decision.digest, message="workload gone")
        if applied.conflict is not None:
            self._reporter.conflict(workload, applied.conflict)
            # No retry until the workload's spec or the digest changes (the mark).
            raise TerminalError(applied.conflict) from applied.error
        managers = ", ".join(sorted({o.manager for o in applied.took_back}))
        if managers:
            logger.info("rollout: took the annotation back", managers=managers)
        if not roll:
            self._reporter.seen(workload, decision.configmaps)
            logger.info("rollout: baseline recorded", digest=decision.digest)
            return RolloutResult(
                key, Action.RECORD, decision.digest, written=True, message=decision.message
            )
        if pin.pin:
            self._pins.pinned(workload, decision.digest)
            message = pin_message(pin.mapping)
        else:
            message = self._reporter.describe(workload, decision.configmaps)
        if managers:
            message += f" (taken back from {managers}, which wrote it with a plain update)"
        self._reporter.rolled(workload, decision.configmaps, message, pinned=pin.pin)
        logger.info("rollout: annotation written", digest=decision.digest, message=message)
        return RolloutResult(key, Action.APPLY, decision.digest, written=True, message=message)

    def _settle(self, key: str, as_of: float) -> None:
        if self._coalescer is not None:
            self._coalescer.settled(key, as_of)
