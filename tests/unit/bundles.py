"""Builders of ConfigBundle and ConfigMap dicts for unit tests of pure decisions."""

from __future__ import annotations

import copy
from typing import Any

from cbop.api import parse_spec
from cbop.configbundle.decision import Decision, decide
from cbop.configbundle.desired import render

UID = "11111111-2222-3333-4444-555555555555"


def bundle(
    spec: dict[str, Any] | None = None,
    *,
    name: str = "app",
    namespace: str = "demo",
    generation: int = 1,
    status: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": UID,
        "generation": generation,
        "resourceVersion": "100",
    }
    if labels:
        meta["labels"] = labels
    if finalizers:
        meta["finalizers"] = finalizers
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj: dict[str, Any] = {
        "apiVersion": "cbop.dev/v1alpha1",
        "kind": "ConfigBundle",
        "metadata": meta,
        "spec": spec if spec is not None else {"data": {"a": "1"}},
    }
    if status is not None:
        obj["status"] = status
    return obj


def synced_status(generation: int = 1) -> dict[str, Any]:
    return {
        "observedGeneration": generation,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Synced",
                "message": "ok",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }


def written(b: dict[str, Any], current: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ConfigMap as it stands after cbop wrote it for bundle ``b``."""
    d = decide(b, parse_spec(b), current)
    assert d.body is not None
    cm = copy.deepcopy(d.body)
    cm["metadata"].setdefault("uid", "cm-uid")
    cm["metadata"]["resourceVersion"] = "7"
    return cm


def decide_for(b: dict[str, Any], current: dict[str, Any] | None) -> Decision:
    try:
        spec: Any = parse_spec(b)
    except Exception as err:  # noqa: BLE001 - SpecError passes through to decide
        spec = err
    return decide(b, spec, current)


__all__ = ["UID", "bundle", "decide_for", "render", "synced_status", "written"]
