"""The rollout act layer: read the caches, decide, apply the annotation, report.

:class:`RolloutReconciler` reconciles the workloads of one kind by their key: it reads
the workload and the ConfigMaps it references (:mod:`cbop.rollout.references`), asks the pure
:func:`cbop.rollout.decision.decide`, and writes at most one server-side apply under its
own field manager (the baseline label, and, to roll, the pod template annotation
``cbop.dev/config-hash``; with revisions, the revisions the template reads:
:mod:`cbop.revisions.template`). docs/rollout.md says when a workload rolls. What the
decision does not say:

* ConfigMaps changed together give one write: :func:`configmap_mapper` tells a
  :class:`ChangeCoalescer` of each change, and while changes are that fresh an apply is
  deferred (``requeue_after``);
* a 409 on the apply takes the two keys back with force only from plain updates
  (``kubectl rollout undo``, ``kubectl edit``:
  :func:`cbop.rollout.decision.may_take_back`); from a manifest that holds them, a
  Warning Event and a :class:`cbop.runtime.TerminalError`: cbop does not fight a
  GitOps tool;
* until the cache shows its own apply (resourceVersions are ordered, KEP-5504) the
  same digest is not applied again: client-go's expectations, keyed by resourceVersion.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, Protocol

import cachetools
import structlog

from cbop.clock import Clock, RealClock
from cbop.keys import object_key, split_key
from cbop.kube import ApiError, Resource
from cbop.revisions.template import TemplatePin, TemplatePins, add_mapping, pin_message
from cbop.rollout.decision import (
    ANNOTATION_CONFIG_HASH,
    FIELD_MANAGER,
    Action,
    Decision,
    FieldOwner,
    ManagedConfigMap,
    apply_body,
    baseline_value,
    config_digest,
    decide,
    may_take_back,
    other_owners,
)
from cbop.rollout.index import CONFIGMAP_INDEX, configmap_index_value
from cbop.rollout.references import read_references
from cbop.runtime.ownwrites import OwnWrites
from cbop.runtime.reconcile import TerminalError
from cbop.runtime.seams import Client, EventSink, Lister

__all__ = [
    "DEFAULT_COALESCE_MAX_DELAY",
    "DEFAULT_COALESCE_WINDOW",
    "ChangeCoalescer",
    "RolloutObserver",
    "RolloutReconciler",
    "RolloutResult",
    "configmap_mapper",
]

log = structlog.get_logger("cbop.rollout")

#: Seconds after the last observed ConfigMap change before a workload is written.
DEFAULT_COALESCE_WINDOW = 1.0
#: Seconds after the first observed change after which it is written regardless.
DEFAULT_COALESCE_MAX_DELAY = 10.0
#: Workloads whose last seen ConfigMap content hashes are remembered (to name the
#: bundles that changed in the Event).
_KNOWN_ENTRIES = 100_000


class RolloutObserver(Protocol):
    """Metrics hook (provided by :class:`cbop.metrics.rollout.RolloutMetrics`)."""

    def rolled_out(self, kind: str) -> None:
        """Count one annotation write that rolls a workload of ``kind`` (e.g. Deployment)."""
        ...


#: The actions that write (the baseline alone, or a rollout).
_WRITES: Final = frozenset({Action.RECORD, Action.APPLY})


def _changed_part(changed: Sequence[ManagedConfigMap]) -> str:
    bundles = ", ".join(sorted({cm.bundle for cm in changed}))
    names = ", ".join(sorted(cm.name for cm in changed))
    return f"ConfigBundle(s) {bundles} changed (ConfigMaps {names})"


class _NoObserver:
    def rolled_out(self, kind: str) -> None:
        pass


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


class ChangeCoalescer:
    """Holds back writes while the ConfigMaps a workload reads are still changing.

    A trailing-edge debounce with a bound: after :meth:`observed` is called for a key,
    :meth:`delay` is positive until ``window`` seconds have passed since the latest
    observation, or ``max_delay`` seconds since the first one, whichever comes first.
    :meth:`settled` forgets the observations a reconcile has acted on. Thread-safe.

    Args:
        window: seconds of quiet before writing.
        max_delay: seconds after the first change after which the write goes ahead.
        clock: the time source (tests: ``FakeClock``).
    """

    def __init__(
        self,
        *,
        window: float = DEFAULT_COALESCE_WINDOW,
        max_delay: float = DEFAULT_COALESCE_MAX_DELAY,
        clock: Clock | None = None,
    ) -> None:
        self._window = window
        self._max_delay = max_delay
        self._clock: Clock = clock or RealClock()
        self._lock = threading.Lock()
        # key -> (first, latest) observation time, on the clock's scale.
        self._pending: dict[str, tuple[float, float]] = {}

    def observed(self, key: str) -> None:
        """Note that a ConfigMap the workload ``key`` reads changed just now."""
        now = self._clock.now()
        with self._lock:
            first, _ = self._pending.get(key, (now, now))
            self._pending[key] = (first, now)

    def delay(self, key: str) -> float:
        """Return seconds to hold back a write for ``key``; 0.0 when it may go now."""
        now = self._clock.now()
        with self._lock:
            pending = self._pending.get(key)
        if pending is None:
            return 0.0
        first, latest = pending
        ready_at = min(latest + self._window, first + self._max_delay)
        return max(0.0, ready_at - now)

    def now(self) -> float:
        """Return the coalescer's clock time (pass it to :meth:`settled`)."""
        return self._clock.now()

    def settled(self, key: str, as_of: float) -> None:
        """Forget ``key``'s observations, unless one came after ``as_of``."""
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None and pending[1] <= as_of:
                del self._pending[key]

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)


def configmap_mapper(
    workloads: Lister, coalescer: ChangeCoalescer | None = None
) -> Callable[[Mapping[str, Any]], list[str]]:
    """Return the map function of the ConfigMap watch: ConfigMap -> workload keys.

    Args:
        workloads: the workload informer's lister, with the
            :data:`cbop.rollout.index.CONFIGMAP_INDEX` index.
        coalescer: told about each change for every key returned (None: no coalescing).

    Returns:
        ``fn(configmap) -> ["namespace/name", ...]``, the workloads (of the lister's
        kind) whose pod template references the ConfigMap. Managed or not is not judged
        here: a ConfigMap that stops being managed must wake its readers too.
    """

    def map_configmap(configmap: Mapping[str, Any]) -> list[str]:
        meta = configmap.get("metadata") or {}
        value = configmap_index_value(str(meta.get("namespace") or ""), str(meta.get("name")))
        keys = sorted(object_key(w) for w in workloads.by_index(CONFIGMAP_INDEX, value))
        if coalescer is not None:
            for key in keys:
                coalescer.observed(key)
        return keys

    return map_configmap


class RolloutReconciler:
    """Reconciles the ``cbop.dev/config-hash`` annotation of one kind of workload.

    Safe to call from many threads (never for the same key at once: the workqueue
    guarantees it).

    Args:
        resource: the workload kind (``DEPLOYMENTS``, ``STATEFULSETS`` or ``DAEMONSETS``).
        client: the API client (the apply).
        workloads: lister over the opted-in workloads of ``resource``.
        configmaps: lister over the managed-ConfigMap informer cache.
        recorder: where Events go (None: none).
        observer: metrics hooks (``cbop_rollouts_total``).
        coalescer: the coalescer the ConfigMap map function feeds (None: write at once).
        field_manager: the server-side apply field manager.
        force: always send ``force=true`` (take the keys from any owner). False by
            default: the apply goes without force, and only a conflict with owners
            that wrote the keys with a plain update is answered with force, so cbop
            never fights a tool that applies the same field: that conflict is reported
            instead (docs/rollout.md).
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
        self._recorder = recorder
        self._observer: RolloutObserver = observer or _NoObserver()
        self._coalescer = coalescer
        self._field_manager = field_manager
        self._force = force
        self._controller_name = controller_name or f"rollout-{resource.kind.lower()}"
        self._lock = threading.Lock()
        # Workload UID -> ConfigMap name -> content hash last seen in sync or written,
        # to name the bundles whose content changed. Lost on restart: then every
        # referenced bundle is named.
        self._known: cachetools.LRUCache[str, dict[str, str]] = cachetools.LRUCache(_KNOWN_ENTRIES)
        # key -> (uid, generation, digest) of an apply refused with a conflict, or of a
        # paused Deployment already reported: not tried (or reported) again until one
        # of them changes.
        self._conflicts: dict[str, tuple[str, int, str]] = {}
        self._paused: dict[str, tuple[str, int, str]] = {}
        # key -> mark of a pin not sent again (reported once).
        self._refused: dict[str, tuple[str, int, str]] = {}
        self._pins = TemplatePins(configmaps, resource.kind)
        # key -> (uid, digest, resourceVersion) of this reconciler's last apply, until
        # the cache holds that version or a newer one (see the module docstring).
        self._applied: OwnWrites[str] = OwnWrites(maxsize=_KNOWN_ENTRIES)

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
            self._forget(key)
            return RolloutResult(key, None, message="not in the cache (gone or not opted in)")
        configmaps, absent = read_references(self._client, self._configmaps, namespace, workload)
        decision = decide(workload, configmaps, absent)
        pin = self._plan_pin(workload, decision)
        if pin.pin:
            # Nothing changed, but the template reads revisioned ConfigMaps by their
            # plain names: roll it once, at the same content, with the mapping.
            paused = bool((workload.get("spec") or {}).get("paused"))
            decision = replace(
                decision,
                action=Action.SKIP if paused else Action.APPLY,
                message="the Deployment is paused; cbop pins its template once it is resumed"
                if paused
                else "",
            )
        # The controller binds controller, namespace, name and reconcile_id to every
        # line of the reconcile (cbop.runtime.reconcile_context).
        logger = log
        mark = self._mark(workload, decision.digest)
        if decision.action is Action.NONE or (pin.refused and decision.action is Action.RECORD):
            self._report_refused(key, workload, pin, mark)
        if decision.action is Action.NONE:
            self._settle(key, as_of)
            if decision.digest:
                self._remember(workload, decision.configmaps)
            logger.debug("rollout: nothing to do", reason=decision.message or "in sync")
            return RolloutResult(key, Action.NONE, decision.digest, message=decision.message)
        if decision.action in _WRITES and self._own_write_pending(key, workload, mark):
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
            with self._lock:
                reported = self._paused.get(key) == mark
                self._paused[key] = mark
            if not reported:
                self._event(workload, "Normal", "RolloutPaused", decision.message)
                logger.info("rollout: skipped", reason=decision.message)
            return RolloutResult(key, Action.SKIP, decision.digest, message=decision.message)
        with self._lock:
            if self._conflicts.get(key) == mark:
                self._settle(key, as_of)
                return RolloutResult(
                    key, decision.action, decision.digest, message="conflict reported; not retried"
                )
        return self._apply(key, workload, decision, pin, as_of=as_of, mark=mark, logger=logger)

    def _plan_pin(self, workload: Mapping[str, Any], decision: Decision) -> TemplatePin:
        """Ask the revisions what this reconcile writes besides the annotation.

        A pin at unchanged content is asked only when nothing else is to be written.
        """
        if not decision.digest:
            return TemplatePin({})
        pin = self._pins.plan(
            workload,
            decision.configmaps,
            baseline=decision.baseline,
            digest_baseline=baseline_value(decision.digest),
            template_baseline=baseline_value(decision.current) if decision.current else "",
        )
        return pin if decision.action in (Action.NONE, Action.RECORD) else TemplatePin(pin.mapping)

    def _report_refused(
        self, key: str, workload: Mapping[str, Any], pin: TemplatePin, mark: tuple[str, int, str]
    ) -> None:
        """Warn once per workload generation that a pin was not sent again (a loop)."""
        if pin.refused is None:
            return
        with self._lock:
            reported = self._refused.get(key) == mark
            self._refused[key] = mark
        if not reported:
            self._event(workload, "Warning", "RevisionsNotPinned", pin.refused)
            log.warning("rollout: pin not sent again", reason=pin.refused)

    def _apply(
        self,
        key: str,
        workload: Mapping[str, Any],
        decision: Decision,
        pin: TemplatePin,
        *,
        as_of: float,
        mark: tuple[str, int, str],
        logger: Any,
    ) -> RolloutResult:
        meta = workload["metadata"]
        roll = decision.action is Action.APPLY
        body = apply_body(
            workload, self._resource.api_version, self._resource.kind, decision.digest, roll=roll
        )
        if roll:
            body = add_mapping(body, pin.mapping, baseline_value(decision.digest))
        took_back: tuple[FieldOwner, ...] = ()
        try:
            try:
                applied = self._patch(meta, body, force=self._force)
            except ApiError as err:
                if not err.is_conflict or self._force:
                    raise
                took_back = self._may_take_back(meta, err)
                applied = self._patch(meta, body, force=True)
        except ApiError as err:
            if err.is_not_found:
                self._settle(key, as_of)
                return RolloutResult(key, decision.action, decision.digest, message="workload gone")
            if err.is_conflict:
                self._settle(key, as_of)
                with self._lock:
                    self._conflicts[key] = mark
                message = (
                    f"cannot set {ANNOTATION_CONFIG_HASH}: {err.message}; cbop does not take it "
                    "from a manager that applies it (docs/rollout.md)"
                )
                self._event(workload, "Warning", "RolloutConflict", message)
                # No retry until the workload's spec or the digest changes (the mark).
                raise TerminalError(message) from err
            raise
        self._settle(key, as_of)
        self._applied.record(key, workload, applied, decision.digest)
        if took_back:
            managers = ", ".join(sorted({o.manager for o in took_back}))
            logger.info("rollout: took the annotation back", managers=managers)
        if not roll:
            self._remember(workload, decision.configmaps)
            logger.info("rollout: baseline recorded", digest=decision.digest)
            return RolloutResult(
                key, Action.RECORD, decision.digest, written=True, message=decision.message
            )
        if pin.pin:
            self._pins.pinned(workload, baseline_value(decision.digest))
            message = pin_message(pin.mapping)
        else:
            message = self._describe(workload, decision.configmaps)
        if took_back:
            managers = ", ".join(sorted({o.manager for o in took_back}))
            message += f" (taken back from {managers}, which wrote it with a plain update)"
        self._remember(workload, decision.configmaps)
        self._observer.rolled_out(self._resource.kind)
        self._event(workload, "Normal", "RevisionsPinned" if pin.pin else "ConfigChanged", message)
        logger.info("rollout: annotation written", digest=decision.digest, message=message)
        return RolloutResult(key, Action.APPLY, decision.digest, written=True, message=message)

    def _patch(self, meta: Mapping[str, Any], body: Any, *, force: bool) -> dict[str, Any]:
        return self._client.patch(
            self._resource,
            meta["namespace"],
            meta["name"],
            body,
            patch_type="apply",
            field_manager=self._field_manager,
            force=force,
        )

    def _may_take_back(self, meta: Mapping[str, Any], conflict: ApiError) -> tuple[FieldOwner, ...]:
        """After a 409 on the apply: return the owners to take the keys from, or re-raise.

        Reads the workload afresh (the caches drop ``managedFields``) and asks
        :func:`cbop.rollout.decision.may_take_back`; re-raises ``conflict`` when a
        manager that applies the keys owns them.

        Raises:
            ApiError: ``conflict`` (not to be taken), or the GET's own error.
        """
        fresh = self._client.get(self._resource, meta["namespace"], meta["name"])
        if not may_take_back(fresh, self._field_manager):
            raise conflict
        return other_owners(fresh, self._field_manager)

    # -- bookkeeping -------------------------------------------------------------------

    @staticmethod
    def _mark(workload: Mapping[str, Any], digest: str) -> tuple[str, int, str]:
        meta = workload.get("metadata") or {}
        return (str(meta.get("uid", "")), int(meta.get("generation") or 0), digest)

    def _own_write_pending(
        self, key: str, workload: Mapping[str, Any], mark: tuple[str, int, str]
    ) -> bool:
        """Return whether ``mark``'s digest was applied and the cache does not show it yet.

        True only when this reconciler's last apply for ``key`` went to the same
        workload with the same digest and the cache is behind that apply
        (:class:`cbop.runtime.OwnWrites`).
        """
        return self._applied.pending(key, workload) == mark[2]

    def _settle(self, key: str, as_of: float) -> None:
        if self._coalescer is not None:
            self._coalescer.settled(key, as_of)

    def _forget(self, key: str) -> None:
        with self._lock:
            self._conflicts.pop(key, None)
            self._paused.pop(key, None)
            self._refused.pop(key, None)
        self._applied.forget(key)
        self._settle(key, float("inf"))

    def _remember(self, workload: Mapping[str, Any], managed: Sequence[ManagedConfigMap]) -> None:
        uid = str(workload["metadata"].get("uid", ""))
        with self._lock:
            self._known[uid] = {cm.name: cm.content_hash for cm in managed}

    def _describe(self, workload: Mapping[str, Any], managed: Sequence[ManagedConfigMap]) -> str:
        """Return the Event message of a rollout: what changed since the last look, only.

        Against the content hashes last seen for the workload (in memory): bundles
        whose ConfigMap content changed, ConfigMaps that became managed (a new bundle,
        a release taken back) and ConfigMaps no longer managed (a bundle deleted or
        released). Nothing seen (after a restart of cbop): every referenced bundle.
        """
        with self._lock:
            known = self._known.get(str(workload["metadata"].get("uid", "")))
        current = {cm.name: cm for cm in managed}
        if known is None:
            parts = [_changed_part(managed)]
        else:
            changed = [
                cm for cm in managed if cm.name in known and known[cm.name] != cm.content_hash
            ]
            added = [cm for cm in managed if cm.name not in known]
            removed = sorted(name for name in known if name not in current)
            parts = []
            if changed:
                parts.append(_changed_part(changed))
            if added:
                names = ", ".join(cm.name for cm in added)
                bundles = ", ".join(sorted({cm.bundle for cm in added}))
                parts.append(f"ConfigMap(s) {names} now managed by ConfigBundle(s) {bundles}")
            if removed:
                parts.append(f"ConfigMap(s) {', '.join(removed)} no longer managed by cbop")
            if not parts:  # seen in sync, then a baseline written elsewhere: name them all
                parts = [_changed_part(managed)]
        digest = config_digest(managed)
        return f"{'; '.join(parts)}; {ANNOTATION_CONFIG_HASH} set to {digest}"

    def _event(
        self,
        workload: Mapping[str, Any],
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        if self._recorder is None:
            return
        # Listed objects carry no kind/apiVersion; the Event's involvedObject needs them.
        obj = {
            "apiVersion": self._resource.api_version,
            "kind": self._resource.kind,
            "metadata": workload["metadata"],
        }
        self._recorder.event(obj, type_, reason, message)
