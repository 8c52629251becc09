"""One rule for judging a Lease: the record (spec) restarts the local expiry clock."""

from __future__ import annotations

from typing import Any

import pytest

from cbop.leaderelection import LeaseObserver
from cbop_testing.clock import FakeClock


def lease(rv: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": rv, "labels": labels or {}}, "spec": spec}


def test_only_a_changed_record_restarts_the_expiry_clock() -> None:
    clock = FakeClock(100.0)
    observer = LeaseObserver(clock)
    first = observer.observe("l", lease("1", holderIdentity="a", leaseDurationSeconds=15))
    assert (first.holder, first.expiry) == ("a", 115.0)
    clock.step(10)
    # A label written to the Lease: a new resourceVersion, the same record.
    relabelled = observer.observe(
        "l", lease("2", {"x": "y"}, holderIdentity="a", leaseDurationSeconds=15)
    )
    assert relabelled.expiry == 115.0
    clock.step(6)
    assert not relabelled.valid(clock.now())
    renewed = observer.observe(
        "l", lease("3", holderIdentity="a", leaseDurationSeconds=15, renewTime="t2")
    )
    assert renewed.expiry == 131.0
    assert renewed.held(clock.now())


@pytest.mark.parametrize("duration", [None, "15", 1.5, True], ids=str)
def test_a_record_without_a_whole_duration_has_expired_at_once(duration: Any) -> None:
    clock = FakeClock(5.0)
    spec = {"holderIdentity": "a"} | (
        {} if duration is None else {"leaseDurationSeconds": duration}
    )
    seen = LeaseObserver(clock).observe("l", lease("1", **spec))
    assert not seen.valid(clock.now())
    assert not seen.held(clock.now())


def test_forget_and_retain_start_a_lease_afresh() -> None:
    clock = FakeClock(0.0)
    observer = LeaseObserver(clock)
    for name in ("a", "b", "c"):
        observer.observe(name, lease("1", holderIdentity=name, leaseDurationSeconds=10))
    observer.retain(["a", "b"])
    observer.forget("a")
    assert observer.last("a") is None
    assert observer.last("c") is None
    assert observer.last("b") is not None
    clock.step(8)
    again = observer.observe("a", lease("1", holderIdentity="a", leaseDurationSeconds=10))
    assert again.expiry == 18.0  # first seen anew: a full duration from now
