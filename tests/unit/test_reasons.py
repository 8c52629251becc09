"""Every reason the ConfigBundle controller can set is classified, and a ClusterConfigBundle
reads each one as that classification says: ready, failed (listed with the stamp's reason
and message) or pending.

The set of reasons is derived from the code: :class:`cbop.api.Reason` is the registry, and
the status code of the ConfigBundle controller takes its reason as a ``Reason`` (mypy
strict holds every caller to it; the first test checks the annotations themselves). A
reason added to the registry later fails these tests until it is classified.
"""

from __future__ import annotations

import datetime
import typing
from typing import Any

import pytest

from cbop.api import (
    FAILING_REASONS,
    READINESS,
    TRANSIENT_REASONS,
    ClusterReason,
    Readiness,
    Reason,
    SpecError,
    readiness_of,
)
from cbop.clusterbundle.decision import Failure, decide, desired_stamp, status_of
from cbop.configbundle.interfaces import RejectedError, Result
from cbop.configbundle.report import StatusReporter
from cbop.configbundle.status import compute_status, set_condition

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
#: The Ready status the ConfigBundle controller writes with each kind of reason
#: (Suspended is written as Unknown; the test below covers False for it too).
STATUS_OF = {Readiness.READY: "True", Readiness.FAILING: "False", Readiness.TRANSIENT: "False"}


def test_every_reason_in_the_registry_is_classified_exactly_once() -> None:
    assert set(READINESS) == set(Reason), (
        f"classify {sorted(set(Reason) - set(READINESS))} in cbop/api/reasons.py"
    )
    assert not FAILING_REASONS & TRANSIENT_REASONS
    ready = {r for r, k in READINESS.items() if k is Readiness.READY}
    assert ready == {Reason.SYNCED}
    assert FAILING_REASONS | TRANSIENT_REASONS | ready == set(Reason)


@pytest.mark.parametrize(
    ("function", "parameter"),
    [
        (compute_status, "reason"),
        (set_condition, "reason"),
        (StatusReporter.write_status, "reason"),
        (RejectedError.__init__, "condition_reason"),
    ],
    ids=["compute_status", "set_condition", "write_status", "rejected"],
)
def test_the_status_code_takes_its_reason_from_the_registry(function: Any, parameter: str) -> None:
    """Every Ready condition the ConfigBundle controller writes goes through these, and
    each takes a Reason, not a string: the registry is the whole set."""
    assert typing.get_type_hints(function)[parameter] is Reason


def test_results_and_spec_errors_carry_registry_reasons() -> None:
    assert typing.get_type_hints(Result)["reason"] == Reason | None
    assert typing.get_type_hints(SpecError.__init__)["reason"] is Reason


def _world(reason: Reason, status: str) -> tuple[dict[str, Any], dict[str, Any]]:
    owner = {
        "apiVersion": "cbop.dev/v1beta1",
        "kind": "ClusterConfigBundle",
        "metadata": {"name": "ca", "uid": "u", "generation": 1, "creationTimestamp": "t"},
        "spec": {"namespaceSelector": {}, "template": {"data": {"a": "1"}}},
    }
    stamp = desired_stamp(owner, "team-a")
    stamp["metadata"].update(generation=4, uid="s", resourceVersion="9")
    stamp["status"] = {
        "observedGeneration": 4,
        "conditions": [
            {
                "type": "Ready",
                "status": status,
                "observedGeneration": 4,
                "reason": reason.value,
                "message": f"the stamp says {reason.value}",
            }
        ],
    }
    return owner, stamp


@pytest.mark.parametrize("reason", list(Reason), ids=[r.value for r in Reason])
def test_a_cluster_bundle_reads_every_reason_as_classified(reason: Reason) -> None:
    kind = READINESS[reason]
    statuses = [STATUS_OF[kind]] + (["Unknown"] if kind is not Readiness.READY else [])
    for ready in statuses:
        owner, stamp = _world(reason, ready)
        found: dict[str, Any] = {"team-a": stamp}
        plan = decide(
            owner,
            namespaces=[{"metadata": {"name": "team-a"}}],
            bundle_at=found.get,
            stamps=[stamp],
        )
        assert plan.actions == ()
        status = status_of(owner, plan, now=NOW)
        (cond,) = status["conditions"]
        if kind is Readiness.READY:
            assert plan.ready == ("team-a",)
            assert (cond["status"], cond["reason"]) == ("True", "AllNamespacesReady")
        elif kind is Readiness.FAILING:
            assert plan.failures == (
                Failure("team-a", reason.value, f"the stamp says {reason.value}"),
            )
            assert status["namespaces"] == {"selected": 1, "ready": 0, "failed": 1}
            assert status["failedNamespaces"] == [
                {
                    "namespace": "team-a",
                    "reason": reason.value,
                    "message": f"the stamp says {reason.value}",
                }
            ]
            assert (cond["status"], cond["reason"]) == ("False", "NamespacesFailing")
            assert f"team-a ({reason.value})" in cond["message"]
        else:
            assert (plan.ready, plan.failures) == ((), ())
            assert (cond["status"], cond["reason"]) == ("False", "NamespacesPending")


def test_the_source_reasons_quota_and_admission_refusals_are_failures() -> None:
    """The reasons users meet: a source revoked or missing, a spec the API server rejects,
    a name taken, content too large; a quota or admission policy refusing a ConfigMap
    write (ReconcileError) or the stamp itself (Refused)."""
    assert {
        Reason.SOURCE_NOT_FOUND,
        Reason.SOURCE_NOT_SHARED,
        Reason.INVALID_SOURCE,
        Reason.INVALID_SPEC,
        Reason.CONFIGMAP_CONFLICT,
        Reason.CONFIGMAP_TOO_LARGE,
        Reason.RECONCILE_ERROR,
        Reason.SUSPENDED,
    } <= FAILING_REASONS
    owner, _ = _world(Reason.SYNCED, "True")
    plan = decide(owner, namespaces=[{"metadata": {"name": "team-a"}}], bundle_at=lambda ns: None,
                  stamps=[])  # fmt: skip
    refused = status_of(owner, plan, [Failure("team-a", ClusterReason.REFUSED, "quota")], now=NOW)
    assert refused["conditions"][0]["reason"] == "NamespacesFailing"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("Synced", Readiness.READY), ("SourceNotShared", Readiness.FAILING), ("Deleting",
     Readiness.TRANSIENT), ("SomethingNew", None), ("", None)],
)  # fmt: skip
def test_readiness_of_a_condition_reason(text: str, expected: Readiness | None) -> None:
    assert readiness_of(text) is expected
