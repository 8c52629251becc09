"""The runtime manager and builder: controllers assembled on one shared informer factory.

Real informers, queues and worker threads against a fake API; the reconcilers record
the keys they get. No server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from cbop.configbundle import Action, Result
from cbop.configbundle import controller as configbundle
from cbop.informers import SharedInformerFactory
from cbop.keys import key_of
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, KubeClient
from cbop.runtime import Builder, Manager
from cbop.runtime import manager as runtime_manager
from tests.unit.fakeapi import FakeApi
from tests.unit.test_informer import cm, ev, wait_until


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


def _bundle(name: str, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "cbop.dev/v1alpha1",
        "kind": "ConfigBundle",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "1"},
    }


def _owned_cm(name: str, ns: str, bundle: str) -> dict[str, Any]:
    obj = cm(name, "1", ns)
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "cbop.dev/v1alpha1",
            "kind": "ConfigBundle",
            "name": bundle,
            "uid": f"uid-{bundle}",
            "controller": True,
        }
    ]
    return obj


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
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def manager(api: FakeApi) -> Iterator[Manager]:
    informers = SharedInformerFactory(api, namespaces=["a", "b"], resync_period=0)
    made = Manager(KubeClient(None), informers=informers, identity="test", shutdown_timeout=5.0)
    yield made
    made.stop_event.set()
    informers.shutdown()


def test_two_controllers_share_the_informers_of_one_factory(api: FakeApi, manager: Manager) -> None:
    """A bundle controller (for bundles, owns ConfigMaps) and a second controller (for
    ConfigMaps, watching bundles through a map function) on one manager: each resource
    is listed once per namespace, and each controller gets the keys its wiring maps to."""
    api.objects[("configbundles", "a")] = [_bundle("app", "a")]
    api.objects[("configmaps", "a")] = [_owned_cm("app-cm", "a", "app"), cm("plain", "1", "a")]
    api.objects[("configmaps", "b")] = [cm("other", "1", "b")]
    bundles, configmaps = _Recording(), _Recording()

    def configmaps_of_bundle(bundle: Mapping[str, Any]) -> list[str]:
        meta = bundle["metadata"]
        return [key_of(meta["namespace"], f"{meta['name']}-cm")]

    first = (
        Builder(manager, "bundles")
        .for_(CONFIGBUNDLES)
        .owns(CONFIGMAPS)
        .with_options(workers=2)
        .complete(bundles)
    )
    second = (
        Builder(manager, "configmaps")
        .for_(CONFIGMAPS)
        .watches(CONFIGBUNDLES, configmaps_of_bundle)
        .with_options(workers=1, priority_queue=False)
        .complete(configmaps)
    )
    assert manager.controllers == {"bundles": first, "configmaps": second}
    cleaned: list[float] = []
    manager.add_cleanup(cleaned.append)
    running = _Running(manager)
    wait_until(lambda: bundles.seen() == {"a/app"})
    wait_until(lambda: configmaps.seen() == {"a/app-cm", "a/plain", "b/other"})
    assert sorted(api.lists, key=str) == [
        ("configbundles", "a", None),
        ("configbundles", "b", None),
        ("configmaps", "a", None),
        ("configmaps", "b", None),
    ]
    assert len(manager.informers.informers) == 4
    # A live event reaches both controllers through the one shared informer.
    api.stream("configmaps", "a").push(ev("MODIFIED", _owned_cm("app-cm", "a", "app")))
    wait_until(lambda: bundles.keys.count("a/app") == 2)
    wait_until(lambda: configmaps.keys.count("a/app-cm") == 2)
    assert manager.healthy()
    assert running.stop() == 0
    assert cleaned == [1.0]
    assert not manager.healthy(), "stopped informers are not alive"


def test_builder_refuses_incomplete_or_duplicate_wiring(manager: Manager) -> None:
    reconciler = _Recording()
    with pytest.raises(ValueError, match="for_ is required"):
        Builder(manager, "x").complete(reconciler)
    with pytest.raises(ValueError, match="owns needs for_ first"):
        Builder(manager, "x").owns(CONFIGMAPS)
    with pytest.raises(ValueError, match="already given"):
        Builder(manager, "x").for_(CONFIGMAPS).for_(CONFIGBUNDLES)
    Builder(manager, "x").for_(CONFIGMAPS).complete(reconciler)
    with pytest.raises(ValueError, match="named x already exists"):
        Builder(manager, "x").for_(CONFIGBUNDLES).complete(reconciler)
    # The refused duplicate wired nothing: only the first controller's informers exist.
    assert [i.name for i in manager.informers.informers] == ["configmaps/a", "configmaps/b"]


def test_caches_that_never_sync_stop_the_manager_with_exit_1(api: FakeApi) -> None:
    api.refusals[("configbundles", "a")] = RuntimeError("never answers")
    informers = SharedInformerFactory(api, namespaces=["a"], resync_period=0)
    manager = Manager(
        KubeClient(None), informers=informers, identity="test", cache_sync_timeout=0.0
    )
    reconciler = _Recording()
    controller = Builder(manager, "bundles").for_(CONFIGBUNDLES).complete(reconciler)
    assert manager.run() == 1
    assert controller.queue.shutting_down()
    assert reconciler.keys == []


def test_the_configbundle_controller_maps_managed_configmaps_to_their_bundle(
    api: FakeApi, manager: Manager
) -> None:
    """Its ConfigMap informer asks the server for managed ConfigMaps only, carries the
    owner index, and a ConfigMap event enqueues the owning bundle's key."""
    api.objects[("configbundles", "b")] = [_bundle("app", "b")]
    api.objects[("configmaps", "b")] = [_owned_cm("app-cm", "b", "app")]
    controller = configbundle.setup(manager, workers=1)
    assert controller.name == "configbundle"
    manager.informers.start()
    assert manager.informers.wait_for_cache_sync(5.0)
    assert ("configmaps", "b", configbundle.MANAGED_SELECTOR) in api.lists
    # Two events for one bundle (its own add, its ConfigMap's add) collapse to one key.
    assert len(controller.queue) == 1
    key, _ = controller.queue.get()
    assert key == "b/app"
    controller.queue.shut_down()


@pytest.mark.parametrize(("fresh_for", "collected"), [(60.0, False), (0.0, True)])
def test_caches_synced_soon_after_the_start_are_frozen_without_a_collection(
    api: FakeApi,
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
    api.objects[("configbundles", "a")] = [_bundle("app", "a")]
    bundles = _Recording()
    Builder(manager, "bundles").for_(CONFIGBUNDLES).owns(CONFIGMAPS).complete(bundles)
    running = _Running(manager)
    wait_until(lambda: bundles.seen() == {"a/app"})
    assert running.stop() == 0
    assert freezes == [collected]
