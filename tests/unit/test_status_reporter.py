"""The status reporter alone: status written only when it changes, Events, counts, failures.

:class:`cbop.configbundle.report.StatusReporter` against the fake API server, a
FakeRecorder and a counting observer; and :func:`cbop.configbundle.status.ready_condition`,
the Ready condition a decision implies. No reconciler.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from cbop.api import Reason, parse_spec
from cbop.configbundle.decision import Action
from cbop.configbundle.interfaces import RejectedError, Reporting
from cbop.configbundle.report import StatusReporter
from cbop.configbundle.status import ready_condition
from cbop.kube import CONFIGBUNDLES, ApiError, ConnectionFailed
from cbop_testing.fakekube import FakeKube, FakeRecorder, errors, fail
from cbop_testing.objects import bundle, decide_for, synced_status, written

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


class Observer:
    def __init__(self) -> None:
        self.writes: list[str] = []
        self.drifts = 0

    def configmap_write(self, operation: str) -> None:
        self.writes.append(operation)

    def secret_write(self, operation: str) -> None:
        self.writes.append(f"secret {operation}")

    def drift_corrected(self) -> None:
        self.drifts += 1


class Setup:
    def __init__(self, b: dict[str, Any] | None = None, *, dry_run: bool = False) -> None:
        self.kube = FakeKube()
        self.bundle = self.kube.tracker.add(CONFIGBUNDLES, b or bundle())
        self.recorder = FakeRecorder()
        self.observer = Observer()
        self.now = NOW
        self.reporter = StatusReporter(
            client=self.kube,
            recorder=self.recorder,
            observer=self.observer,
            dry_run=dry_run,
            now=lambda: self.now,
        )

    def status_patches(self) -> list[dict[str, Any]]:
        return [
            a.body["status"]
            for a in self.kube.write_actions()
            if a.verb == "patch" and a.subresource == "status"
        ]

    def synced(self) -> bool:
        spec = parse_spec(self.bundle)
        return self.reporter.write_status(self.bundle, spec, "True", Reason.SYNCED, "in sync")


def _protocol(reporter: StatusReporter) -> Reporting:
    """Never called: mypy checks that the reporter is what the other parts report through."""
    return reporter


def test_a_status_is_written_once_and_a_stale_cache_read_writes_it_no_more() -> None:
    s = Setup()
    assert s.synced()
    (status,) = s.status_patches()
    assert status["conditions"][0]["reason"] == "Synced"
    assert status["configMapName"] == "app"
    # The cache still shows the bundle without that status (its watch event is on the
    # way); minutes later, the same outcome writes nothing.
    s.now = NOW + datetime.timedelta(minutes=5)
    assert not s.synced()
    assert len(s.status_patches()) == 1


def test_a_changed_outcome_is_written_with_a_new_transition_time() -> None:
    s = Setup(bundle(status=synced_status()))
    spec = parse_spec(s.bundle)
    assert s.reporter.write_status(s.bundle, spec, "False", Reason.RECONCILE_ERROR, "down")
    (status,) = s.status_patches()
    (ready,) = status["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "ReconcileError")
    assert ready["lastTransitionTime"] == "2026-01-02T03:04:05Z"


def test_a_bundle_deleted_meanwhile_is_no_error() -> None:
    s = Setup()
    s.kube.tracker.delete(CONFIGBUNDLES, "demo", "app")
    assert s.synced()


@pytest.mark.parametrize(
    ("action", "reasons", "drifts"),
    [
        ("create", [("Created", True)], 0),
        ("drift", [("DriftCorrected", False)], 1),
        ("conflict", [("ConfigMapConflict", False)], 0),
        ("invalid", [("InvalidSpec", False)], 0),
        ("none", [], 0),
    ],
)
def test_each_action_has_its_event(
    action: str, reasons: list[tuple[str, bool]], drifts: int
) -> None:
    synced = bundle(status=synced_status())
    spec = {"data": {"bad key": "1"}} if action == "invalid" else {"data": {"a": "1"}}
    # Created is the first ConfigMap of a new bundle; a missing one of a synced bundle
    # is drift.
    b = bundle(spec, status=None if action == "create" else synced_status())
    current = {
        "create": None,
        "drift": {**written(synced), "data": {"a": "edited"}},
        "conflict": {"metadata": {"name": "app", "namespace": "demo", "uid": "x"}},
        "invalid": None,
        "none": written(synced),
    }[action]
    s = Setup(b)
    s.reporter.record(b, decide_for(b, current))
    assert [(e.reason, e.routine) for e in s.recorder.recorded] == reasons
    assert s.observer.drifts == drifts


def test_counts_and_events_go_through_and_a_dry_run_writes_and_counts_nothing() -> None:
    s = Setup()
    s.reporter.count("create")
    s.reporter.event(s.bundle, "Normal", "Orphaned", "released")
    assert s.observer.writes == ["create"]
    assert [e.reason for e in s.recorder.recorded] == ["Orphaned"]
    dry = Setup(dry_run=True)
    dry.reporter.count("create")
    dry.reporter.event(dry.bundle, "Normal", "Orphaned", "released")
    b = bundle({"data": {"a": "1"}}, status=synced_status())
    dry.reporter.record(b, decide_for(b, {**written(b), "data": {"a": "edited"}}))
    assert not dry.synced()
    assert (dry.observer.writes, dry.observer.drifts, dry.recorder.recorded) == ([], 0, [])
    assert dry.kube.actions == []


def test_a_refusal_is_reported_in_status_and_a_warning() -> None:
    s = Setup()
    err = RejectedError("too large", Reason.CONFIGMAP_TOO_LARGE)
    s.reporter.rejected(s.bundle, parse_spec(s.bundle), err)
    (status,) = s.status_patches()
    assert status["conditions"][0]["reason"] == "ConfigMapTooLarge"
    assert [(e.type, e.reason) for e in s.recorder.recorded] == [("Warning", "ConfigMapTooLarge")]


@pytest.mark.parametrize(
    ("err", "message"),
    [
        (
            ApiError(500, "InternalError", "etcd is down"),
            "the API server refused a write: etcd is down",
        ),
        (
            ConnectionFailed("connection refused"),
            "a write got no answer from the API server: connection failed: connection refused",
        ),
    ],
    ids=["refused", "unanswered"],
)
def test_a_failure_is_reported_as_reconcile_error(err: ApiError, message: str) -> None:
    s = Setup()
    s.reporter.failed(s.bundle, parse_spec(s.bundle), err)
    (status,) = s.status_patches()
    assert (status["conditions"][0]["reason"], status["conditions"][0]["message"]) == (
        "ReconcileError",
        message,
    )


def test_a_failure_whose_status_cannot_be_written_does_not_raise() -> None:
    s = Setup()
    s.kube.prepend_reactor("patch", "configbundles", fail(errors.internal_error("down")))
    s.reporter.failed(s.bundle, parse_spec(s.bundle), errors.internal_error("etcd is down"))
    assert len(s.status_patches()) == 1  # sent, and refused
    assert "status" not in s.kube.tracker.get(CONFIGBUNDLES, "demo", "app")


@pytest.mark.parametrize(
    ("spec", "live", "expected"),
    [
        ({"data": {"a": "1"}}, None, ("True", Reason.SYNCED, None)),
        ({"data": {"bad key": "1"}}, None, ("False", Reason.INVALID_SPEC, None)),
        ({"data": {"a": "1"}, "suspend": True}, None, ("Unknown", Reason.SUSPENDED, None)),
        (
            {"data": {"a": "1"}},
            {"metadata": {"name": "app", "namespace": "demo", "uid": "x"}},
            ("False", Reason.CONFIGMAP_CONFLICT, 15.0),
        ),
    ],
    ids=["synced", "invalid", "suspended", "conflict"],
)
def test_ready_condition_of_a_decision(
    spec: dict[str, Any], live: dict[str, Any] | None, expected: tuple[Any, ...]
) -> None:
    decision = decide_for(bundle(spec), live)
    ready, reason, message, requeue = ready_condition(decision, conflict_recheck=15.0)
    assert (ready, reason, requeue) == expected
    assert message
    if decision.action is Action.CREATE:
        assert message.startswith("ConfigMap app matches the spec (1 key, sha256:")
