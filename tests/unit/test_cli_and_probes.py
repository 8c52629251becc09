"""Small pure pieces: duration parsing, bind addresses, probes, Event dedup, flags from env."""

from __future__ import annotations

import argparse
import datetime
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

import pytest

from cbop.cli import build_parser, parse_duration
from cbop.health import ProbeServer, parse_bind_address
from cbop.kube import ApiError
from cbop.runtime.correlator import SPAM_BURST
from cbop.runtime.events import EventRecorder
from cbop_testing.fakekube import FakeKube, fail


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 30.0), ("0.5", 0.5), ("10h", 36000.0), ("1h30m", 5400.0), ("250ms", 0.25), ("0", 0.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10x", "h", "-1", "1h 30m"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (":8080", ("0.0.0.0", 8080)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("9090", ("0.0.0.0", 9090)),
        ("0", None),
    ],
)
def test_parse_bind_address(address: str, expected: tuple[str, int] | None) -> None:
    assert parse_bind_address(address) == expected


def test_parse_bind_address_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="no valid port"):
        parse_bind_address("localhost:http")


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_probes_answer_503_until_checks_pass() -> None:
    state = {"synced": False}

    def broken() -> bool:
        raise RuntimeError("check crashed")

    server = ProbeServer(
        ("127.0.0.1", 0),
        liveness={"alive": lambda: True},
        readiness={"synced": lambda: state["synced"], "other": lambda: True},
    )
    server.start()
    try:
        assert _get(server.port, "/healthz") == (200, "ok")
        code, body = _get(server.port, "/readyz")
        assert code == 503
        assert "[-]synced failed" in body
        assert "[+]other ok" in body
        state["synced"] = True
        assert _get(server.port, "/readyz") == (200, "ok")
        assert _get(server.port, "/nope")[0] == 404
    finally:
        server.stop()
    crashing = ProbeServer(("127.0.0.1", 0), liveness={"boom": broken}, readiness={})
    crashing.start()
    try:
        assert _get(crashing.port, "/healthz")[0] == 503
    finally:
        crashing.stop()


def test_readyz_body_carries_each_failing_checks_reason() -> None:
    def broken() -> bool:
        raise RuntimeError("check crashed")

    server = ProbeServer(
        ("127.0.0.1", 0),
        liveness={"boom": broken},
        readiness={
            "informer configbundles/*": lambda: "the API server does not serve configbundles",
            "informer configmaps/a": lambda: 'forbidden to list configmaps in namespace "a"',
            "informer configmaps/b": lambda: None,
            "plain": lambda: False,
        },
    )
    server.start()
    try:
        code, body = _get(server.port, "/readyz")
        assert code == 503
        assert body.splitlines() == [
            "[-]informer configbundles/* failed: the API server does not serve configbundles",
            '[-]informer configmaps/a failed: forbidden to list configmaps in namespace "a"',
            "[+]informer configmaps/b ok",
            "[-]plain failed",
            "healthz check failed",
        ]
        code, body = _get(server.port, "/healthz")
        assert code == 503
        assert "[-]boom failed: check raised RuntimeError: check crashed" in body
    finally:
        server.stop()


def bodies(kube: FakeKube) -> list[Mapping[str, Any]]:
    """The Event bodies sent: creates as they are, patches as ``{"patch": name, **patch}``."""
    return [
        a.body if a.verb == "create" else {"patch": a.name, **a.body}
        for a in kube.actions
        if a.verb in ("create", "patch")
    ]


OBJ = {
    "apiVersion": "cbop.dev/v1alpha1",
    "kind": "ConfigBundle",
    "metadata": {"name": "a", "namespace": "demo", "uid": "u"},
}
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def test_identical_events_are_counted() -> None:
    writer = FakeKube()
    recorder = EventRecorder(writer, clock=lambda: NOW)
    recorder.event(OBJ, "Warning", "ConfigMapConflict", "taken")
    recorder.event(OBJ, "Warning", "ConfigMapConflict", "taken")
    recorder.event(OBJ, "Normal", "Created", "made")
    assert recorder.flush()
    first = bodies(writer)[0]
    assert [b.get("reason") for b in bodies(writer)] == ["ConfigMapConflict", None, "Created"]
    assert bodies(writer)[1]["patch"] == first["metadata"]["name"]
    assert bodies(writer)[1]["count"] == 2
    body = bodies(writer)[0]
    assert body["involvedObject"]["uid"] == "u"
    assert body["type"] == "Warning"
    assert body["metadata"]["namespace"] == "demo"


def test_event_failures_never_raise() -> None:
    writer = FakeKube()
    writer.prepend_reactor("create", "events", fail(ApiError(403, "Forbidden", "no")))
    recorder = EventRecorder(writer, clock=lambda: NOW)
    recorder.event(OBJ, "Normal", "Created", "x")
    assert recorder.flush()
    assert len(bodies(writer)) == 1
    recorder.close()


def test_event_queue_is_bounded_and_drops_when_full() -> None:
    gate = threading.Event()

    writer = FakeKube()
    writer.prepend_reactor("create", "events", lambda action: gate.wait(10) and None)
    recorder = EventRecorder(writer, clock=lambda: NOW)
    for i in range(1_100):
        recorder.event(OBJ, "Normal", "Created", f"event {i}")
    assert recorder.dropped >= 99
    gate.set()
    assert recorder.flush(10)
    # What was queued was correlated: the spam filter let the first 25 through.
    assert len(bodies(writer)) == min(SPAM_BURST, 1_100 - recorder.dropped)
    recorder.close()


def test_flags_read_cbop_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CBOP_WORKERS", "7")
    monkeypatch.setenv("CBOP_NAMESPACE", "a,b")
    monkeypatch.setenv("CBOP_LEADER_ELECT", "true")
    monkeypatch.setenv("CBOP_RESYNC_PERIOD", "5m")
    args = build_parser().parse_args([])
    assert args.workers == 7
    assert args.namespaces == ["a", "b"]
    assert args.leader_elect is True
    assert args.resync_period == 300.0
    assert build_parser().parse_args(["--workers", "2"]).workers == 2


def test_bad_environment_value_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CBOP_WORKERS", "many")
    with pytest.raises(SystemExit) as exit_:
        build_parser()
    assert exit_.value.code == 2
    assert "CBOP_WORKERS" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        pytest.param([], None, True, id="default-on"),
        pytest.param(["--no-priority-queue"], None, False, id="flag-off"),
        pytest.param([], "false", False, id="env-off"),
        pytest.param(["--priority-queue"], "false", True, id="flag-beats-env"),
    ],
)
def test_priority_queue_flag(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], env: str | None, expected: bool
) -> None:
    if env is not None:
        monkeypatch.setenv("CBOP_PRIORITY_QUEUE", env)
    assert build_parser().parse_args(argv).priority_queue is expected
