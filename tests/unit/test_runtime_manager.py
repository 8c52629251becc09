"""The runtime manager and builder: controllers assembled on one shared informer factory.

Real informers, queues and worker threads against a fake API; the reconcilers record
the keys they get. No server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from cbop.configbundle import Action, Result
from cbop.configbundle import controller as configbundle
from cbop.informers import SharedInformerFactory
from cbop.keys import key_of
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS
from cbop.runtime import EVERYTHING, Builder, Manager, Scope, ScopeState
from cbop.runtime import manager as runtime_manager
from cbop.shardrange import ShardRange
from cbop_testing.fakekube import FakeKube, fail
from cbop_testing.objects import cm, named_bundle, owned_configmap
from cbop_testing.waiting import wait_until


class _Recording:
    """A reconciler that records every key it is handed."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self._lock = threading.Lock()

    def reconcile(self, key: str) -> Result:
        with self._lock:
            self.keys.append(key)
        return Result(key, Action.NONE)

    def seen(self) -> set[str]:
        with self._lock:
            return set(self.keys)


def lists(kube: FakeKube) -> list[tuple[str, str | None, str | None]]:
    """The lists made: (resource, namespace, label selector)."""
    return [
        (a.resource, a.namespace, a.options["label_selector"])
        for a in kube.actions
        if a.verb == "list"
    ]


class _Running:
    """A manager running on a thread; :meth:`stop` returns its exit code."""

    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self.code: list[int] = []
        self._thread = threading.Thread(target=lambda: self.code.append(manager.run()))
        self._thread.start()

    def stop(self) -> int:
        self.manager.stop_event.set()
        self._thread.join(10)
        assert not self._thread.is_alive()
        (code,) = self.code
        return code


@pytest.fixture
def api() -> FakeKube:
    return FakeKube()


def factories(api: FakeKube, *namespaces: str) -> Callable[[ShardRange], SharedInformerFactory]:
    """The manager's informers: of ``namespaces``, holding the scope's range."""
    return lambda shard: SharedInformerFactory(
        api, namespaces=namespaces, resync_period=0, shard=shard
    )


@pytest.fixture
def manager(api: FakeKube) -> Iterator[Manager]:
    made = Manager(api, informers=factories(api, "a", "b"), identity="test", shutdown_timeout=5.0)
    yield made
    made.stop_event.set()
    for scope in made.prepared_scopes():
        scope.informers.shutdown()


@pytest.fixture
def scope(manager: Manager) -> Scope:
    """The unsharded manager's one scope, built while wiring."""
    (made,) = manager.prepared_scopes()
    assert made.spec == EVERYTHING
    return made


def test_two_controllers_share_the_informers_of_one_factory(
    api: FakeKube, manager: Manager, scope: Scope
) -> None:
    """A bundle controller (for bundles, owns ConfigMaps) and a second controller (for
    ConfigMaps, watching bundles through a map function) on one manager: each resource
    is listed once per namespace, and each controller gets the keys its wiring maps to."""
    api.tracker.add(CONFIGBUNDLES, named_bundle("app", "a"))
    api.tracker.add(CONFIGMAPS, owned_configmap("app-cm", "a", "app"))
    api.tracker.add(CONFIGMAPS, cm("plain", "1", "a"))
    api.tracker.add(CONFIGMAPS, cm("other", "1", "b"))
    bundles, configmaps = _Recording(), _Recording()

    def configmaps_of_bundle(bundle: Mapping[str, Any]) -> list[str]:
        meta = bundle["metadata"]
        return [key_of(meta["namespace"], f"{meta['name']}-cm")]

    first = (
        Builder(scope, "bundles")
        .for_(CONFIGBUNDLES)
        .owns(CONFIGMAPS)
        .with_options(workers=2)
        .complete(bundles)
    )
    second = (
        Builder(scope, "configmaps")
        .for_(CONFIGMAPS)
        .watches(CONFIGBUNDLES, configmaps_of_bundle)
        .with_options(workers=1, priority_queue=False)
        .complete(configmaps)
    )
    assert scope.controllers == {"bundles": first, "configmaps": second}
    cleaned: list[float] = []
    manager.add_cleanup(cleaned.append)
    running = _Running(manager)
    wait_until(lambda: bundles.seen() == {"a/app"})
    wait_until(lambda: configmaps.seen() == {"a/app-cm", "a/plain", "b/other"})
    assert sorted(lists(api), key=str) == [
        ("configbundles", "a", None),
        ("configbundles", "b", None),
        ("configmaps", "a", None),
        ("configmaps", "b", None),
    ]
    assert len(scope.informers.informers) == 4
    # A live event reaches both controllers through the one shared informer.
    changed = owned_configmap("app-cm", "a", "app")
    changed["data"] = {"k": "v"}
    api.tracker.put(CONFIGMAPS, changed)
    wait_until(lambda: bundles.keys.count("a/app") == 2)
    wait_until(lambda: configmaps.keys.count("a/app-cm") == 2)
    assert manager.healthy()
    assert running.stop() == 0
    assert cleaned == [1.0]
    assert not manager.healthy(), "stopped informers are not alive"


def test_builder_refuses_incomplete_or_duplicate_wiring(scope: Scope) -> None:
    reconciler = _Recording()
    with pytest.raises(ValueError, match="for_ is required"):
        Builder(scope, "x").complete(reconciler)
    with pytest.raises(ValueError, match="owns needs for_ first"):
        Builder(scope, "x").owns(CONFIGMAPS)
    with pytest.raises(ValueError, match="already given"):
        Builder(scope, "x").for_(CONFIGMAPS).for_(CONFIGBUNDLES)
    Builder(scope, "x").for_(CONFIGMAPS).complete(reconciler)
    with pytest.raises(ValueError, match="named x already exists"):
        Builder(scope, "x").for_(CONFIGBUNDLES).complete(reconciler)
    # The refused duplicate wired nothing: only the first controller's informers exist.
    assert [i.name for i in scope.informers.informers] == ["configmaps/a", "configmaps/b"]


def test_caches_that_never_sync_stop_the_manager_with_exit_1(api: FakeKube) -> None:
    api.prepend_reactor("list", "configbundles", fail(RuntimeError("never answers")))
    manager = Manager(api, informers=factories(api, "a"), identity="test", cache_sync_timeout=0.0)
    (scope,) = manager.prepared_scopes()
    reconciler = _Recording()
    controller = Builder(scope, "bundles").for_(CONFIGBUNDLES).complete(reconciler)
    assert manager.run() == 1
    assert controller.queue.shutting_down()
    assert reconciler.keys == []


def test_the_configbundle_controller_maps_managed_configmaps_to_their_bundle(
    api: FakeKube, scope: Scope
) -> None:
    """Its ConfigMap informer asks the server for managed ConfigMaps only, carries the
    owner index, and a ConfigMap event enqueues the owning bundle's key."""
    api.tracker.add(CONFIGBUNDLES, named_bundle("app", "b"))
    managed = owned_configmap("app-cm", "b", "app")
    managed["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "cbop"}
    api.tracker.add(CONFIGMAPS, managed)
    controller = configbundle.setup(scope, workers=1)
    assert controller.name == "configbundle"
    scope.informers.start()
    assert scope.informers.wait_for_cache_sync(5.0)
    assert ("configmaps", "b", configbundle.MANAGED_SELECTOR) in lists(api)
    # Two events for one bundle (its own add, its ConfigMap's add) collapse to one key.
    assert len(controller.queue) == 1
    key, _ = controller.queue.get()
    assert key == "b/app"
    controller.queue.shut_down()


@pytest.mark.parametrize(("fresh_for", "collected"), [(60.0, False), (0.0, True)])
def test_caches_synced_soon_after_the_start_are_frozen_without_a_collection(
    api: FakeKube,
    manager: Manager,
    monkeypatch: pytest.MonkeyPatch,
    fresh_for: float,
    collected: bool,
) -> None:
    freezes: list[bool] = []

    def freeze_caches(*, collect: bool) -> float:
        freezes.append(collect)
        return 0.0

    monkeypatch.setattr(runtime_manager, "FRESH_START_SECONDS", fresh_for)
    monkeypatch.setattr(runtime_manager, "freeze_startup", lambda: 0.0)
    monkeypatch.setattr(runtime_manager, "freeze_caches", freeze_caches)
    api.tracker.add(CONFIGBUNDLES, named_bundle("app", "a"))
    bundles = _Recording()
    (scope,) = manager.prepared_scopes()
    Builder(scope, "bundles").for_(CONFIGBUNDLES).owns(CONFIGMAPS).complete(bundles)
    running = _Running(manager)
    wait_until(lambda: bundles.seen() == {"a/app"})
    assert running.stop() == 0
    assert freezes == [collected]


def test_a_lost_scope_of_every_namespace_ends_the_process_with_exit_1(
    api: FakeKube, manager: Manager, scope: Scope
) -> None:
    """The single leader's scope is not restartable (its elector campaigns once): losing
    it stops its workers at once and ends the process with exit code 1, whatever called
    lost; a shard's loss would not (tests/unit/test_runtime_shards.py)."""
    api.tracker.add(CONFIGBUNDLES, named_bundle("app", "a"))
    bundles = _Recording()
    controller = Builder(scope, "bundles").for_(CONFIGBUNDLES).complete(bundles)
    running = _Running(manager)
    wait_until(lambda: bundles.seen() == {"a/app"})
    assert manager.held_scopes() == [scope]
    manager.lost(EVERYTHING)
    assert scope.state is ScopeState.LOST
    assert controller.queue.shutting_down()
    assert manager.held_scopes() == []
    assert running.stop() == 1
