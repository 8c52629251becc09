"""Event correlation as client-go's EventCorrelator: counts, combining, spam filter."""

from __future__ import annotations

import datetime
import threading
from typing import Any

import pytest

from cbop.kube import EVENTS
from cbop.runtime.correlator import AGGREGATE_MAX_EVENTS, SPAM_BURST, EventCorrelator
from cbop.runtime.events import EventRecorder
from cbop_testing.fakekube import FakeKube

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class WallClock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now

    def step(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


class Writer(FakeKube):
    """A fake API server; :attr:`calls` lists its Event creates and patches."""

    @property
    def calls(self) -> list[tuple[str, str, dict[str, Any]]]:
        """``(verb, Event name, body)`` of every create and patch, in order."""
        out: list[tuple[str, str, dict[str, Any]]] = []
        for action in self.actions:
            if action.verb == "create":
                out.append(("create", action.body["metadata"]["name"], dict(action.body)))
            elif action.verb == "patch":
                assert action.options["patch_type"] == "strategic"
                out.append(("patch", action.name or "", dict(action.body)))
        return out


def obj(name: str = "a") -> dict[str, Any]:
    return {
        "apiVersion": "cbop.dev/v1alpha1",
        "kind": "ConfigBundle",
        "metadata": {"name": name, "namespace": "demo", "uid": f"uid-{name}"},
    }


def recorder() -> tuple[EventRecorder, Writer, WallClock]:
    writer, clock = Writer(), WallClock()
    return EventRecorder(writer, clock=clock), writer, clock


def test_repeats_patch_the_first_event_with_count_and_last_time() -> None:
    """Issue 11 item 9: four drift corrections in 10 minutes are one Event, count 4."""
    rec, writer, clock = recorder()
    for _ in range(4):
        rec.event(obj(), "Normal", "DriftCorrected", "ConfigMap a was changed; restored it")
        assert rec.flush()
        clock.step(120)
    verbs = [verb for verb, _, _ in writer.calls]
    assert verbs == ["create", "patch", "patch", "patch"]
    name = writer.calls[0][1]
    assert {n for _, n, _ in writer.calls} == {name}
    assert [body["count"] for _, _, body in writer.calls] == [1, 2, 3, 4]
    assert writer.calls[-1][2] == {
        "count": 4,
        "lastTimestamp": "2026-01-01T00:06:00Z",
        "message": "ConfigMap a was changed; restored it",
    }
    assert writer.calls[0][2]["firstTimestamp"] == "2026-01-01T00:00:00Z"


def test_different_messages_are_combined_after_ten() -> None:
    rec, writer, clock = recorder()
    for i in range(AGGREGATE_MAX_EVENTS + 2):
        rec.event(obj(), "Warning", "ConfigMapConflict", f"blocked {i}")
        clock.step(1)
    assert rec.flush()
    verbs = [(verb, body.get("message")) for verb, _, body in writer.calls]
    singles = AGGREGATE_MAX_EVENTS - 1
    assert verbs[:singles] == [("create", f"blocked {i}") for i in range(singles)]
    assert verbs[singles:] == [
        ("create", "(combined from similar events): blocked 9"),
        ("patch", "(combined from similar events): blocked 10"),
        ("patch", "(combined from similar events): blocked 11"),
    ]
    assert writer.calls[-1][2]["count"] == 3
    # Ten minutes of quiet: the group starts afresh.
    clock.step(601)
    rec.event(obj(), "Warning", "ConfigMapConflict", "blocked again")
    assert rec.flush()
    assert writer.calls[-1][0] == "create"
    assert writer.calls[-1][2]["message"] == "blocked again"


def test_spam_filter_bounds_writes_per_object_and_keeps_counting() -> None:
    rec, writer, clock = recorder()
    for _ in range(SPAM_BURST + 10):
        rec.event(obj(), "Warning", "ConfigMapConflict", "hot loop")
    rec.event(obj("b"), "Normal", "Created", "other object")
    assert rec.flush()
    on_a = [c for c in writer.calls if c[0] == "patch" or c[2]["involvedObject"]["name"] == "a"]
    assert len(on_a) == SPAM_BURST
    assert writer.calls[-1][2]["message"] == "other object"
    # One token per 5 minutes: the next repeat carries every occurrence seen.
    clock.step(299)
    rec.event(obj(), "Warning", "ConfigMapConflict", "hot loop")
    assert rec.flush()
    assert len(writer.calls) == SPAM_BURST + 1
    clock.step(1)
    rec.event(obj(), "Warning", "ConfigMapConflict", "hot loop")
    assert rec.flush()
    assert writer.calls[-1][0] == "patch"
    assert writer.calls[-1][2]["count"] == SPAM_BURST + 12


def test_a_repeat_of_a_deleted_event_creates_it_again_with_its_count() -> None:
    rec, writer, _ = recorder()
    rec.event(obj(), "Normal", "Updated", "x")
    rec.event(obj(), "Normal", "Updated", "x")
    assert rec.flush()
    # The Event is gone from the server (its TTL ran out): the next patch is a 404.
    writer.tracker.remove(EVENTS, "demo", writer.calls[0][1])
    rec.event(obj(), "Normal", "Updated", "x")
    assert rec.flush()
    assert [verb for verb, _, _ in writer.calls] == ["create", "patch", "patch", "create"]
    assert writer.calls[-1][2]["count"] == 3
    assert writer.calls[-1][1] == writer.calls[0][1]


def test_correlator_drops_nothing_under_the_burst() -> None:
    clock = WallClock()
    correlator = EventCorrelator(clock, spam_burst=2, spam_qps=0.5)
    event = {
        "metadata": {"name": "a.1", "namespace": "demo"},
        "involvedObject": {"kind": "ConfigBundle", "name": "a", "namespace": "demo"},
        "type": "Normal",
        "reason": "Created",
        "message": "m",
        "source": {"component": "cbop"},
    }
    first = correlator.correlate(event)
    assert first is not None
    assert first.patch is None
    second = correlator.correlate(event)
    assert second is not None
    assert second.patch == {"count": 2, "lastTimestamp": "2026-01-01T00:00:00Z", "message": "m"}
    assert correlator.correlate(event) is None
    clock.step(2)
    fourth = correlator.correlate(event)
    assert fourth is not None
    assert fourth.patch is not None
    assert fourth.patch["count"] == 4


def test_an_unknown_event_level_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of notable, all, none"):
        EventRecorder(Writer(), level="some")  # type: ignore[arg-type]


class ThrottledWriter(Writer):
    """A writer whose client is throttled (a 429's Retry-After) until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.waiting = threading.Event()

    def wait_while_throttled(self) -> float:
        self.waiting.set()
        self.release.wait(10)
        return 0.0


def test_the_sink_writes_nothing_while_the_client_is_throttled() -> None:
    """Issue 18: under APF throttling the Events wait, leaving the seats to reconcile writes."""
    writer = ThrottledWriter()
    rec = EventRecorder(writer, clock=WallClock())
    rec.event(obj("a"), "Normal", "Created", "created ConfigMap a")
    rec.event(obj("b"), "Normal", "Created", "created ConfigMap b")
    assert writer.waiting.wait(5)
    assert not rec.flush(0.2)
    assert writer.calls == []
    writer.release.set()
    assert rec.flush()
    assert [name.split(".")[0] for _, name, _ in writer.calls] == ["a", "b"]
    rec.close()
