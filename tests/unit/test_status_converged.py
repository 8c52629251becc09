"""Which listed bundles count as converged (their status reports on their spec, Ready)."""

from __future__ import annotations

from typing import Any

import pytest

from cbop.configbundle.status import is_converged


def _bundle(
    generation: int | None = 3,
    observed: int | None = 3,
    ready: str | None = "True",
    condition_generation: int | None = 3,
    **meta: Any,
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if observed is not None:
        status["observedGeneration"] = observed
    if ready is not None:
        status["conditions"] = [
            {"type": "Other", "status": "True", "observedGeneration": condition_generation},
            {"type": "Ready", "status": ready, "observedGeneration": condition_generation},
        ]
    metadata: dict[str, Any] = {"name": "b", "namespace": "demo", **meta}
    if generation is not None:
        metadata["generation"] = generation
    return {"metadata": metadata, "spec": {}, "status": status}


def test_a_ready_bundle_of_its_current_generation_is_converged() -> None:
    assert is_converged(_bundle())


@pytest.mark.parametrize(
    "bundle",
    [
        _bundle(observed=None, ready=None),  # never reconciled
        {"metadata": {"name": "b", "generation": 1}},  # no status at all
        _bundle(generation=4),  # changed while no cbop ran
        _bundle(ready="False"),  # a conflict, an invalid spec
        _bundle(ready="Unknown"),
        _bundle(condition_generation=2),  # the condition is of an older spec
        _bundle(ready=None),  # observedGeneration without a Ready condition
        _bundle(generation=None),
        _bundle(deletionTimestamp="2026-12-02T00:00:00Z"),
    ],
    ids=[
        "new",
        "no-status",
        "changed",
        "not-ready",
        "unknown",
        "old-condition",
        "no-ready",
        "no-generation",
        "deleting",
    ],
)
def test_anything_else_is_not(bundle: dict[str, Any]) -> None:
    assert not is_converged(bundle)
