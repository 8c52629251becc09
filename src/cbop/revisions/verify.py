"""The ``Pinned`` condition: whether the pods of the workloads reading a bundle read its revisions.

Verified, not assumed (docs/revisions.md): :class:`Verifier` looks at what the caches
show. An opted-in workload whose template reads the bundle's ConfigMap and names no
revision of it is not pinned yet; a pinned ReplicaSet, ControllerRevision or pod that
names a revision that is gone cannot start new pods; a pinned pod whose spec still
reads the plain ConfigMap was not rewritten by the policy (missing when the pod was
created, or its evaluation failed); and without the policy, or on an API server that
does not serve it, no new pod is pinned. The verdict is pure
(:func:`cbop.revisions.model.pinned_verdict`); this module gathers its findings and
emits a Warning Event on each workload a new one names (but for a template not pinned
yet, which the rollout is about to pin or has said why it does not).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from cbop.api import config_map_name_of
from cbop.revisions.caches import History
from cbop.revisions.legacy import PARAMS_NAME, legacy_pinned
from cbop.revisions.model import (
    CONDITION_PINNED,
    Finding,
    PinnedReason,
    PinnedVerdict,
    mapping_of,
    pinned_verdict,
    pod_unpinned,
)
from cbop.revisions.policy import PolicyCheck, Served
from cbop.runtime.seams import EventSink, Lister

__all__ = ["Verifier", "condition_of", "same"]

#: Events on workloads per new verdict, at most.
_WARNED: Final = 3
_API_VERSIONS: Final = {"Pod": "v1"}


class Verifier:
    """Computes the ``Pinned`` condition of bundles from the caches (thread-safe: reads only).

    Args:
        configmaps: the managed-ConfigMap cache (the revisions, 0.2.0's pins).
        history: the caches of what names revisions.
        policy: the pin policy's presence (None: not looked at).
        recorder: where the Events on workloads go (None: none).
        rollout: whether the rollout runs (without it no template is pinned).
    """

    def __init__(
        self,
        *,
        configmaps: Lister,
        history: History,
        policy: PolicyCheck | None,
        recorder: EventSink | None,
        rollout: bool,
    ) -> None:
        self._configmaps = configmaps
        self._history = history
        self._policy = policy
        self._recorder = recorder
        self._rollout = rollout

    def verdict(
        self,
        bundle: Mapping[str, Any],
        plain: str,
        *,
        exists: Collection[str] = (),
        cached: Collection[str] = (),
    ) -> tuple[PinnedVerdict, dict[str, Mapping[str, Any]]]:
        """Return the ``Pinned`` condition of a bundle whose ConfigMap is ``plain``.

        The holders that name a revision in ``exists`` or ``cached`` are counted, not
        read (:meth:`History.naming_other`), and the pods that read ``plain`` by name
        come from an index: the cost grows with the revisions and the readers, not with
        the history.

        Args:
            bundle: the bundle (its namespace is read).
            plain: its ConfigMap's name.
            exists: revisions this reconcile made, which the cache may not show yet.
            cached: revisions the managed-ConfigMap cache holds (the bundle's own).

        Returns:
            The verdict, and by ``Kind/name`` the objects its findings name.
        """
        history = self._history
        if not history.synced():
            return (
                PinnedVerdict(
                    "Unknown",
                    PinnedReason.NOT_VERIFIED,
                    "cbop has not listed the pods, ReplicaSets and ControllerRevisions of "
                    "pinned templates (not yet, or refused: it needs get, list and watch on "
                    "them, docs/deploy.md): nothing is verified, and no revision past keep "
                    "is deleted",
                ),
                {},
            )
        if not self._rollout:
            return (
                PinnedVerdict(
                    "False",
                    PinnedReason.ROLLOUT_OFF,
                    "cbop runs without --rollout: no pod template names the revisions of "
                    f"ConfigMap {plain}, so pods read it by name",
                ),
                {},
            )
        namespace = bundle["metadata"]["namespace"]
        params = self._configmaps.get(namespace, PARAMS_NAME)
        objects: dict[str, Mapping[str, Any]] = {}
        findings: list[Finding] = []
        readers = history.readers(namespace, plain)
        for kind, workload in readers:
            meta = workload["metadata"]
            template = (workload.get("spec") or {}).get("template") or {}
            if plain in mapping_of(workload) or legacy_pinned(params, kind, meta["name"], template):
                continue
            objects[f"{kind}/{meta['name']}"] = _with_kind(kind, workload)
            findings.append(
                Finding(
                    PinnedReason.NOT_PINNED_YET,
                    f"{kind}/{meta['name']}",
                    f"its pod template reads ConfigMap {plain} by name, with no revision",
                )
            )
        for kind, holder in history.naming_other(namespace, plain, {*exists, *cached}):
            meta = holder["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            revision = mapping_of(holder)[plain]
            if revision in exists or self._configmaps.get(namespace, revision) is not None:
                continue
            owner_kind, owner = history.workload_of(kind, holder)
            named_by = f"{owner_kind}/{owner['metadata']['name']}"
            objects[named_by] = _with_kind(owner_kind, owner)
            findings.append(
                Finding(
                    PinnedReason.REVISION_MISSING,
                    named_by,
                    f"{kind} {meta['name']} names revision {revision}, which is gone "
                    "and whose content cbop no longer has: its new pods cannot start",
                )
            )
        for pod in history.unpinned_pods(namespace, plain):
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            revision = mapping_of(pod).get(plain, "")
            owner_kind, owner = history.workload_of("Pod", pod)
            named_by = f"{owner_kind}/{owner['metadata']['name']}"
            for ref in pod_unpinned(pod):
                if ref.name != plain:
                    continue
                objects[named_by] = _with_kind(owner_kind, owner)
                findings.append(
                    Finding(
                        PinnedReason.POD_NOT_PINNED,
                        named_by,
                        f"pod {meta['name']} reads ConfigMap {plain} in {ref.where}, "
                        f"not revision {revision}",
                    )
                )
        state = self._policy.state() if self._policy is not None else None
        verdict = pinned_verdict(
            plain,
            readers=[f"{kind}/{w['metadata']['name']}" for kind, w in readers],
            findings=findings,
            policy=state.problem() if state is not None else None,
            policy_reason=(
                PinnedReason.POLICY_NOT_SERVED
                if state is not None and state.served is Served.NOT_SERVED
                else PinnedReason.POLICY_MISSING
            ),
        )
        return verdict, objects

    def warn(
        self,
        bundle: Mapping[str, Any],
        verdict: PinnedVerdict | None,
        objects: Mapping[str, Mapping[str, Any]],
    ) -> None:
        """Emit a Warning Event on the workloads a new ``False`` verdict names.

        Not for ``NotPinnedYet``: a workload that just opted in is in that state until
        the rollout pins it, moments later, and a pin the rollout refuses has the
        rollout's own Warning (``RevisionsNotPinned``); the condition says it all along.
        """
        if verdict is None or verdict.status == "True" or self._recorder is None:
            return
        if verdict.reason is PinnedReason.NOT_PINNED_YET:
            return
        if same(condition_of(bundle.get("status") or {}), verdict):
            return
        plain = config_map_name_of(bundle) or ""
        named = [f for f in verdict.findings if f.reason is verdict.reason]
        for finding in sorted({f.workload: f for f in named}.values(), key=lambda f: f.workload)[
            :_WARNED
        ]:
            obj = objects.get(finding.workload)
            if obj is not None:
                message = f"ConfigMap {plain} (ConfigBundle {bundle['metadata']['name']}): "
                self._recorder.event(obj, "Warning", verdict.reason.value, message + finding.detail)


def _with_kind(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``obj`` with ``apiVersion`` and ``kind`` (Events need them; listers drop them)."""
    return {"apiVersion": _API_VERSIONS.get(kind, "apps/v1"), "kind": kind, **obj}


def condition_of(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Return the ``Pinned`` condition of a bundle's ``status``, or None."""
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == CONDITION_PINNED:
            return condition
    return None


def same(condition: Mapping[str, Any] | None, verdict: PinnedVerdict | None) -> bool:
    """Whether the status's ``Pinned`` condition already says what ``verdict`` says."""
    if verdict is None:
        return True
    if condition is None:
        return False
    return (
        condition.get("status") == verdict.status
        and condition.get("reason") == verdict.reason.value
        and condition.get("message") == verdict.message
    )
