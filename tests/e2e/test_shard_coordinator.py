"""ShardCoordinator on the real control plane: balance, joins, handover, takeover, fencing.

Several coordinators run in this process, each with its own KubeClient and thread and
a recording :class:`ShardHandler`. Every handler call is logged with the monotonic
time; a poller also logs the first moment each held shard's fence reads False. From
that log the tests check that no shard was ever held by two handlers at overlapping
times: a holding starts at ``acquired`` and ends at ``release`` returning, ``lost``, or
the fence closing, whichever comes first.

A crash is simulated by cutting a TCP proxy between one coordinator and the API
server: its Lease renewals fail, nothing is released, and the others must take its
shards over once its Leases expire; when the proxy heals, it rejoins and is handed a
shard back. Handover and takeover times are written to
``shard-coordinator.json`` under pytest's base temporary directory.

Timings are short (lease 4 s, renew deadline 3 s, retry 1 s).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cbop.clock import RealClock
from cbop.kube import LEASES, KubeClient
from cbop.leaderelection import LeaderElector
from cbop.sharding import (
    GROUP_LABEL,
    MEMBER_ROLE,
    ROLE_LABEL,
    SHARD_ROLE,
    ShardCoordinator,
    ShardedGroupCheck,
    member_lease_name,
    shard_lease_name,
)
from cbop.shardrange import ShardRange
from cbop.stop import StopSignal
from cbop_testing.envtest import ControlPlane

from .harness import wait_for
from .netproxy import TcpProxy, proxied_kubeconfig

LEASE_DURATION = 4.0
RENEW_DEADLINE = 3.0
RETRY_PERIOD = 1.0
#: Generous bound on every wait (the machine is shared).
WAIT = 60.0
FIGURES: dict[str, list[float]] = {}


@dataclass(frozen=True)
class Event:
    at: float
    replica: str
    what: str  # acquired | release-begun | released | lost | fence-closed
    shard: int


@dataclass
class Log:
    events: list[Event] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, replica: str, what: str, shard: int) -> Event:
        event = Event(time.monotonic(), replica, what, shard)
        with self.lock:
            self.events.append(event)
        return event

    def of(self, replica: str | None = None, what: str | None = None) -> list[Event]:
        with self.lock:
            return [
                e
                for e in self.events
                if (replica is None or e.replica == replica) and (what is None or e.what == what)
            ]

    def holdings(self, end: float) -> list[tuple[str, int, float, float]]:
        """(replica, shard, start, end) of every holding; open ones end at ``end``."""
        open_: dict[tuple[str, int], float] = {}
        done: list[tuple[str, int, float, float]] = []
        with self.lock:
            events = sorted(self.events, key=lambda e: e.at)
        for e in events:
            key = (e.replica, e.shard)
            if e.what == "acquired":
                assert key not in open_, f"{e.replica} acquired shard {e.shard} twice"
                open_[key] = e.at
            elif e.what in ("released", "lost", "fence-closed") and key in open_:
                done.append((e.replica, e.shard, open_.pop(key), e.at))
        done.extend((r, s, start, end) for (r, s), start in open_.items())
        return done

    def assert_no_overlap(self) -> None:
        holdings = self.holdings(time.monotonic())
        for i, (r1, s1, a1, b1) in enumerate(holdings):
            for r2, s2, a2, b2 in holdings[i + 1 :]:
                if s1 == s2 and r1 != r2:
                    assert b1 <= a2 or b2 <= a1, (
                        f"shard {s1} held by {r1} [{a1:.3f}, {b1:.3f}] and by {r2} "
                        f"[{a2:.3f}, {b2:.3f}] at overlapping times"
                    )


class Recorder:
    """A ShardHandler that logs every call; ``release`` drains for a short while and
    checks that the shard's fence stays open until it returns."""

    def __init__(self, replica: str, log: Log, drain: float = 0.3) -> None:
        self.replica = replica
        self.log = log
        self.drain = drain
        self.fences: dict[int, Callable[[], bool]] = {}
        #: Shards between a logged ``acquired`` and a logged ``released``/``lost``: the
        #: coordinator counts a shard as held from just before it calls ``acquired``,
        #: so waits on the coordinator alone can see a shard before its event is logged.
        self.holding: set[int] = set()
        self.fence_open_while_draining = True
        self._lock = threading.Lock()

    def acquired(self, shard: ShardRange, fence: Callable[[], bool]) -> None:
        assert fence(), "acquired with a closed fence"
        self.log.add(self.replica, "acquired", shard.index)
        with self._lock:
            self.fences[shard.index] = fence
            self.holding.add(shard.index)

    def release(self, shard: ShardRange) -> None:
        self.log.add(self.replica, "release-begun", shard.index)
        time.sleep(self.drain)  # in-flight work finishing
        with self._lock:
            fence = self.fences.pop(shard.index)
        if not fence():
            self.fence_open_while_draining = False
        self.log.add(self.replica, "released", shard.index)
        with self._lock:
            self.holding.discard(shard.index)

    def lost(self, shard: ShardRange) -> None:
        with self._lock:
            self.fences.pop(shard.index, None)
        self.log.add(self.replica, "lost", shard.index)
        with self._lock:
            self.holding.discard(shard.index)

    def holds(self, index: int) -> bool:
        """Whether ``acquired`` for ``index`` has been logged and no end of it yet."""
        with self._lock:
            return index in self.holding

    def poll_fences(self) -> None:
        """Log ``fence-closed`` for every held shard whose fence reads False now."""
        with self._lock:
            closed = [i for i, fence in self.fences.items() if not fence()]
            for index in closed:
                del self.fences[index]
        for index in closed:
            self.log.add(self.replica, "fence-closed", index)


@dataclass
class Replica:
    name: str
    coordinator: ShardCoordinator
    recorder: Recorder
    client: KubeClient
    stop: threading.Event
    thread: threading.Thread

    def held(self) -> list[int]:
        """Shards the coordinator holds whose ``acquired`` the recorder has logged."""
        return [s.index for s in self.coordinator.held() if self.recorder.holds(s.index)]

    def shut_down(self) -> None:
        self.stop.set()
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), f"{self.name} did not stop"


class Group:
    """Coordinators of one group in one namespace, with a shared event log."""

    def __init__(self, kubeconfig: str, namespace: str, shards: int) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.shards = shards
        self.name = "cbop-test"
        self.log = Log()
        self.replicas: dict[str, Replica] = {}
        self._polling = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._polling.wait(0.02):
            for replica in list(self.replicas.values()):
                replica.recorder.poll_fences()

    def start(self, name: str, kubeconfig: str | None = None) -> Replica:
        client = KubeClient.from_config(kubeconfig=kubeconfig or self.kubeconfig, qps=0)
        recorder = Recorder(name, self.log)
        coordinator = ShardCoordinator(
            client,
            group=self.name,
            namespace=self.namespace,
            identity=name,
            shards=self.shards,
            lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY_PERIOD,
            handler=recorder,
        )
        stop = StopSignal()
        thread = threading.Thread(target=coordinator.run, args=(stop,), name=name, daemon=True)
        replica = Replica(name, coordinator, recorder, client, stop, thread)
        self.replicas[name] = replica
        thread.start()
        return replica

    def holders(self) -> dict[str, list[int]]:
        return {name: r.held() for name, r in self.replicas.items() if r.thread.is_alive()}

    def wait_held(self, expected: dict[str, int]) -> dict[str, list[int]]:
        """Wait until each named replica holds that many shards, all shards held once."""

        def balanced() -> dict[str, list[int]] | None:
            holders = self.holders()
            counts = {name: len(holders.get(name, [])) for name in expected}
            every = sorted(i for name in expected for i in holders.get(name, []))
            return holders if counts == expected and every == list(range(self.shards)) else None

        held: dict[str, list[int]] = wait_for(
            balanced, timeout=WAIT, message=f"shards held as {expected}"
        )
        return held

    def close(self) -> None:
        for replica in self.replicas.values():
            replica.stop.set()
        for replica in self.replicas.values():
            replica.thread.join(WAIT)
            replica.client.close()
        self._polling.set()
        self._poller.join(5)

    def leases(self) -> dict[str, dict[str, str]]:
        with KubeClient.from_config(kubeconfig=self.kubeconfig, qps=0) as admin:
            listed = admin.list(LEASES, self.namespace, label_selector=f"{GROUP_LABEL}={self.name}")
        return {
            lease["metadata"]["name"]: {
                "role": lease["metadata"]["labels"].get(ROLE_LABEL, ""),
                "holder": (lease.get("spec") or {}).get("holderIdentity") or "",
            }
            for lease in listed["items"]
        }


@pytest.fixture
def group_factory(kubeconfig: str, namespace: str) -> Iterator[Callable[[int], Group]]:
    groups: list[Group] = []

    def make(shards: int) -> Group:
        made = Group(kubeconfig, namespace, shards)
        groups.append(made)
        return made

    yield make
    for made in groups:
        made.close()


@pytest.fixture(scope="module", autouse=True)
def _figures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    yield
    path = tmp_path_factory.getbasetemp() / "shard-coordinator.json"
    path.write_text(
        json.dumps({k: [round(v, 3) for v in vs] for k, vs in FIGURES.items()}, indent=2)
    )


def _first(events: list[Event], after: float, shard: int | None = None) -> Event:
    found = [e for e in events if e.at >= after and (shard is None or e.shard == shard)]
    assert found, f"no event after {after} for shard {shard}"
    return min(found, key=lambda e: e.at)


def test_three_replicas_balance_a_fourth_waits_and_shards_move_on_stop_and_crash(
    group_factory: Callable[[int], Group], control_plane: ControlPlane, tmp_path: Path
) -> None:
    group = group_factory(3)
    began = time.monotonic()
    group.start("replica-a")
    api_port = int(control_plane.api_url.rsplit(":", 1)[1])
    proxy = TcpProxy(("127.0.0.1", api_port))
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(proxy.close)
        proxied = proxied_kubeconfig(
            control_plane.kubeconfig_path, proxy.port, tmp_path / "proxied-kubeconfig"
        )
        group.start("replica-b", kubeconfig=str(proxied))
        group.start("replica-c")

        # Three replicas over three shards: one each.
        held = group.wait_held({"replica-a": 1, "replica-b": 1, "replica-c": 1})
        FIGURES.setdefault("balance_3_of_3_s", []).append(time.monotonic() - began)
        FIGURES.setdefault("releases_while_balancing", []).append(
            len(group.log.of(what="released"))
        )
        leases = group.leases()
        for i in range(3):
            assert leases[shard_lease_name(group.name, i)]["role"] == SHARD_ROLE
        for name in ("replica-a", "replica-b", "replica-c"):
            member = leases[member_lease_name(group.name, name)]
            assert member == {"role": MEMBER_ROLE, "holder": name}

        # A fourth replica that sorts last targets 0 shards: nothing moves.
        transitions = len(group.log.events)
        d = group.start("replica-d")
        wait_for(
            lambda: member_lease_name(group.name, "replica-d") in group.leases(),
            timeout=WAIT,
            message="replica-d's membership lease",
        )
        for _ in range(5):  # five ticks of every replica
            time.sleep(RETRY_PERIOD * 1.5)
            assert group.holders() == {**held, "replica-d": []}
        assert len(group.log.events) == transitions, group.log.events[transitions:]

        # replica-c stops gracefully: it drains, releases, and replica-d (now ranked
        # third of three) takes its shard, strictly after the release.
        (c_shard,) = held["replica-c"]
        stopped_at = time.monotonic()
        group.replicas["replica-c"].shut_down()
        released = _first(group.log.of("replica-c", "released"), stopped_at, c_shard)
        group.wait_held({"replica-a": 1, "replica-b": 1, "replica-d": 1})
        taken = _first(group.log.of("replica-d", "acquired"), stopped_at, c_shard)
        assert released.at <= taken.at
        assert group.replicas["replica-c"].recorder.fence_open_while_draining
        FIGURES.setdefault("graceful_handover_s", []).append(taken.at - released.at)
        FIGURES.setdefault("graceful_stop_to_acquired_s", []).append(taken.at - stopped_at)
        assert member_lease_name(group.name, "replica-c") not in group.leases()

        # replica-b "crashes": cut off from the API server, it releases nothing; its
        # shard is taken over once its Lease expires, by replica-a (rank 0 of the two
        # live members, target 2).
        (b_shard,) = held["replica-b"]
        cut_at = time.monotonic()
        proxy.cut()
        assert d is group.replicas["replica-d"]
        wait_for(
            lambda: (
                sorted(group.replicas["replica-a"].held()) == sorted([*held["replica-a"], b_shard])
            ),
            timeout=WAIT,
            message="replica-a takes replica-b's shard over",
        )
        taken = _first(group.log.of("replica-a", "acquired"), cut_at, b_shard)
        FIGURES.setdefault("crash_takeover_s", []).append(taken.at - cut_at)
        assert not group.log.of("replica-b", "released")
        assert group.replicas["replica-b"].held() == []
        assert group.replicas["replica-d"].held() == held["replica-c"]

        group.log.assert_no_overlap()

        # The partition heals: replica-b is live again and gets one shard back, which
        # replica-a, now above target, hands over gracefully.
        healed_at = time.monotonic()
        proxy.heal()
        group.wait_held({"replica-a": 1, "replica-b": 1, "replica-d": 1})
        handed = _first(group.log.of("replica-a", "released"), healed_at)
        back = _first(group.log.of("replica-b", "acquired"), healed_at)
        assert handed.shard == back.shard
        assert handed.at <= back.at
        FIGURES.setdefault("graceful_handover_s", []).append(back.at - handed.at)
        group.replicas["replica-b"].shut_down()
    group.log.assert_no_overlap()


def test_two_replicas_over_three_shards_then_one_takes_all(
    group_factory: Callable[[int], Group],
) -> None:
    group = group_factory(3)
    a = group.start("replica-a")
    b = group.start("replica-b")
    held = group.wait_held({"replica-a": 2, "replica-b": 1})
    assert held["replica-a"] == sorted(held["replica-a"])

    # replica-a leaves gracefully: replica-b, alone, takes all three, each after the
    # release of it.
    stopped_at = time.monotonic()
    a.shut_down()
    group.wait_held({"replica-b": 3})
    for shard in held["replica-a"]:
        released = _first(group.log.of("replica-a", "released"), stopped_at, shard)
        taken = _first(group.log.of("replica-b", "acquired"), stopped_at, shard)
        assert released.at <= taken.at
        FIGURES.setdefault("graceful_handover_s", []).append(taken.at - released.at)
    assert b.held() == [0, 1, 2]
    assert sorted(group.leases()) == sorted(
        [member_lease_name(group.name, "replica-b")]
        + [shard_lease_name(group.name, i) for i in range(3)]
    )
    group.log.assert_no_overlap()


def test_a_new_shard_count_waits_for_the_old_one_and_a_single_leader_for_both(
    group_factory: Callable[[int], Group], kubeconfig: str, namespace: str
) -> None:
    """Rolling changes of --shards: 2 -> 3, the newcomer holds nothing until the
    incumbent has left; then 3 -> 1, a single leader of the same id waits likewise."""
    old = group_factory(2)
    a = old.start("replica-a")
    old.wait_held({"replica-a": 2})
    new = group_factory(3)
    b = new.start("replica-b")
    # Well past a lease duration: the newcomer takes nothing, not even shard 2.
    time.sleep(LEASE_DURATION + 3 * RETRY_PERIOD)
    assert b.held() == []
    assert new.log.of("replica-b", "acquired") == []
    assert a.held() == [0, 1]
    left_at = time.monotonic()
    a.shut_down()
    new.wait_held({"replica-b": 3})
    last_release = max(e.at for e in old.log.of("replica-a", "released"))
    first_acquire = min(e.at for e in new.log.of("replica-b", "acquired"))
    assert left_at <= last_release <= first_acquire
    FIGURES.setdefault("shard_count_change_gap_s", []).append(first_acquire - last_release)

    led_at: list[float] = []
    single_stop = StopSignal()
    with KubeClient.from_config(kubeconfig=kubeconfig, qps=0) as client:
        single = LeaderElector(
            client,
            lease_name=old.name,
            namespace=namespace,
            identity="replica-solo",
            lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY_PERIOD,
            on_started_leading=lambda: led_at.append(time.monotonic()),
            on_stopped_leading=lambda: None,
            may_acquire=ShardedGroupCheck(
                client,
                group=old.name,
                namespace=namespace,
                request_timeout=RENEW_DEADLINE / 2,
                clock=RealClock(),
            ),
        )
        thread = threading.Thread(target=single.run, args=(single_stop,), daemon=True)
        thread.start()
        try:
            time.sleep(LEASE_DURATION + 3 * RETRY_PERIOD)
            assert led_at == []
            assert b.held() == [0, 1, 2]
            b.shut_down()
            wait_for(lambda: led_at, timeout=WAIT, message="the single leader leading")
            assert max(e.at for e in new.log.of("replica-b", "released")) <= led_at[0]
        finally:
            single_stop.set()
            thread.join(WAIT)
    old.log.assert_no_overlap()
    new.log.assert_no_overlap()
