"""LeaderElector against an in-memory Lease API, driven by a FakeClock (no sleeps).

Each elector runs in a background thread, as the manager runs it. A test synchronises
with it through the fake clock: ``park()`` waits until the elector is blocked on the
clock and returns its wake-up time; ``tick()`` moves the clock to that time and waits
for the elector to park again, so every API call of that attempt has been made.
"""

from __future__ import annotations

import itertools
import queue
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cbop.leaderelection import ACQUIRE_JITTER_FACTOR, LeaderElector, micro_time
from cbop.metrics.controller import LeaderElectionMetrics
from cbop.stop import StopSignal
from cbop_testing.clock import FakeClock
from cbop_testing.leases import LeaseServer

NS = "cbop-system"
LEASE = "cbop-leader"
RETRY = 2.0
RENEW_DEADLINE = 10.0
LEASE_DURATION = 15.0
MAX_ACQUIRE_WAIT = RETRY * (1 + ACQUIRE_JITTER_FACTOR)
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
LONG_AGO = "2001-01-01T00:00:00.000000Z"
#: Real seconds a test waits for a background thread before failing.
PATIENCE = 5.0


class FakeLeaseApi(LeaseServer):
    """The Lease server of cbop_testing, with this module's Lease as the default name.

    Updates need the stored ``resourceVersion`` (else ``409 Conflict``), a create of an
    existing name is ``409 AlreadyExists`` (the tracker's rules), and
    ``leaseDurationSeconds`` must be > 0 (``422``); see
    :class:`cbop_testing.leases.LeaseServer` for the scripted faults.
    """

    def __init__(self) -> None:
        super().__init__(NS)
        self._renewals = 0

    def spec(self, name: str = LEASE) -> dict[str, Any]:
        return super().spec(name)

    def resource_version(self, name: str = LEASE) -> str:
        return super().resource_version(name)

    def put(self, name: str = LEASE, **spec: Any) -> None:
        super().put(name, **spec)

    def renew_as(self, holder: str, name: str = LEASE) -> None:
        """``holder`` renews its lease: only renewTime changes (always to a new value)."""
        spec = self.spec(name)
        assert spec["holderIdentity"] == holder
        self._renewals += 1
        spec["renewTime"] = f"2030-01-01T00:00:00.{self._renewals:06d}Z"
        self.put(name, **spec)


@dataclass
class Candidate:
    """One elector running in a thread, with its own fake clock and recorded callbacks."""

    api: FakeLeaseApi
    identity: str = "a"
    release_on_cancel: bool = True
    lease_duration: float = LEASE_DURATION
    renew_deadline: float = RENEW_DEADLINE
    on_started: Callable[[], None] | None = None
    on_stopped: Callable[[], None] | None = None
    clock: FakeClock = field(default_factory=lambda: FakeClock(1000.0))
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    started: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)
    started_thread: list[int] = field(default_factory=list)
    new_leaders: queue.Queue[str] = field(default_factory=queue.Queue)
    stop: StopSignal = field(default_factory=StopSignal)
    error: list[Exception] = field(default_factory=list)
    thread: threading.Thread | None = None
    may_acquire: Callable[[], str | None] | None = None

    def __post_init__(self) -> None:
        self.elector = LeaderElector(
            self.api,
            lease_name=LEASE,
            namespace=NS,
            identity=self.identity,
            lease_duration=self.lease_duration,
            renew_deadline=self.renew_deadline,
            retry_period=RETRY,
            on_started_leading=self._started,
            on_stopped_leading=self._stopped,
            on_new_leader=self.new_leaders.put,
            metrics=LeaderElectionMetrics(LEASE, self.registry),
            clock=self.clock,
            release_on_cancel=self.release_on_cancel,
            may_acquire=self.may_acquire,
        )

    def _started(self) -> None:
        self.started_thread.append(threading.get_ident())
        self.started.set()
        if self.on_started is not None:
            self.on_started()

    def _stopped(self) -> None:
        if self.on_stopped is not None:
            self.on_stopped()
        self.stopped.set()

    def _run(self) -> None:
        try:
            self.elector.run(self.stop)
        except Exception as exc:  # noqa: BLE001 - recorded for the test to assert on
            self.error.append(exc)

    def start(self) -> float:
        """Start the elector; return the clock time of its first wake-up."""
        self.thread = threading.Thread(target=self._run, name=f"elector-{self.identity}")
        self.thread.start()
        return self.park()

    def park(self) -> float:
        """Wait until the elector blocks on the clock; return when it will wake up."""
        assert self.clock.wait_for_waiter(timeout=PATIENCE), "the elector never waited"
        return self.clock.waiter_deadlines()[0]

    def tick(self) -> float:
        """Wake the elector at its deadline; wait until it parks again; return its next one."""
        self.clock.set(self.park())
        return self.park()

    def wake_and_finish(self) -> None:
        """Wake the elector at its deadline and wait for run() to return."""
        self.clock.set(self.park())
        self.join()

    def join(self) -> None:
        assert self.thread is not None
        self.thread.join(PATIENCE)
        assert not self.thread.is_alive(), "run() did not return"

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.join()

    def metric(self) -> float | None:
        return self.registry.get_sample_value("leader_election_master_status", {"name": LEASE})

    def slowpath(self) -> float | None:
        return self.registry.get_sample_value("leader_election_slowpath_total", {"name": LEASE})

    def seen_leaders(self) -> list[str]:
        got: list[str] = []
        while True:
            try:
                got.append(self.new_leaders.get(timeout=0.2))
            except queue.Empty:
                return got


@pytest.fixture
def api() -> FakeLeaseApi:
    return FakeLeaseApi()


@pytest.fixture
def candidates(api: FakeLeaseApi) -> Iterator[Callable[..., Candidate]]:
    made: list[Candidate] = []

    def make(**kwargs: Any) -> Candidate:
        candidate = Candidate(api, **kwargs)
        made.append(candidate)
        return candidate

    yield make
    for candidate in made:
        candidate.stop.set()
    for candidate in made:
        if candidate.thread is not None:
            candidate.thread.join(PATIENCE)
            assert not candidate.thread.is_alive(), f"{candidate.identity} still running"


def held_by(holder: str, *, duration: int = 15, transitions: int = 2) -> dict[str, Any]:
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration,
        "acquireTime": LONG_AGO,
        "renewTime": LONG_AGO,
        "leaseTransitions": transitions,
    }


def leading(candidate: Candidate) -> None:
    """Start ``candidate`` on a missing Lease and wait until it leads."""
    candidate.start()
    assert candidate.started.wait(PATIENCE)
    assert candidate.elector.is_leader()


# --------------------------------------------------------------------- construction


def _make(lease: float, renew: float, retry: float, **kw: Any) -> LeaderElector:
    args: dict[str, Any] = {
        "lease_name": LEASE,
        "namespace": NS,
        "identity": "a",
        "lease_duration": lease,
        "renew_deadline": renew,
        "retry_period": retry,
        "on_started_leading": lambda: None,
        "on_stopped_leading": lambda: None,
        **kw,
    }
    return LeaderElector(FakeLeaseApi(), **args)


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "kw", "message"),
    [
        pytest.param(15, 15, 2, {}, "greater than the renew deadline", id="lease-equals-renew"),
        pytest.param(10, 15, 2, {}, "greater than the renew deadline", id="lease-below-renew"),
        pytest.param(15, 2.4, 2, {}, "1.2 x the retry period", id="renew-equals-1.2-retry"),
        pytest.param(15, 10, 10, {}, "1.2 x the retry period", id="renew-equals-retry"),
        pytest.param(15, 10, 0, {}, "positive", id="zero-retry"),
        pytest.param(15, -1, -2, {}, "positive", id="negative"),
        pytest.param(0.9, 0.5, 0.1, {}, "at least 1s", id="lease-under-one-second"),
        pytest.param(15, 10, 2, {"identity": ""}, "identity", id="empty-identity"),
        pytest.param(15, 10, 2, {"lease_name": ""}, "lease name", id="empty-lease-name"),
        pytest.param(15, 10, 2, {"namespace": ""}, "namespace", id="empty-namespace"),
    ],
)
def test_constructor_rejects_bad_settings(
    lease: float, renew: float, retry: float, kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _make(lease, renew, retry, **kw)


@pytest.mark.parametrize(
    ("lease", "renew", "retry"),
    [
        pytest.param(15, 10, 2, id="controller-runtime-defaults"),
        pytest.param(137, 107, 26, id="kube-controller-manager-like"),
        pytest.param(1, 0.5, 0.4, id="fast"),
    ],
)
def test_constructor_accepts_consistent_timings(lease: float, renew: float, retry: float) -> None:
    elector = _make(lease, renew, retry)
    assert not elector.is_leader()
    assert elector.identity == "a"


def test_micro_time_is_utc_with_microseconds() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert micro_time(datetime(2024, 5, 1, 14, 0, 0, 5, tzinfo=plus_two)) == (
        "2024-05-01T12:00:00.000005Z"
    )
    with pytest.raises(ValueError, match="aware"):
        micro_time(datetime(2024, 5, 1))


# --------------------------------------------------------------------- acquiring


def test_creates_a_missing_lease_and_leads(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    a = candidates()
    first_renew = a.start()
    assert a.started.wait(PATIENCE)
    assert a.elector.is_leader()
    assert a.metric() == 1.0
    assert api.calls == ["get", "create"]
    spec = api.spec()
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert MICRO_TIME.match(spec["acquireTime"])
    assert spec["renewTime"] == spec["acquireTime"]
    # The callback runs in its own thread, not the election loop's.
    assert a.thread is not None
    assert a.started_thread != [a.thread.ident]
    # The first renewal comes exactly one retry period later.
    assert first_renew == pytest.approx(1000.0 + RETRY)
    assert a.seen_leaders() == ["a"]


def test_takes_a_released_lease_at_once(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    api.put(**held_by("", duration=1, transitions=3))
    a = candidates()
    a.start()
    assert a.started.wait(PATIENCE)
    spec = api.spec()
    assert spec["holderIdentity"] == "a"
    assert spec["leaseTransitions"] == 4
    assert spec["leaseDurationSeconds"] == 15
    assert spec["acquireTime"] != LONG_AGO
    assert api.calls == ["get", "update"]


def test_may_acquire_holds_the_candidate_back_without_touching_the_lease(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    reasons: list[str | None] = ["a sharded group is at work"] * 3
    asked: list[float] = []

    def may_acquire() -> str | None:
        asked.append(a.clock.now())
        return reasons.pop(0) if reasons else None

    a = candidates(may_acquire=may_acquire)
    a.start()
    a.tick()
    a.tick()
    assert api.calls == [], "read or wrote the lease while told to wait"
    assert not a.started.is_set()
    # Asked once per (jittered) retry period.
    gaps = [later - earlier for earlier, later in itertools.pairwise(asked)]
    assert all(RETRY <= gap <= RETRY * (1 + ACQUIRE_JITTER_FACTOR) + 1e-9 for gap in gaps)
    a.tick()
    assert a.started.wait(PATIENCE)
    assert api.calls == ["get", "create"]
    assert api.spec()["holderIdentity"] == "a"
    # Never asked again while leading.
    count = len(asked)
    a.tick()
    assert len(asked) == count


@pytest.mark.parametrize("blocked_by", ["api-down", "may-acquire"])
def test_after_seeing_a_held_lease_a_candidate_that_cannot_try_waits_whole_periods(
    api: FakeLeaseApi, candidates: Callable[..., Candidate], blocked_by: str
) -> None:
    """Once the observed record has expired, the expiry must not shorten the waits of
    attempts that could not read the Lease (API down) or were not made (may_acquire)."""
    reason: list[str] = []
    api.put(**held_by("b"))
    a = candidates(may_acquire=lambda: reason[0] if reason else None)
    times = [a.start()]  # saw "b" holding it
    if blocked_by == "api-down":
        api.down = True
    else:
        reason.append("a sharded group is at work")
    for _ in range(12):  # well past the record's local expiry (15 s)
        times.append(a.tick())
    assert times[-1] - 1000.0 > LEASE_DURATION + RETRY
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert all(RETRY <= gap <= MAX_ACQUIRE_WAIT + 1e-9 for gap in gaps), gaps
    assert not a.started.is_set()


def test_a_held_lease_expires_by_the_local_clock_not_the_renew_time(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    # By the server's renewTime this lease expired decades ago; that must not matter.
    api.put(**held_by("b"))
    a = candidates()
    a.start()
    first_seen = 1000.0
    while not a.started.is_set():
        assert a.clock.now() < first_seen + LEASE_DURATION + MAX_ACQUIRE_WAIT
        assert not a.elector.is_leader()
        assert api.writes() == [], "took the lease before it expired locally"
        a.tick()
    assert a.started.wait(PATIENCE)
    took_at = a.clock.now()
    # Not a whole jittered retry period late: the candidate wakes when the lease expires.
    assert first_seen + LEASE_DURATION <= took_at <= first_seen + LEASE_DURATION + 0.1
    spec = api.spec()
    assert spec["holderIdentity"] == "a"
    assert spec["leaseTransitions"] == 3
    assert a.seen_leaders() == ["b", "a"]
    assert a.metric() == 1.0


def test_a_holder_that_keeps_renewing_keeps_the_lease(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    api.put(**held_by("b"))
    a = candidates()
    a.start()
    while a.clock.now() < 1000.0 + 4 * LEASE_DURATION:
        api.renew_as("b")
        a.tick()
    assert not a.started.is_set()
    assert not a.elector.is_leader()
    assert a.metric() == 0.0
    assert api.writes() == []
    assert api.spec()["holderIdentity"] == "b"


def test_expiry_uses_the_duration_written_by_the_holder(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    api.put(**held_by("b", duration=5))
    a = candidates()
    a.start()
    while not a.started.is_set():
        assert a.clock.now() < 1000.0 + 5 + MAX_ACQUIRE_WAIT
        a.tick()
    assert a.clock.now() >= 1005.0
    assert api.spec()["holderIdentity"] == "a"


def test_acquire_attempts_are_jittered_up_to_half_the_retry_period(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    api.put(**held_by("b"))
    a = candidates()
    wake = a.start()
    waits = [wake - 1000.0]
    for _ in range(25):
        api.renew_as("b")
        attempt_at = wake
        a.clock.set(wake)
        wake = a.park()
        waits.append(wake - attempt_at)
    assert all(RETRY <= w < MAX_ACQUIRE_WAIT for w in waits), waits
    assert len(set(waits)) > 1, "no jitter"


def test_conflict_on_update_means_another_candidate_won(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    api.put(**held_by("", duration=1))
    # b writes itself in between a's read and a's update.
    api.hooks["update"] = lambda: api.put(**held_by("b"))
    a = candidates()
    a.start()
    assert not a.elector.is_leader()
    assert api.spec()["holderIdentity"] == "b"
    # Next attempt: b holds a fresh lease, so a leaves it alone.
    a.tick()
    assert not a.elector.is_leader()
    assert api.calls == ["get", "update", "get"]
    assert a.seen_leaders() == ["b"]


def test_already_exists_on_create_means_another_candidate_won(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    api.hooks["create"] = lambda: api.put(**held_by("b"))
    a = candidates()
    a.start()
    assert not a.elector.is_leader()
    a.tick()
    assert not a.elector.is_leader()
    assert api.calls == ["get", "create", "get"]
    assert api.spec()["holderIdentity"] == "b"


def test_api_errors_while_acquiring_are_retried(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    api.down = True
    a = candidates()
    first = a.start()
    # A down API server is retried once per jittered retry period, not in a hot loop.
    assert RETRY <= first - 1000.0 <= RETRY * (1 + ACQUIRE_JITTER_FACTOR)
    second = a.tick()
    assert RETRY <= second - first <= RETRY * (1 + ACQUIRE_JITTER_FACTOR)
    assert not a.elector.is_leader()
    api.down = False
    a.tick()
    assert a.started.wait(PATIENCE)
    assert api.calls == ["get", "get", "get", "create"]


# --------------------------------------------------------------------- renewing


def test_the_leader_renews_every_retry_period(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    a = candidates()
    leading(a)
    acquired = api.spec()
    rv = api.resource_version()
    renew_times = [acquired["renewTime"]]
    wake = a.park()
    for _ in range(3):
        next_wake = a.tick()
        assert next_wake == pytest.approx(wake + RETRY)
        wake = next_wake
        spec = api.spec()
        assert spec["holderIdentity"] == "a"
        assert spec["acquireTime"] == acquired["acquireTime"]
        assert spec["leaseTransitions"] == acquired["leaseTransitions"]
        renew_times.append(spec["renewTime"])
        assert api.resource_version() != rv
        rv = api.resource_version()
    assert a.elector.is_leader()
    # Renewals take the optimistic path: one update each, no read.
    assert api.calls == ["get", "create", "update", "update", "update"]
    assert renew_times == sorted(renew_times)


def test_a_renewal_that_must_read_the_lease_counts_as_slow_path(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    """client-go's leader_election_slowpath_total: optimistic renewals do not count; one
    refused because someone else wrote the Lease (409), then read and renewed, does."""
    a = candidates()
    leading(a)
    a.tick()
    assert a.slowpath() == 0.0
    # Another writer touches the Lease (same record, new resourceVersion).
    api.touch(LEASE)
    a.tick()
    assert api.calls[-3:] == ["update", "get", "update"]
    assert api.spec()["holderIdentity"] == "a"
    assert a.elector.is_leader()
    assert a.slowpath() == 1.0
    a.tick()
    assert a.slowpath() == 1.0


def test_a_blocking_on_started_leading_does_not_hold_up_renewals(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    release = threading.Event()
    a = candidates(on_started=lambda: release.wait(PATIENCE))
    leading(a)
    a.tick()
    a.tick()
    assert api.calls == ["get", "create", "update", "update"]
    release.set()


def test_failures_shorter_than_the_renew_deadline_are_survived(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    a = candidates()
    leading(a)
    api.down = True
    for _ in range(3):  # attempts at +2, +4, +6 s fail
        a.tick()
    assert a.elector.is_leader()
    assert a.elector.holds_lease()
    api.down = False
    a.tick()  # the fourth attempt, at +8 s, is still before the deadline (+10 s)
    assert a.elector.is_leader()
    assert a.elector.holds_lease()
    assert not a.stopped.is_set()
    assert api.spec()["holderIdentity"] == "a"
    assert api.calls[-1] == "update"


@pytest.mark.parametrize(
    ("renew_deadline", "attempts"),
    [
        pytest.param(RENEW_DEADLINE, 4, id="deadline-on-a-retry"),
        pytest.param(9.0, 4, id="deadline-between-retries"),
        pytest.param(5.0, 2, id="short-deadline"),
    ],
)
def test_leadership_is_lost_when_renewals_fail_until_the_deadline(
    api: FakeLeaseApi,
    candidates: Callable[..., Candidate],
    renew_deadline: float,
    attempts: int,
) -> None:
    a = candidates(renew_deadline=renew_deadline)
    leading(a)
    acquired_at = a.clock.now()
    api.down = True
    calls_before = len(api.calls)
    # The round starts at +2 s and retries every 2 s until renew_deadline has passed
    # since the last successful renewal (here: the acquire) began.
    attempt_times = []
    wake = a.park()
    while wake < acquired_at + renew_deadline:
        attempt_times.append(wake)
        assert a.elector.is_leader()
        assert a.elector.holds_lease()
        wake = a.tick()
    assert wake == pytest.approx(acquired_at + renew_deadline)
    assert attempt_times == pytest.approx([acquired_at + RETRY * (1 + i) for i in range(attempts)])
    # The API server is back just as the deadline passes: too late, and a lost lease is
    # not released (its remaining time is this process's grace to stop working).
    api.down = False
    a.clock.set(wake)
    assert not a.elector.holds_lease(), "the write fence closes at the deadline"
    a.join()
    assert a.stopped.is_set()
    assert not a.elector.is_leader()
    assert a.metric() == 0.0
    # Every attempt tried the optimistic update, then a read; nothing after the loss.
    assert api.calls[calls_before:] == ["update", "get"] * attempts
    assert api.spec()["holderIdentity"] == "a"
    assert api.spec()["leaseDurationSeconds"] == 15
    assert not a.error


def test_a_paused_leader_wakes_with_the_fence_closed_and_writes_nothing(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    """Input 1 of issue 10 in miniature: the process is frozen past its renew deadline."""
    a = candidates()
    leading(a)
    acquired_at = a.clock.now()
    assert a.elector.holds_lease()
    writes = len(api.writes())
    # A SIGSTOP: the monotonic clock runs on while no thread runs.
    a.clock.set(acquired_at + RENEW_DEADLINE + 11.0)
    assert not a.elector.holds_lease(), "fence must close by the clock, before any thread runs"
    a.join()
    assert a.stopped.is_set()
    assert len(api.writes()) == writes, "no Lease write after the deadline"
    assert api.spec()["holderIdentity"] == "a"


def test_renewal_request_timeouts_are_bounded_by_the_time_left(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    """Each Lease request gets at most the time left before the renew deadline."""
    a = candidates()
    leading(a)
    acquired_at = a.clock.now()
    api.down = True
    wake = a.park()
    while wake < acquired_at + RENEW_DEADLINE:
        api.timeouts.clear()
        a.clock.set(wake)
        wake = a.park()
        left = acquired_at + RENEW_DEADLINE - a.clock.now()
        for _verb, timeout in api.timeouts:
            assert timeout is not None
            assert timeout <= max(left + (wake - a.clock.now()), 0.5) + 1e-9
        assert api.timeouts, "an attempt was made"
        # Never the whole time left while a retry would still fit.
        first = api.timeouts[0][1]
        assert first is not None
        left_at_attempt = acquired_at + RENEW_DEADLINE - a.clock.now()
        if left_at_attempt > 2 * RETRY:
            assert first < left_at_attempt


def test_one_slow_answer_shorter_than_the_deadline_keeps_the_lease(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    """Input 3 of issue 10: the API server answers nothing for 6 s, then recovers."""
    a = candidates()
    api.clock = a.clock
    leading(a)
    acquired_at = a.clock.now()
    # The server stalls from the first renewal (+2 s) until +8 s.
    api.slow_until = acquired_at + RETRY + 6.0
    wake = a.park()
    while a.clock.now() < acquired_at + RETRY + 6.0 + RETRY:
        wake = a.tick()
    assert a.elector.is_leader()
    assert a.elector.holds_lease()
    assert not a.stopped.is_set()
    assert api.spec()["holderIdentity"] == "a"
    assert wake > a.clock.now()


def test_leadership_ends_at_once_when_another_holder_took_the_lease(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    a = candidates()
    leading(a)
    acquired_at = a.clock.now()
    api.put(**held_by("b"))
    a.wake_and_finish()
    assert a.clock.now() == pytest.approx(acquired_at + RETRY)
    assert a.stopped.is_set()
    assert not a.elector.is_leader()
    assert api.spec()["holderIdentity"] == "b", "overwrote the new holder"
    assert api.calls[-2:] == ["update", "get"]
    assert a.seen_leaders() == ["a", "b"]


def test_a_deleted_lease_is_recreated_by_the_leader(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    a = candidates()
    leading(a)
    api.remove_all()
    a.tick()
    assert a.elector.is_leader()
    assert api.calls[-3:] == ["update", "get", "create"]
    assert api.spec()["holderIdentity"] == "a"


def test_a_deleted_lease_is_not_taken_before_its_last_record_expires(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    """Deleting the Lease by hand must not make a second leader while the first still works."""
    api.put(**held_by("b"))
    a = candidates()
    a.start()
    first_seen = 1000.0
    api.remove_all()
    while not a.started.is_set():
        assert a.clock.now() < first_seen + LEASE_DURATION + MAX_ACQUIRE_WAIT
        assert api.writes() == [], "created the Lease while b's record was still valid"
        a.tick()
    assert a.clock.now() >= first_seen + LEASE_DURATION
    assert api.spec()["holderIdentity"] == "a"


def test_an_unexpected_error_while_leading_ends_leadership(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    a = candidates()
    leading(a)
    api.explode = RuntimeError("bug")
    a.wake_and_finish()
    assert [type(e) for e in a.error] == [RuntimeError]
    assert a.stopped.is_set()
    assert not a.elector.is_leader()
    assert a.metric() == 0.0


# --------------------------------------------------------------------- stopping


def test_stop_while_leading_releases_the_lease_before_on_stopped_leading(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    seen_in_callback: list[dict[str, Any]] = []
    a = candidates(on_stopped=lambda: seen_in_callback.append(api.spec()))
    leading(a)
    acquired = api.spec()
    a.finish()
    released = api.spec()
    assert released["holderIdentity"] == ""
    assert released["leaseDurationSeconds"] == 1
    assert released["leaseTransitions"] == acquired["leaseTransitions"]
    assert MICRO_TIME.match(released["renewTime"])
    assert seen_in_callback == [released], "on_stopped_leading ran before the release"
    assert not a.elector.is_leader()
    assert a.metric() == 0.0


def test_stop_without_release_on_cancel_leaves_the_lease(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    a = candidates(release_on_cancel=False)
    leading(a)
    writes = len(api.writes())
    a.finish()
    assert a.stopped.is_set()
    assert api.spec()["holderIdentity"] == "a"
    assert len(api.writes()) == writes


def test_release_never_overwrites_a_successor(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    a = candidates()
    leading(a)
    a.park()
    api.put(**held_by("b"))
    a.finish()
    assert a.stopped.is_set()
    assert api.spec()["holderIdentity"] == "b"
    assert api.calls[-1] == "get"


def test_stop_before_leading_calls_no_callback(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    api.put(**held_by("b"))
    a = candidates()
    a.start()
    a.finish()
    assert not a.started.is_set()
    assert not a.stopped.is_set()
    assert api.writes() == []
    assert a.metric() == 0.0


def test_a_successor_takes_over_at_once_after_a_release(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    a = candidates(identity="a")
    leading(a)
    b = candidates(identity="b")
    b_first_seen = b.clock.now()
    b.start()
    assert not b.elector.is_leader()
    a.finish()
    b.tick()
    assert b.started.wait(PATIENCE)
    # b did not wait out a's 15 s lease: one retry (jittered) was enough.
    assert b.clock.now() - b_first_seen < MAX_ACQUIRE_WAIT
    spec = api.spec()
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    assert b.seen_leaders() == ["a", "b"]


def test_run_cannot_run_twice_at_once(
    api: FakeLeaseApi, candidates: Callable[..., Candidate]
) -> None:
    a = candidates()
    leading(a)
    with pytest.raises(RuntimeError, match="already running"):
        a.elector.run(StopSignal())
    assert a.elector.is_leader()
