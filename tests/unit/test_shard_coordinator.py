"""ShardCoordinator against an in-memory Lease API, driven by a FakeClock (no sleeps).

The coordinator and its per-shard electors run in background threads, as in the
runtime. ``Driver.advance`` moves the fake clock from one waiter's deadline to the
next and, after each step, waits until every one of those threads is parked on the
clock again, so each step's API calls and handler calls have all been made. Other
members of the group are played by the test writing their Leases directly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cbop.clock import wait_for
from cbop.kube import LEASES
from cbop.leaderelection import ACQUIRE_JITTER_FACTOR, LeaderElector
from cbop.metrics.sharding import PrometheusShardMetrics
from cbop.sharding import (
    GROUP_LABEL,
    JOINED_ANNOTATION,
    MEMBER_ROLE,
    ROLE_LABEL,
    SHARD_ROLE,
    SHARDS_ANNOTATION,
    ShardCoordinator,
    ShardedGroupCheck,
    ShardEvent,
    member_lease_name,
    shard_lease_name,
)
from cbop.shardrange import ShardRange
from cbop.stop import StopSignal
from cbop_testing.clock import FakeClock
from cbop_testing.leases import LeaseServer

NS = "cbop-system"
LONG_AGO = "2001-01-01T00:00:00.000000Z"
#: Real seconds a test waits for a background thread before failing.
PATIENCE = 5.0

GROUP = "cbop"
LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY = 2.0
START = 1000.0


class FakeGroupApi(LeaseServer):
    """The Lease server of cbop_testing with helpers that write a group's Leases.

    Leases created through the API get creationTimestamps counting seconds from 101 on
    (see :class:`cbop_testing.leases.LeaseServer`).
    """

    def __init__(self) -> None:
        super().__init__(NS)

    def holder(self, index: int) -> str:
        lease = self.lease(shard_lease_name(GROUP, index))
        assert lease is not None
        holder = lease["spec"].get("holderIdentity", "")
        assert isinstance(holder, str)
        return holder

    def member(
        self,
        identity: str,
        *,
        shards: int | None = None,
        created: int = 0,
        joined: int | None = None,
    ) -> None:
        """``identity`` renews its membership Lease (creating it).

        ``shards``: the count it announces (none when None); ``created``: the second its
        Lease was created at (coordinators' own Leases are created from 101 on);
        ``joined``: the second its first Lease was created at, if it announces one.
        """
        name = member_lease_name(GROUP, identity)
        obj = self.lease(name) or {"metadata": {"name": name, "namespace": NS}}
        obj["spec"] = _record(identity)
        meta = obj["metadata"]
        meta["labels"] = {GROUP_LABEL: GROUP, ROLE_LABEL: MEMBER_ROLE}
        meta["creationTimestamp"] = _stamp(created)
        if shards is not None:
            meta["annotations"] = {SHARDS_ANNOTATION: str(shards)}
        if joined is not None:
            meta.setdefault("annotations", {})[JOINED_ANNOTATION] = _stamp(joined)
        self.tracker.add(LEASES, obj)

    def leave(self, identity: str) -> None:
        """``identity`` deletes its membership Lease (as a replica stopping)."""
        self.remove(member_lease_name(GROUP, identity))

    def shard(self, index: int, holder: str) -> None:
        """``holder`` writes shard ``index``'s Lease (creating it, labelled)."""
        name = shard_lease_name(GROUP, index)
        obj = self.lease(name) or {"metadata": {"name": name, "namespace": NS}}
        obj["spec"] = _record(holder)
        obj["metadata"]["labels"] = {GROUP_LABEL: GROUP, ROLE_LABEL: SHARD_ROLE}
        self.tracker.put(LEASES, obj)


def _stamp(second: int) -> str:
    """Return an RFC 3339 creationTimestamp ``second`` seconds into a fixed day."""
    return f"2026-12-01T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z"


def _second(stamp: str) -> int:
    """Invert :func:`_stamp`."""
    hours, minutes, seconds = stamp[len("2026-12-01T") : -1].split(":")
    return int(hours) * 3600 + int(minutes) * 60 + int(seconds)


def _record(holder: str) -> dict[str, Any]:
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": int(LEASE_DURATION),
        "acquireTime": LONG_AGO,
        "renewTime": f"{time.monotonic_ns()}",
        "leaseTransitions": 0,
    }


class Handler:
    """Records every call with the fake time; checks the Lease state at each one."""

    def __init__(self, api: FakeGroupApi, clock: FakeClock, identity: str) -> None:
        self.api = api
        self.clock = clock
        self.identity = identity
        self.calls: list[tuple[str, int, float]] = []
        self.fences: dict[int, Callable[[], bool]] = {}
        self.problems: list[str] = []
        #: When set, ``release`` blocks (``draining``) until the test sets this event.
        self.gate: threading.Event | None = None
        self.draining = False

    def acquired(self, shard: ShardRange, fence: Callable[[], bool]) -> None:
        self.calls.append(("acquired", shard.index, self.clock.now()))
        if not fence():
            self.problems.append(f"acquired {shard} with the fence closed")
        if self.api.holder(shard.index) != self.identity:
            self.problems.append(f"acquired {shard} whose Lease names someone else")
        self.fences[shard.index] = fence

    def release(self, shard: ShardRange) -> None:
        self.calls.append(("release", shard.index, self.clock.now()))
        if not self.fences.pop(shard.index)():
            self.problems.append(f"asked to drain {shard} after its fence closed")
        if self.api.holder(shard.index) != self.identity:
            self.problems.append(f"asked to drain {shard} after its Lease was handed back")
        if self.gate is not None:
            self.draining = True
            self.gate.wait(PATIENCE)
            self.draining = False

    def lost(self, shard: ShardRange) -> None:
        self.calls.append(("lost", shard.index, self.clock.now()))
        if self.fences.pop(shard.index)():
            self.problems.append(f"told {shard} was lost while its fence was open")

    def events(self) -> list[tuple[str, int]]:
        return [(what, index) for what, index, _ in self.calls]


class Metrics:
    def __init__(self) -> None:
        self.held: list[int] = []
        self.transitions: list[tuple[int, ShardEvent]] = []

    def set_held(self, count: int) -> None:
        self.held.append(count)

    def transition(self, shard: int, event: ShardEvent) -> None:
        self.transitions.append((shard, event))


class Driver:
    """One coordinator in a thread, on a fake clock."""

    def __init__(self, api: FakeGroupApi, identity: str, shards: int) -> None:
        self.api = api
        self.clock = FakeClock(START)
        self.handler = Handler(api, self.clock, identity)
        self.metrics = Metrics()
        self.coordinator = ShardCoordinator(
            api,
            group=GROUP,
            namespace=NS,
            identity=identity,
            shards=shards,
            lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY,
            handler=self.handler,
            metrics=self.metrics,
            clock=self.clock,
        )
        self.stop = StopSignal()
        self.thread = threading.Thread(target=self.coordinator.run, args=(self.stop,))

    def start(self) -> None:
        """Start run(); return after its first tick, which only announces the replica."""
        self.thread.start()
        self.settle()

    def join(self) -> None:
        """Start run() and let it tick twice: it acts from its second tick on."""
        self.start()
        self.advance(RETRY * (1 + ACQUIRE_JITTER_FACTOR))

    def _threads(self) -> tuple[int, bool]:
        """(threads that should park on the clock, whether a transient one runs)."""
        alive = [t for t in threading.enumerate() if t.is_alive()]
        parking = [
            t
            for t in alive
            if t.name.startswith("cbop-shard-elector-") or t.name == "cbop-shard-membership"
        ]
        busy = any(t.name == "cbop-leader-started" for t in alive)
        # While the handler drains, the coordinator's thread is blocked in it.
        coordinator = self.thread.is_alive() and not self.handler.draining
        return len(parking) + (1 if coordinator else 0), busy

    def settle(self) -> None:
        """Wait (real time) until every thread of the coordinator is parked on the clock."""
        deadline = time.monotonic() + PATIENCE
        quiet = 0
        while quiet < 3:
            expected, busy = self._threads()
            parked = len(self.clock.waiter_deadlines())
            # An elector's change (recorded, the coordinator notified) not yet handled
            # leaves the coordinator registered on the clock until it runs.
            with self.coordinator._lock:
                pending = self.coordinator._changed
            quiet = quiet + 1 if not busy and not pending and parked == expected else 0
            assert time.monotonic() < deadline, f"{parked} of {expected} threads parked"
            self.clock.wait_for_waiter(timeout=0.002)  # yields to the other threads

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` on, waking each waiter at its own deadline."""
        until = self.clock.now() + seconds
        while True:
            self.settle()
            deadlines = [d for d in self.clock.waiter_deadlines() if d <= until]
            if not deadlines:
                break
            self.clock.set(max(deadlines[0], self.clock.now()))
        self.clock.set(until)
        self.settle()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(PATIENCE)
        assert not self.thread.is_alive(), "run() did not return"


@pytest.fixture
def api() -> FakeGroupApi:
    return FakeGroupApi()


@pytest.fixture
def drivers(api: FakeGroupApi) -> Iterator[Callable[..., Driver]]:
    made: list[Driver] = []

    def make(identity: str = "b", shards: int = 3) -> Driver:
        driver = Driver(api, identity, shards)
        made.append(driver)
        return driver

    yield make
    for driver in made:
        driver.stop.set()
        driver.thread.join(PATIENCE)
        assert not driver.thread.is_alive()
        assert not driver.handler.problems


def test_alone_it_takes_every_shard_on_labelled_leases(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    d = drivers("b", 3)
    d.start()
    assert d.handler.events() == []  # the first tick only announces it
    assert api.lease(member_lease_name(GROUP, "b")) is not None
    assert api.lease(shard_lease_name(GROUP, 0)) is None
    d.advance(RETRY * (1 + ACQUIRE_JITTER_FACTOR))
    assert sorted(d.handler.events()) == [("acquired", 0), ("acquired", 1), ("acquired", 2)]
    assert [s.index for s in d.coordinator.held()] == [0, 1, 2]
    assert all(d.coordinator.holds(i) for i in range(3))
    assert not d.coordinator.holds(3)
    for i in range(3):
        lease = api.lease(shard_lease_name(GROUP, i))
        assert lease is not None
        assert lease["metadata"]["labels"] == {GROUP_LABEL: GROUP, ROLE_LABEL: SHARD_ROLE}
        assert lease["spec"]["holderIdentity"] == "b"
    member = api.lease(member_lease_name(GROUP, "b"))
    assert member is not None
    assert member["metadata"]["labels"] == {GROUP_LABEL: GROUP, ROLE_LABEL: MEMBER_ROLE}
    assert member["spec"]["holderIdentity"] == "b"
    assert d.metrics.held[-1] == 3
    assert sorted(d.metrics.transitions) == [(i, ShardEvent.ACQUIRED) for i in range(3)]
    # Membership is renewed every tick, one LIST per tick.
    renewed = member["metadata"]["resourceVersion"]
    lists = api.calls.count("list")
    d.advance(RETRY * 1.5)
    member = api.lease(member_lease_name(GROUP, "b"))
    assert member is not None
    assert member["metadata"]["resourceVersion"] != renewed
    assert api.calls.count("list") == lists + 1


def test_a_joiner_makes_it_release_one_shard_per_tick_after_draining(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    d = drivers("b", 3)
    d.join()
    api.member("a")  # ranks first: targets 2 and 1
    api.member("c")  # three members: one each
    d.advance(RETRY * 1.5)
    assert d.handler.events()[3:] == [("release", 2)]
    assert api.holder(2) == ""  # handed back after the drain, not before
    assert [s.index for s in d.coordinator.held()] == [0, 1]
    assert not d.coordinator.holds(2)
    d.advance(RETRY * 1.5)
    assert d.handler.events()[3:] == [("release", 2), ("release", 1)]
    assert api.holder(1) == ""
    d.advance(RETRY * 1.5 * 3)
    assert d.handler.events()[3:] == [("release", 2), ("release", 1)]
    assert [s.index for s in d.coordinator.held()] == [0]
    assert d.metrics.transitions[3:] == [(2, ShardEvent.RELEASED), (1, ShardEvent.RELEASED)]
    assert d.metrics.held[-1] == 1


def test_the_membership_lease_is_renewed_while_a_shard_drains(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    """A drain longer than the lease duration does not make the replica look dead."""
    d = drivers("b", 2)
    d.join()
    d.handler.gate = threading.Event()
    api.member("a")  # "b" now targets 1: it releases shard 1, whose drain blocks
    d.advance(RETRY * (1 + ACQUIRE_JITTER_FACTOR))
    assert d.handler.draining
    versions = set()
    for _ in range(int(LEASE_DURATION / RETRY) + 2):
        lease = api.lease(member_lease_name(GROUP, "b"))
        assert lease is not None
        versions.add(lease["metadata"]["resourceVersion"])
        api.member("a")
        d.advance(RETRY)
    assert len(versions) == int(LEASE_DURATION / RETRY) + 2  # renewed every retry period
    d.handler.gate.set()
    d.advance(RETRY * (1 + ACQUIRE_JITTER_FACTOR))
    assert d.handler.events()[2:] == [("release", 1)]
    assert api.holder(1) == ""
    assert not any(t.name == "cbop-shard-membership" for t in threading.enumerate())


def test_failing_renewals_lose_every_shard_with_the_fence_closed_first(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    d = drivers("b", 2)
    d.join()
    api.down = True
    d.advance(RENEW_DEADLINE + RETRY * 2)
    assert sorted(d.handler.events()[2:]) == [("lost", 0), ("lost", 1)]
    assert d.coordinator.held() == []
    assert sorted(d.metrics.transitions[2:]) == [(0, ShardEvent.LOST), (1, ShardEvent.LOST)]
    # Nothing was released: the Leases still name this replica, until they expire.
    api.down = False
    assert api.holder(0) == "b"
    assert api.holder(1) == "b"


def test_a_shard_lost_after_a_delivery_is_still_reported_lost(
    api: FakeGroupApi, drivers: Callable[..., Driver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the sharding e2e test (a replica resumed after SIGSTOP): its elector
    stopped leading between a tick's delivery of elector changes and the tick's
    decision; the shard was let go as if never acquired, so its scope (workers,
    informers) was never told it was lost. Here each elector's ``ended`` flag is
    delayed by three retry periods, so a tick decides inside that window."""

    def with_late_stop(*args: Any, **kwargs: Any) -> Any:
        stopped, clock = kwargs["on_stopped_leading"], kwargs["clock"]

        def late() -> None:
            cond = threading.Condition()
            with cond:
                wait_for(clock, cond, lambda: False, 3 * RETRY)
            stopped()

        return LeaderElector(*args, **{**kwargs, "on_stopped_leading": late})

    monkeypatch.setattr("cbop.sharding.coordinator.LeaderElector", with_late_stop)
    d = drivers("b", 2)
    d.join()
    assert sorted(d.handler.events()) == [("acquired", 0), ("acquired", 1)]
    api.member("a")
    api.shard(0, "a")  # taken over while "b" was paused
    d.advance(RETRY * 5)
    assert d.handler.events()[2:] == [("lost", 0)]
    assert [shard.index for shard in d.coordinator.held()] == [1]
    assert (0, ShardEvent.LOST) in d.metrics.transitions
    api.member("a")
    api.shard(0, "a")
    d.advance(RETRY * 3)  # the late flag arrives: reported once, not again
    assert d.handler.events()[2:] == [("lost", 0)]
    # Stop: the released shard's late flag waits on the fake clock too.
    d.stop.set()
    give_up = time.monotonic() + PATIENCE  # real seconds; guards a hung test only
    while d.thread.is_alive():
        assert time.monotonic() < give_up
        d.clock.step(RETRY)
        d.thread.join(0.05)
    assert d.handler.events()[2:] == [("lost", 0), ("release", 1)]


def test_stop_releases_every_shard_highest_first_then_leaves(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    d = drivers("b", 3)
    d.join()
    d.finish()
    assert d.handler.events()[3:] == [("release", 2), ("release", 1), ("release", 0)]
    assert [api.holder(i) for i in range(3)] == ["", "", ""]
    assert api.lease(member_lease_name(GROUP, "b")) is None
    assert d.metrics.held[-1] == 0


def test_a_dead_members_shard_is_taken_when_its_lease_expires_locally(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    """Taken one lease duration after it was first seen, not two (the new elector does
    not start its own expiry wait from scratch)."""
    api.member("dead")
    api.shard(0, "dead")
    d = drivers("b", 1)
    d.start()  # first seen at START; "dead" never renews again
    d.advance(LEASE_DURATION - 0.5)
    assert d.handler.events() == []
    assert api.holder(0) == "dead"
    d.advance(1.0)
    assert d.handler.events() == [("acquired", 0)]
    ((_, _, at),) = d.handler.calls
    assert START + LEASE_DURATION <= at < START + LEASE_DURATION + 0.5
    assert api.holder(0) == "b"


def test_metadata_writes_to_a_dead_members_leases_keep_nothing_alive(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    """Shard membership judges a Lease as the elector does: a label written to a dead
    member's Leases (a new resourceVersion, the same record) restarts no expiry clock,
    so its shard is taken one lease duration after its record last changed."""
    api.member("dead")
    api.shard(0, "dead")
    d = drivers("b", 1)
    d.start()
    for i in range(10):  # someone labels the dead member's Leases every 2.5 s
        d.advance(RETRY * 1.25)
        for name in (member_lease_name(GROUP, "dead"), shard_lease_name(GROUP, 0)):
            lease = api.tracker.get(LEASES, NS, name)
            lease["metadata"]["labels"] = {**lease["metadata"]["labels"], "touched": str(i)}
            api.tracker.put(LEASES, lease)
        if d.handler.events():
            break
    assert d.handler.events() == [("acquired", 0)]
    ((_, _, at),) = d.handler.calls
    assert at < START + LEASE_DURATION + RETRY * 1.5
    assert api.holder(0) == "b"


def test_a_member_whose_membership_expired_keeps_its_valid_shard(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    """Fencing is by the shard Lease: a valid shard Lease is never taken over."""
    api.member("a")
    api.shard(0, "a")
    d = drivers("b", 1)
    d.start()
    for _ in range(12):  # "a" renews its shard but not its membership
        d.advance(RETRY * 1.5)
        api.shard(0, "a")
    assert d.clock.now() - START > LEASE_DURATION
    assert d.handler.events() == []
    assert api.holder(0) == "a"


def test_an_elector_trying_for_a_shard_another_member_took_is_stopped(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    """Lowest free first: both go for shard 0; "a" wins it, so "b" drops it for 1."""
    api.member("a")
    # An unlabelled Lease, as an elector creates it, taken by "a" just before "b" labels it.
    api.before_create[shard_lease_name(GROUP, 0)] = lambda: api.put(
        shard_lease_name(GROUP, 0), **_record("a")
    )
    d = drivers("b", 2)
    d.join()
    assert d.handler.events() == []  # its elector for shard 0 waits for "a"'s Lease
    lease = api.lease(shard_lease_name(GROUP, 0))
    assert lease is not None
    assert lease["metadata"]["labels"] == {GROUP_LABEL: GROUP, ROLE_LABEL: SHARD_ROLE}
    api.member("a")
    d.advance(RETRY * 1.5)
    assert d.handler.events() == [("acquired", 1)]
    # The dropped elector's thread ends on its own once told to stop.
    for thread in threading.enumerate():
        if thread.name == "cbop-shard-elector-0":
            thread.join(PATIENCE)
    assert not any(t.name == "cbop-shard-elector-0" for t in threading.enumerate())
    assert api.holder(0) == "a"


def test_more_replicas_than_shards_the_extra_waits(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    """One shard, two members: "b" ranks second and targets 0, so it leaves even a free
    shard alone, until "a" stops renewing its membership."""
    api.member("a")
    d = drivers("b", 1)
    d.start()
    d.advance(LEASE_DURATION - 1)
    assert d.handler.events() == []
    assert not any(t.name.startswith("cbop-shard-elector-") for t in threading.enumerate())
    assert api.lease(shard_lease_name(GROUP, 0)) is None
    d.advance(RETRY * 2)
    assert d.handler.events() == [("acquired", 0)]


def test_a_newcomer_with_another_shard_count_waits_for_the_older_member(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    """Shard Leases of different counts do not exclude each other: the newcomer holds
    nothing (not even shard 2, which no Lease guards) until the incumbent has left."""
    api.member("a", shards=2, created=0)
    api.shard(0, "a")
    api.shard(1, "a")
    d = drivers("b", 3)
    d.join()
    for _ in range(12):  # "a" keeps renewing, well past a lease duration
        d.advance(RETRY * 1.5)
        api.member("a", shards=2, created=0)
        api.shard(0, "a")
        api.shard(1, "a")
    assert d.handler.events() == []
    assert api.lease(shard_lease_name(GROUP, 2)) is None
    own = api.lease(member_lease_name(GROUP, "b"))
    assert own is not None
    assert own["metadata"]["annotations"] == {
        SHARDS_ANNOTATION: "3",
        JOINED_ANNOTATION: own["metadata"]["creationTimestamp"],
    }
    # "a" stops: it releases its shards and deletes its membership Lease.
    api.put(shard_lease_name(GROUP, 0), **{**_record(""), "leaseDurationSeconds": 1})
    api.put(shard_lease_name(GROUP, 1), **{**_record(""), "leaseDurationSeconds": 1})
    api.leave("a")
    d.advance(RETRY * 1.5)
    assert sorted(d.handler.events()) == [("acquired", 0), ("acquired", 1), ("acquired", 2)]


def test_a_holder_lets_every_shard_go_when_an_older_member_counts_differently(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    d = drivers("b", 3)
    d.join()
    assert [s.index for s in d.coordinator.held()] == [0, 1, 2]
    api.member("a", shards=2, created=0)  # older than "b"'s Lease (created at 101)
    d.advance(RETRY * 1.5)
    assert d.handler.events()[3:] == [("release", 2), ("release", 1), ("release", 0)]
    assert [api.holder(i) for i in range(3)] == ["", "", ""]
    assert d.coordinator.held() == []
    assert d.metrics.held[-1] == 0
    d.advance(RETRY * 1.5 * 3)
    api.member("a", shards=2, created=0)
    d.advance(RETRY * 1.5)
    assert len(d.handler.events()) == 6  # nothing taken again while "a" lives


def test_an_older_member_ignores_a_newcomer_with_another_shard_count(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    """Counted as a member, "c" would rank after "b" and make it release a shard."""
    d = drivers("b", 3)
    d.join()
    for _ in range(5):
        api.member("c", shards=2, created=3600)
        d.advance(RETRY * 1.5)
    assert sorted(d.handler.events()) == [("acquired", 0), ("acquired", 1), ("acquired", 2)]


def test_seniority_is_the_time_joined_not_the_lease_s_creation(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    """ "b" joined before "a" and later had its membership Lease recreated: "a" yields."""
    d = drivers("a", 2)
    d.join()
    assert [s.index for s in d.coordinator.held()] == [0, 1]
    api.member("b", shards=3, created=3600, joined=50)
    d.advance(RETRY * 1.5)
    assert d.handler.events()[2:] == [("release", 1), ("release", 0)]
    assert d.coordinator.held() == []


def test_a_held_single_leader_lease_keeps_the_group_from_taking_shards(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    """A ``--shards 1`` replica of the same id holds the Lease named after the group."""
    api.put(GROUP, **_record("solo"))
    d = drivers("b", 2)
    d.join()
    d.advance(RETRY * 1.5 * 3)
    api.put(GROUP, **_record("solo"))  # renewed
    d.advance(RETRY * 1.5)
    assert d.handler.events() == []
    api.put(GROUP, **{**_record(""), "leaseDurationSeconds": 1})  # released on stop
    d.advance(RETRY * 1.5)
    assert sorted(d.handler.events()) == [("acquired", 0), ("acquired", 1)]


def test_the_single_leaders_check_sees_a_held_shard_zero_by_the_local_clock(
    api: FakeGroupApi,
) -> None:
    clock = FakeClock(START)
    check = ShardedGroupCheck(
        api,
        group=GROUP,
        namespace=NS,
        request_timeout=1.0,
        clock=clock,
    )
    assert check() is None  # no sharded group
    api.shard(0, "x")
    reason = check()
    assert reason is not None
    assert f"{shard_lease_name(GROUP, 0)} by x" in reason
    clock.step(LEASE_DURATION - 1)
    assert check() is not None
    clock.step(2)
    assert check() is None  # unrenewed for a lease duration: its holder is gone
    api.shard(0, "x")
    assert check() is not None
    api.put(shard_lease_name(GROUP, 0), **_record(""))
    assert check() is None  # released
    # Shard 0 free (its holder stopped) while the group still holds shard 2.
    api.shard(1, "")
    api.shard(2, "y")
    reason = check()
    assert reason is not None
    assert f"{shard_lease_name(GROUP, 2)} by y" in reason
    api.shard(0, "x")
    api.down = True
    assert check() is None  # cannot tell: the Lease's own election decides


def test_a_member_yielding_to_an_older_count_is_not_given_shards(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    """ "c" (2 shards) yields to the older "b" (3 shards), so the incumbent "a" (2 shards,
    oldest) must not count "c" and hand it a shard nobody would then serve."""
    d = drivers("a", 2)
    d.join()
    assert [s.index for s in d.coordinator.held()] == [0, 1]
    for _ in range(4):
        api.member("b", shards=3, created=3600)
        api.member("c", shards=2, created=7200)
        d.advance(RETRY * 1.5)
    assert [s.index for s in d.coordinator.held()] == [0, 1]
    assert sorted(d.handler.events()) == [("acquired", 0), ("acquired", 1)]
    api.leave("b")
    d.advance(LEASE_DURATION)
    api.member("c", shards=2, created=7200)
    d.advance(RETRY * 1.5)
    assert [s.index for s in d.coordinator.held()] == [0]  # "c" counts again: one each


def test_a_recreated_membership_lease_keeps_its_seniority(
    api: FakeGroupApi, drivers: Callable[..., Driver]
) -> None:
    d = drivers("b", 3)
    d.join()
    own = api.lease(member_lease_name(GROUP, "b"))
    assert own is not None
    joined = own["metadata"]["creationTimestamp"]
    api.leave("b")  # deleted by someone; "b" recreates it at its next renewal
    d.advance(RETRY * 1.5)
    again = api.lease(member_lease_name(GROUP, "b"))
    assert again is not None
    assert again["metadata"]["creationTimestamp"] > joined
    assert again["metadata"]["annotations"][JOINED_ANNOTATION] == joined
    # Created after "b" joined, before its Lease was recreated: younger than "b".
    api.member("a", shards=2, created=_second(joined) + 1)
    d.advance(RETRY * 1.5 * 3)
    assert sorted(d.handler.events()) == [("acquired", 0), ("acquired", 1), ("acquired", 2)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shards": 0}, "at least 1"),
        ({"identity": ""}, "identity"),
        ({"group": ""}, "group"),
        ({"namespace": ""}, "namespace"),
        ({"lease_duration": 10.0}, "lease duration > renew deadline"),
        ({"retry_period": 9.0}, "retry period"),
        ({"lease_duration": 0.9, "renew_deadline": 0.5, "retry_period": 0.1}, ">= 1s"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {
        "group": GROUP,
        "namespace": NS,
        "identity": "a",
        "shards": 3,
        "lease_duration": LEASE_DURATION,
        "renew_deadline": RENEW_DEADLINE,
        "retry_period": RETRY,
        "handler": Handler(FakeGroupApi(), FakeClock(), "a"),
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        ShardCoordinator(FakeGroupApi(), **args)


@pytest.mark.parametrize(
    ("identity", "name"),
    [
        ("replica-a", "cbop-member-replica-a"),
        ("cbop-7d9f.node-1", "cbop-member-cbop-7d9f.node-1"),
        ("Pod_1", "cbop-member-pod-1-"),
        ("host:uuid", "cbop-member-host-uuid-"),
    ],
)
def test_member_lease_names_are_valid_and_unique(identity: str, name: str) -> None:
    got = member_lease_name(GROUP, identity)
    assert got.startswith(name)
    assert len(got) <= 253
    if name.endswith("-"):  # sanitised: a hash keeps it apart from look-alikes
        assert member_lease_name(GROUP, identity.swapcase()) != got


def test_long_identities_are_cut_to_a_valid_name() -> None:
    got = member_lease_name(GROUP, "x" * 300)
    assert len(got) == 253
    assert got != member_lease_name(GROUP, "x" * 299)


def test_prometheus_shard_metrics() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusShardMetrics(registry, shards=2)
    assert (
        registry.get_sample_value("cbop_shard_transitions_total", {"shard": "1", "event": "lost"})
        == 0
    )
    metrics.set_held(2)
    metrics.transition(1, ShardEvent.ACQUIRED)
    metrics.transition(1, ShardEvent.ACQUIRED)
    assert registry.get_sample_value("cbop_shards_held") == 2
    assert (
        registry.get_sample_value(
            "cbop_shard_transitions_total", {"shard": "1", "event": "acquired"}
        )
        == 2
    )
