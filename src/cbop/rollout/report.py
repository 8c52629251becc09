"""What a rollout reports: the Events on workloads and the rollouts counted.

This module owns :class:`RolloutReporter`, the part of the rollout reconciler that says
what it did and did not do: a ``ConfigChanged`` (or ``RevisionsPinned``) Event per roll,
naming only what changed since it last looked at the workload, and the count of
:class:`RolloutObserver`; a ``RolloutPaused`` or ``RevisionsNotPinned`` Event once per
workload generation and digest, not on every reconcile; a ``RolloutConflict`` Warning.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol

import cachetools

from cbop.kube import Resource
from cbop.rollout.decision import ANNOTATION_CONFIG_HASH, ManagedConfigMap, config_digest
from cbop.runtime.seams import EventSink

__all__ = ["RolloutObserver", "RolloutReporter"]

#: Workloads whose last seen ConfigMap content hashes are remembered (to name the
#: bundles that changed in the Event).
_KNOWN_ENTRIES: Final = 100_000


class RolloutObserver(Protocol):
    """Metrics hook (provided by :class:`cbop.metrics.rollout.RolloutMetrics`)."""

    def rolled_out(self, kind: str) -> None:
        """Count one annotation write that rolls a workload of ``kind`` (e.g. Deployment)."""
        ...


class _NoObserver:
    def rolled_out(self, kind: str) -> None:
        pass


def _changed_part(changed: Sequence[ManagedConfigMap]) -> str:
    bundles = ", ".join(sorted({cm.bundle for cm in changed}))
    names = ", ".join(sorted(cm.name for cm in changed))
    return f"ConfigBundle(s) {bundles} changed (ConfigMaps {names})"


class RolloutReporter:
    """Events and counts of the rollouts of one workload kind (thread-safe).

    Args:
        resource: the workload kind (the Events' ``involvedObject`` and the count's label).
        recorder: where Events go (None: none).
        observer: metrics hooks (``cbop_rollouts_total``; None: none).
    """

    def __init__(
        self,
        *,
        resource: Resource,
        recorder: EventSink | None = None,
        observer: RolloutObserver | None = None,
    ) -> None:
        self._resource = resource
        self._recorder = recorder
        self._observer: RolloutObserver = observer or _NoObserver()
        self._lock = threading.Lock()
        # Workload UID -> ConfigMap name -> content hash last seen in sync or written,
        # to name the bundles whose content changed. Lost on restart: then every
        # referenced bundle is named.
        self._known: cachetools.LRUCache[str, dict[str, str]] = cachetools.LRUCache(_KNOWN_ENTRIES)
        # key -> mark of a paused Deployment, or of a pin not sent again, already
        # reported: not reported again until the mark changes.
        self._paused: dict[str, Hashable] = {}
        self._refused: dict[str, Hashable] = {}

    def seen(self, workload: Mapping[str, Any], managed: Sequence[ManagedConfigMap]) -> None:
        """Note the content ``workload`` reads now (in sync, or written)."""
        uid = str(workload["metadata"].get("uid", ""))
        with self._lock:
            self._known[uid] = {cm.name: cm.content_hash for cm in managed}

    def describe(self, workload: Mapping[str, Any], managed: Sequence[ManagedConfigMap]) -> str:
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

    def rolled(
        self,
        workload: Mapping[str, Any],
        managed: Sequence[ManagedConfigMap],
        message: str,
        *,
        pinned: bool = False,
    ) -> None:
        """Report a roll: note ``managed`` as seen, count it, and a Normal Event.

        The Event's reason is ``RevisionsPinned`` for a roll at unchanged content that
        pins the template (``pinned``), else ``ConfigChanged``.
        """
        self.seen(workload, managed)
        self._observer.rolled_out(self._resource.kind)
        self._event(workload, "Normal", "RevisionsPinned" if pinned else "ConfigChanged", message)

    def paused(self, key: str, workload: Mapping[str, Any], mark: Hashable, message: str) -> bool:
        """Report a paused Deployment once per ``mark``; return whether it was reported now."""
        with self._lock:
            reported = self._paused.get(key) == mark
            self._paused[key] = mark
        if not reported:
            self._event(workload, "Normal", "RolloutPaused", message)
        return not reported

    def refused(self, key: str, workload: Mapping[str, Any], message: str, mark: Hashable) -> bool:
        """Warn once per ``mark`` that a pin was not sent again (a loop); return whether now."""
        with self._lock:
            reported = self._refused.get(key) == mark
            self._refused[key] = mark
        if not reported:
            self._event(workload, "Warning", "RevisionsNotPinned", message)
        return not reported

    def conflict(self, workload: Mapping[str, Any], message: str) -> None:
        """Warn that another manager applies the keys cbop would write (``RolloutConflict``)."""
        self._event(workload, "Warning", "RolloutConflict", message)

    def forget(self, key: str) -> None:
        """Drop the report-once marks of ``key`` (the workload left the cache)."""
        with self._lock:
            self._paused.pop(key, None)
            self._refused.pop(key, None)

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
