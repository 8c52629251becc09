"""The bundle's status: conditions and observedGeneration, computed purely.

:func:`ready_condition` maps a decision to the Ready condition it implies;
:func:`compute_status` builds the whole ``status`` a reconcile outcome implies;
:func:`status_equal` tells whether writing it would change anything, so cbop writes
status only when its content changes (case 6: no bookkeeping writes). Conditions follow
metav1.Condition: ``lastTransitionTime`` changes only when a condition's ``status``
changes, and the list is a map keyed by ``type``.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from types import EllipsisType
from typing import Any, Literal

from cbop.api import CONDITION_READY, Reason
from cbop.configbundle.decision import Action, Decision
from cbop.revisions.model import CONDITION_PINNED, PinnedReason, PinnedVerdict

JSON = dict[str, Any]
#: The status fields that tell where a composed content came from (docs/sources.md).
_PROVENANCE = frozenset({"sources", "keySources", "keySourcesOmitted"})
ConditionStatus = Literal["True", "False", "Unknown"]


def ready_condition(
    decision: Decision, *, conflict_recheck: float
) -> tuple[ConditionStatus, Reason, str, float | None]:
    """Return the Ready condition ``decision`` implies: ``(status, reason, message, requeue)``.

    ``requeue`` is ``conflict_recheck`` (seconds) for a name taken by another
    ConfigMap, else None. Invalid: False with the spec error's reason; suspended:
    Unknown; every decision that keeps the ConfigMap: True, ``Synced``, naming its keys
    and content hash.

    Raises:
        RuntimeError: a decision without the error or the desired ConfigMap its action
            needs (a bug).
    """
    desired = decision.desired
    if decision.action is Action.INVALID:
        if decision.error is None:
            raise RuntimeError("an INVALID decision without its error (a bug)")
        return "False", decision.error.reason, decision.error.message, None
    if decision.action is Action.SUSPENDED:
        return "Unknown", Reason.SUSPENDED, decision.message, None
    if decision.action is Action.CONFLICT:
        return "False", Reason.CONFIGMAP_CONFLICT, decision.message, conflict_recheck
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


def format_time(now: datetime.datetime) -> str:
    """RFC 3339 in UTC at second precision, as metav1.Time serialises."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    *,
    type_: str,
    status: ConditionStatus,
    reason: Reason,
    message: str,
    observed_generation: int | None,
    now: datetime.datetime,
) -> list[JSON]:
    """Return ``conditions`` with the condition of ``type_`` set, as meta.SetStatusCondition.

    ``lastTransitionTime`` is kept from the existing condition when ``status`` is
    unchanged, else set to ``now``. Other conditions are kept in order. ``reason`` comes
    from the registry of :class:`cbop.api.Reason` (the ``Pinned`` condition has its own,
    :func:`set_pinned`).
    """
    return _set(conditions, type_, status, reason, message, observed_generation, now)


def set_pinned(
    conditions: Sequence[Mapping[str, Any]],
    verdict: PinnedVerdict,
    *,
    observed_generation: int | None,
    now: datetime.datetime,
) -> list[JSON]:
    """Return ``conditions`` with the ``Pinned`` condition of ``verdict`` (docs/revisions.md)."""
    return _set(
        conditions,
        CONDITION_PINNED,
        verdict.status,
        verdict.reason,
        verdict.message,
        observed_generation,
        now,
    )


def _set(  # noqa: PLR0917 - the private body of the two setters above
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: ConditionStatus,
    reason: Reason | PinnedReason,
    message: str,
    observed_generation: int | None,
    now: datetime.datetime,
) -> list[JSON]:
    out: list[JSON] = []
    found = False
    for cond in conditions:
        if cond.get("type") != type_:
            out.append(dict(cond))
            continue
        found = True
        transition = cond.get("lastTransitionTime")
        if cond.get("status") != status or not transition:
            transition = format_time(now)
        out.append(_condition(type_, status, reason, message, observed_generation, transition))
    if not found:
        out.append(
            _condition(type_, status, reason, message, observed_generation, format_time(now))
        )
    return out


def _condition(  # noqa: PLR0917 - a private constructor of one dict
    type_: str,
    status: ConditionStatus,
    reason: Reason | PinnedReason,
    message: str,
    observed_generation: int | None,
    transition: str,
) -> JSON:
    cond: JSON = {
        "type": type_,
        "status": status,
        "reason": reason.value,
        "message": message,
        "lastTransitionTime": transition,
    }
    if observed_generation is not None:
        cond["observedGeneration"] = observed_generation
    return cond


def compute_status(
    bundle: Mapping[str, Any],
    *,
    ready: ConditionStatus,
    reason: Reason,
    message: str,
    config_map_name: str | None,
    content_hash: str | None,
    key_count: int | None,
    now: datetime.datetime,
    provenance: Mapping[str, Any] | None = None,
    pinned: PinnedVerdict | EllipsisType | None = ...,
) -> JSON:
    """Return the full ``status`` for ``bundle`` after a reconcile.

    Args:
        bundle: the ConfigBundle (its ``metadata.generation`` and current ``status``).
        ready: the ``Ready`` condition's status.
        reason: its reason.
        message: its message (what and why, in words a user can act on).
        config_map_name: the managed ConfigMap's name, or None when unknown.
        content_hash: ``sha256:<hex>`` of the desired content, or None (invalid spec).
        key_count: number of keys in the desired content, or None.
        now: the time used for a condition transition.
        provenance: the fields of a composed content (``sources``, ``keySources``,
            ``keySourcesOmitted``; ``{}`` for a bundle without sources), replacing those
            of the current status; None keeps the current ones (the content was not
            composed this time: a source failed, the bundle is suspended).
        pinned: the ``Pinned`` condition (``spec.revisions``, docs/revisions.md), None
            to remove it, ``...`` to keep it as it is.

    Returns:
        A dict with ``observedGeneration``, ``conditions`` and, when known,
        ``configMapName``, ``contentHash``, ``keyCount``. Fields cbop does not own are
        carried over from the current status.
    """
    current: Mapping[str, Any] = bundle.get("status") or {}
    generation = bundle["metadata"].get("generation")
    status: JSON = {
        k: v
        for k, v in current.items()
        if k not in ("observedGeneration", "conditions", "configMapName", "contentHash", "keyCount")
        and (provenance is None or k not in _PROVENANCE)
    }
    status.update(provenance or {})
    if generation is not None:
        status["observedGeneration"] = generation
    if config_map_name is not None:
        status["configMapName"] = config_map_name
    if content_hash is not None:
        status["contentHash"] = content_hash
    if key_count is not None:
        status["keyCount"] = key_count
    status["conditions"] = set_condition(
        current.get("conditions") or (),
        type_=CONDITION_READY,
        status=ready,
        reason=reason,
        message=message,
        observed_generation=generation,
        now=now,
    )
    if pinned is None:
        status["conditions"] = [
            c for c in status["conditions"] if c.get("type") != CONDITION_PINNED
        ]
    elif not isinstance(pinned, EllipsisType):
        status["conditions"] = set_pinned(
            status["conditions"], pinned, observed_generation=generation, now=now
        )
    return status


def status_equal(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two statuses are the same content (conditions compared as a map by type)."""
    a = dict(a or {})
    b = dict(b or {})
    conds_a = {c.get("type"): c for c in a.pop("conditions", None) or ()}
    conds_b = {c.get("type"): c for c in b.pop("conditions", None) or ()}
    return a == b and conds_a == conds_b


def is_converged(bundle: Mapping[str, Any]) -> bool:
    """Whether ``bundle``'s status already reports on its current spec, and Ready.

    True when ``status.observedGeneration`` equals ``metadata.generation``, the ``Ready``
    condition is ``True`` for that generation, and the bundle is not being deleted. A
    bundle created or changed while no cbop ran, never reconciled, or not Ready (a
    conflict, an invalid spec) is not converged. Used to put listed bundles that need
    work ahead of the converged rest after a restart
    (:class:`cbop.runtime.EnqueueHandler`); it reads the cache only, never the ConfigMap,
    so a ConfigMap that drifted while cbop was down is found by the (lower-priority)
    look every listed bundle still gets.
    """
    meta = bundle.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    generation = meta.get("generation")
    status = bundle.get("status") or {}
    if generation is None or status.get("observedGeneration") != generation:
        return False
    for condition in status.get("conditions") or ():
        if condition.get("type") == CONDITION_READY:
            return bool(
                condition.get("status") == "True"
                and condition.get("observedGeneration") == generation
            )
    return False
