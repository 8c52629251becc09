"""The revisions a rollout writes with its apply: the pin, planned per decision.

This module owns :class:`PinPlanner`, the part of the rollout reconciler that asks the
revisions' side of a workload (:class:`cbop.revisions.template.TemplatePins`) what the
apply writes besides the annotation: the mapping of the revisions the template reads,
and whether a workload whose content did not change is rolled once all the same so
that its pods read revisions (a pin). A pin is asked only when nothing else is to be
written; a paused Deployment is pinned once it is resumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cbop.revisions.template import TemplatePin, TemplatePins, add_mapping
from cbop.rollout.decision import Action, Decision, baseline_value
from cbop.runtime.seams import Lister

__all__ = ["PinPlanner"]

#: The message of a pin held back by ``spec.paused``.
_PAUSED = "the Deployment is paused; cbop pins its template once it is resumed"


class PinPlanner:
    """Plans the revisions of the rollouts of one workload kind (thread-safe).

    Args:
        configmaps: the managed-ConfigMap cache (revisions, and 0.2.0's pins).
        kind: the workload kind (``Deployment``, ``StatefulSet``, ``DaemonSet``).
    """

    def __init__(self, configmaps: Lister, kind: str) -> None:
        self._pins = TemplatePins(configmaps, kind)

    def plan(self, workload: Mapping[str, Any], decision: Decision) -> tuple[TemplatePin, Decision]:
        """Return what the revisions ask of this reconcile, and the decision it leaves.

        The decision is ``decision`` itself, but for a pin (nothing else to write, the
        template reads revisioned ConfigMaps by their plain names): then it is
        ``APPLY`` at the same digest, or ``SKIP`` for a paused Deployment. A decision
        that writes anyway carries the mapping, never a pin; one without a managed
        reference asks nothing.
        """
        if not decision.digest:
            return TemplatePin({}), decision
        pin = self._pins.plan(
            workload,
            decision.configmaps,
            baseline=decision.baseline,
            digest_baseline=baseline_value(decision.digest),
            template_baseline=baseline_value(decision.current) if decision.current else "",
        )
        if decision.action not in (Action.NONE, Action.RECORD):
            return TemplatePin(pin.mapping), decision
        if not pin.pin:
            return pin, decision
        # Nothing changed, but the template reads revisioned ConfigMaps by their plain
        # names: roll it once, at the same content, with the mapping.
        paused = bool((workload.get("spec") or {}).get("paused"))
        action = Action.SKIP if paused else Action.APPLY
        return pin, replace(decision, action=action, message=_PAUSED if paused else "")

    @staticmethod
    def body(body: dict[str, Any], pin: TemplatePin, digest: str) -> dict[str, Any]:
        """Return the rolling apply ``body`` with ``pin``'s mapping added (not changed in place)."""
        return add_mapping(body, pin.mapping, baseline_value(digest))

    def pinned(self, workload: Mapping[str, Any], digest: str) -> None:
        """Note that a pin of ``workload`` (as cached before it) at ``digest`` was sent."""
        self._pins.pinned(workload, baseline_value(digest))
