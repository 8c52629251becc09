"""The sharded runtime manager: one scope (informers, fenced client, controllers) per shard.

A fake coordinator drives the manager's ``ShardHandler`` methods the way
``cbop.sharding.ShardCoordinator`` does; real informers, queues and workers run against
a fake API in which shard 0 is namespace ``a`` and shard 1 namespace ``b``. No server.
"""

from __future__ import annotations

import gc
import threading
import urllib.error
import urllib.request
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cbop.configbundle import Action, Result
from cbop.informers import SharedInformerFactory
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS
from cbop.manager import Manager as CbopManager
from cbop.manager import Options
from cbop.runtime import (
    Builder,
    LeaderElection,
    Manager,
    Scope,
    ScopeSpec,
    ScopeState,
    Sharding,
)
from cbop.sharding import ShardHandler
from cbop.shardrange import ShardRange
from cbop_testing.fakekube import FakeKube, fail
from cbop_testing.objects import ev, named_bundle
from cbop_testing.waiting import wait_until

#: The namespace each shard of two holds in these tests.
NAMESPACE_OF = {0: "a", 1: "b"}
#: Options that bind no port.
NO_ENDPOINTS: dict[str, Any] = {"metrics_bind_address": "0", "health_probe_bind_address": "0"}


class _Coordinator:
    """Calls the handler as the real coordinator does; the test says when."""

    def __init__(self, handler: ShardHandler) -> None:
        self.handler = handler
        self.fences = {0: True, 1: True}
        self.held: list[int] = []
        self.running = threading.Event()

    def acquire(self, index: int) -> None:
        self.held.append(index)
        self.handler.acquired(ShardRange.of(index, 2), lambda: self.fences[index])

    def run(self, stop: threading.Event) -> None:
        self.running.set()
        stop.wait()
        for index in list(self.held):
            self.handler.release(ShardRange.of(index, 2))
            self.held.remove(index)


class _Gated:
    """A reconciler that records keys and, for keys in ``hold``, waits for ``gate``.

    With ``write``, each reconcile ends with a ConfigMap create through the scope's
    fenced client (only with the fence closed here: the client has no server behind it,
    and the fence is checked before anything is sent).
    """

    def __init__(self, scope: Scope, log: list[str], *, write: bool = False) -> None:
        self.scope = scope
        self.log = log
        self.write = write
        self.hold: set[str] = set()
        self.gate = threading.Event()
        self.started = threading.Event()
        self.keys: list[str] = []

    def reconcile(self, key: str) -> Result:
        self.keys.append(key)
        if key in self.hold:
            self.started.set()
            self.gate.wait(10)
            self.log.append(f"finished {key}")
        if self.write:
            ns = key.split("/", maxsplit=1)[0]
            self.scope.client.create(CONFIGMAPS, ns, {"metadata": {"name": "x"}})
        return Result(key, Action.NONE)


class _Harness:
    def __init__(
        self, api: FakeKube, *, write_in: tuple[int, ...] = (), probes: bool = False
    ) -> None:
        self.api = api
        self.log: list[str] = []
        self.reconcilers: dict[str, _Gated] = {}
        self.coordinator: _Coordinator | None = None

        def informers(shard: ShardRange) -> SharedInformerFactory:
            return SharedInformerFactory(
                api, namespaces=[NAMESPACE_OF[shard.index]], resync_period=0
            )

        def coordinator(handler: ShardHandler) -> _Coordinator:
            self.coordinator = _Coordinator(handler)
            return self.coordinator

        self.manager = Manager(
            api,
            informers=informers,
            identity="test",
            leader_election=LeaderElection(lease_name="cbop", namespace="ns"),
            shutdown_timeout=10.0,
            sharding=Sharding(shards=2, coordinator=coordinator),
        )

        def setup(scope: Scope) -> None:
            assert isinstance(scope, Scope)
            reconciler = _Gated(scope, self.log, write=scope.index in write_in)
            self.reconcilers[f"shard-{scope.index}"] = reconciler
            Builder(scope, "bundles").for_(CONFIGBUNDLES).with_options(workers=2).complete(
                reconciler
            )

        self.manager.add_setup(setup)
        if probes:
            self.manager.bind_probes(("127.0.0.1", 0))
        self.code: list[int] = []
        self.thread = threading.Thread(target=lambda: self.code.append(self.manager.run()))
        self.thread.start()
        wait_until(lambda: self.coordinator is not None and self.coordinator.running.is_set())

    @property
    def coord(self) -> _Coordinator:
        assert self.coordinator is not None
        return self.coordinator

    def scope(self, index: int) -> Scope:
        (found,) = [s for s in self.manager.held_scopes() if s.index == index]
        return found

    def release(self, index: int) -> None:
        """Release the shard as the coordinator does (through its shard handler)."""
        self.coord.handler.release(ShardRange.of(index, 2))

    def lose(self, index: int) -> None:
        """Lose the shard as the coordinator does."""
        self.coord.handler.lost(ShardRange.of(index, 2))

    def stop(self) -> int:
        self.manager.stop_event.set()
        self.thread.join(30)
        assert not self.thread.is_alive()
        (code,) = self.code
        return code


@pytest.fixture
def api() -> FakeKube:
    api = FakeKube()
    for name, ns in (("one", "a"), ("two", "a"), ("three", "b")):
        api.tracker.add(CONFIGBUNDLES, named_bundle(name, ns))
    return api


@pytest.fixture
def harness(api: FakeKube) -> Iterator[_Harness]:
    made = _Harness(api)
    yield made
    if made.thread.is_alive():
        made.stop()


def test_each_acquired_shard_runs_its_own_controllers_on_its_own_objects(
    harness: _Harness,
) -> None:
    manager = harness.manager
    assert manager.prepared_scopes() == [], "sharded, no scope is built before a shard"
    harness.coord.acquire(0)
    harness.coord.acquire(1)
    wait_until(lambda: all(s.synced() for s in manager.held_scopes()))
    zero, one = harness.reconcilers["shard-0"], harness.reconcilers["shard-1"]
    wait_until(lambda: sorted(zero.keys) == ["a/one", "a/two"] and one.keys == ["b/three"])
    assert list(harness.scope(0).controllers) == ["bundles-shard-0"]
    assert list(harness.scope(1).controllers) == ["bundles-shard-1"]
    assert [s.spec for s in manager.held_scopes()] == [
        ScopeSpec(ShardRange.of(0, 2), name="shard-0", restartable=True),
        ScopeSpec(ShardRange.of(1, 2), name="shard-1", restartable=True),
    ]
    assert {s.index: s.object_counts() for s in manager.held_scopes()} == {
        0: {"configbundles": 2},
        1: {"configbundles": 1},
    }
    assert manager.healthy()
    assert manager.connection_states() == {
        "configbundles/a@shard-0": True,
        "configbundles/b@shard-1": True,
    }
    # A live event reaches the shard that holds its namespace only.
    harness.api.stream("configbundles", "b").push(ev("MODIFIED", named_bundle("three", "b")))
    wait_until(lambda: one.keys == ["b/three", "b/three"])
    assert harness.stop() == 0
    assert manager.held_scopes() == []


def test_release_returns_only_after_the_in_flight_reconcile_finished(
    harness: _Harness,
) -> None:
    harness.coord.acquire(0)
    harness.coord.acquire(1)
    wait_until(lambda: "shard-0" in harness.reconcilers)
    zero = harness.reconcilers["shard-0"]
    scope = harness.scope(0)
    wait_until(lambda: len(zero.keys) == 2)
    zero.hold.add("a/one")
    harness.api.stream("configbundles", "a").push(ev("MODIFIED", named_bundle("one", "a")))
    assert zero.started.wait(10)

    def release() -> None:
        harness.release(0)
        harness.log.append("released")

    releasing = threading.Thread(target=release)
    releasing.start()
    wait_until(scope.controllers["bundles-shard-0"].queue.shutting_down)
    assert scope.state.value == "releasing"
    # Intake is stopped: a new event for the shard is not worked on.
    harness.api.stream("configbundles", "a").push(ev("MODIFIED", named_bundle("two", "a")))
    zero.gate.set()
    releasing.join(10)
    assert harness.log == ["finished a/one", "released"]
    assert scope.state is ScopeState.RELEASED
    assert zero.keys.count("a/two") == 1, "a released shard took a key after intake stopped"
    assert [s.index for s in harness.manager.held_scopes()] == [1]
    assert not any(informer.alive() for informer in scope.informers.informers)
    assert harness.stop() == 0


def test_a_lost_shard_stops_at_once_and_the_process_carries_on(harness: _Harness) -> None:
    harness.coord.acquire(0)
    harness.coord.acquire(1)
    wait_until(lambda: len(harness.reconcilers) == 2)
    zero, one = harness.reconcilers["shard-0"], harness.reconcilers["shard-1"]
    wait_until(lambda: len(zero.keys) == 2 and len(one.keys) == 1)
    lost = harness.scope(0)
    zero.hold.add("a/one")
    harness.api.stream("configbundles", "a").push(ev("MODIFIED", named_bundle("one", "a")))
    assert zero.started.wait(10)
    harness.lose(0)
    # Returned while the reconcile is still blocked: nothing was drained.
    assert harness.log == []
    assert lost.state is ScopeState.LOST
    assert lost.controllers["bundles-shard-0"].queue.shutting_down()
    zero.gate.set()
    # The other shard keeps working, and the process keeps running.
    harness.api.stream("configbundles", "b").push(ev("MODIFIED", named_bundle("three", "b")))
    wait_until(lambda: one.keys.count("b/three") == 2)
    assert not harness.manager.stop_event.is_set()
    # Acquired anew, the shard gets a fresh scope with the same controller names.
    harness.coord.acquire(0)
    wait_until(lambda: harness.reconcilers["shard-0"] is not zero)
    wait_until(lambda: sorted(harness.reconcilers["shard-0"].keys) == ["a/one", "a/two"])
    assert harness.scope(0) is not lost
    assert harness.stop() == 0


def test_a_write_through_a_closed_shard_fence_stops_only_that_shard(api: FakeKube) -> None:
    harness = _Harness(api, write_in=(0,))
    try:
        harness.coord.fences[0] = False
        harness.coord.acquire(0)
        harness.coord.acquire(1)
        wait_until(lambda: len(harness.reconcilers) == 2)
        zero = harness.reconcilers["shard-0"].scope
        assert isinstance(zero, Scope)
        wait_until(lambda: zero.state is ScopeState.LOST)
        assert zero.controllers["bundles-shard-0"].queue.shutting_down()
        assert [s.index for s in harness.manager.held_scopes()] == [1]
        assert harness.scope(1).state in (ScopeState.SYNCING, ScopeState.RUNNING)
        assert not harness.manager.stop_event.is_set()
        # The coordinator's own notice of the loss afterwards changes nothing more.
        harness.lose(0)
        assert harness.stop() == 0
    finally:
        if harness.thread.is_alive():
            harness.stop()


def test_a_shard_stopped_by_a_late_renewal_restarts_when_its_fence_reopens(
    api: FakeKube,
) -> None:
    """Seen on the real control plane under load: one renewal answered 504, the fence
    closed, a write stopped the shard, and the shard's elector renewed the Lease on
    time after all, so the coordinator never lost the shard. The shard must work again
    (not sit held by a replica that does nothing with it)."""
    harness = _Harness(api, write_in=(0,))
    try:
        harness.coord.fences[0] = False
        harness.coord.acquire(0)
        wait_until(lambda: "shard-0" in harness.reconcilers)
        first = harness.reconcilers["shard-0"].scope
        assert isinstance(first, Scope)
        wait_until(lambda: first.state is ScopeState.LOST)
        assert harness.manager.held_scopes() == []

        harness.coord.fences[0] = True  # the elector renewed: the Lease is still ours
        wait_until(lambda: [s.index for s in harness.manager.held_scopes()] == [0])
        second = harness.scope(0)
        assert second is not first
        wait_until(lambda: second.state is ScopeState.RUNNING)
        assert harness.stop() == 0
    finally:
        if harness.thread.is_alive():
            harness.stop()


def _readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz?verbose") as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_readyz_is_ready_as_a_standby_and_waits_for_every_held_shard(api: FakeKube) -> None:
    """A replica holding no shard is ready; one holding a shard whose caches have not
    synced is not, and says which shard and why."""
    silent_b = api.prepend_reactor(
        "list",
        "configbundles",
        fail(RuntimeError("the API server does not answer"), when=lambda a: a.namespace == "b"),
    )
    harness = _Harness(api, probes=True)
    try:
        probes = harness.manager.probes
        assert probes is not None
        code, body = _readyz(probes.port)
        assert (code, "[+]shards ok" in body) == (200, True), body
        harness.coord.acquire(0)
        wait_until(lambda: harness.scope(0).synced())
        assert _readyz(probes.port)[0] == 200
        harness.coord.acquire(1)
        code, body = _readyz(probes.port)
        assert code == 503
        assert "[-]shards failed: shard 1/2: informer configbundles/b" in body, body
        api.remove_reactor(silent_b)
        wait_until(lambda: _readyz(probes.port)[0] == 200)
        assert harness.stop() == 0
    finally:
        if harness.thread.is_alive():
            harness.stop()


def test_cbop_with_shards_sets_up_controllers_per_shard_only() -> None:
    """``cbop --shards 2``: no process-wide controller or informer; the shard metrics are
    registered; without leader election it is refused."""
    with pytest.raises(ValueError, match="--shards 2 needs --leader-elect"):
        CbopManager(FakeKube(), Options(shards=2, **NO_ENDPOINTS))
    registry = CollectorRegistry()
    manager = CbopManager(
        FakeKube(),
        Options(leader_elect=True, leader_election_namespace="ns", shards=2, **NO_ENDPOINTS),
        registry=registry,
    )
    assert manager.elector is None
    assert manager.prepared_scopes() == []
    names = {metric.name for metric in registry.collect()}
    assert {"cbop_shard_objects", "cbop_shards_held", "cbop_configbundles"} <= names
    assert "leader_election_master_status" not in names
    # Each shard's informers list only that shard (server-side selector); the scope
    # of every namespace sends no selector.
    factory = manager.informers(ShardRange.of(1, 2))
    assert factory.shard == ShardRange.of(1, 2)
    assert manager.informers(ShardRange.of(0, 1)).shard is None


@pytest.mark.parametrize("end", ["release", "lose"])
def test_a_shard_handed_over_or_lost_leaves_nothing_behind(harness: _Harness, end: str) -> None:
    """Its scope, controllers, queues and caches are garbage once it is gone."""
    harness.coord.acquire(0)
    wait_until(lambda: "shard-0" in harness.reconcilers)
    wait_until(lambda: harness.scope(0).synced())
    scope = weakref.ref(harness.scope(0))
    cache = weakref.ref(harness.scope(0).informers.informers[0].indexer())
    getattr(harness, end)(0)
    harness.coord.held.remove(0)
    del harness.reconcilers["shard-0"]
    # A lost shard's informers are discarded on a thread of their own: poll.
    wait_until(lambda: gc.collect() >= 0 and scope() is None and cache() is None)
    assert harness.stop() == 0
