"""Sharded informers against a real kube-apiserver, with the ShardedListAndWatch gate on and off.

Three informer factories (shards 0, 1 and 2 of 3, keyed by namespace) watch ConfigBundles
and ConfigMaps across 30 namespaces (10 per shard). With the gate on (the session's control
plane) the server filters: ConfigMap list answers carry ``metadata.shardInfo``, ConfigBundle
ones do not (custom resource lists on 1.36 have no such field) although the server filters
them too, and the client-side check drops nothing. With the gate off (a module-scoped
control plane started with ``sharded_list_and_watch=False``) the server ignores the
selector and the client-side check gives the same sets. Either way each shard's cache holds
exactly the objects :func:`shard_of` assigns to it, the union is everything, and watch
events after the sync (creates in new namespaces, updates, deletes) reach only their shard.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from cbop.informers import DeletedFinalStateUnknown, SharedInformer, SharedInformerFactory
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, NAMESPACES, ApiError, KubeClient, Resource
from cbop.shardrange import ShardRange, shard_of, shard_ranges
from cbop_testing.envtest import ControlPlane

from .fixtures import install_crd
from .harness import bundle, wait_for

SHARDS = 3
PER_SHARD = 10
WAIT = 60.0
RESOURCES = (CONFIGBUNDLES, CONFIGMAPS)


@pytest.fixture(autouse=True)
def _detect_cache_mutations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every informer in this module checks that nothing mutates its cache."""
    monkeypatch.setenv("CBOP_CACHE_MUTATION_DETECTOR", "true")


def fresh_namespaces(prefix: str, per_shard: int) -> list[str]:
    """Return new namespace names, ``per_shard`` in each of the SHARDS shards.

    The random part comes first: FNV-1a barely moves the top bits of the hash for the
    last few characters, so names that differ only at the end share a shard.
    """
    names: list[str] = []
    taken: Counter[int] = Counter()
    while len(names) < per_shard * SHARDS:
        name = f"{prefix}-{secrets.token_hex(4)}-sh"
        index = shard_of(name, SHARDS)
        if taken[index] < per_shard:
            taken[index] += 1
            names.append(name)
    return names


def create_namespace_with_objects(kube: KubeClient, ns: str) -> None:
    """A namespace with one ConfigBundle ``app`` and one ConfigMap ``settings``."""
    kube.create(NAMESPACES, None, {"metadata": {"name": ns, "labels": {"cbop.dev/e2e": "true"}}})
    kube.create(CONFIGBUNDLES, ns, bundle("app", {"data": {"k": "v"}}))
    kube.create(CONFIGMAPS, ns, {"metadata": {"name": "settings"}, "data": {"k": "v"}})


@dataclass
class Plane:
    """A control plane under test, its admin client, and the namespaces filled for it."""

    control: ControlPlane
    kube: KubeClient
    gate: bool
    namespaces: list[str] = field(default_factory=list)

    def populate(self, names: list[str]) -> None:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda ns: create_namespace_with_objects(self.kube, ns), names))
        self.namespaces.extend(names)


@pytest.fixture(scope="module")
def gate_off_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane whose kube-apiserver runs without the ShardedListAndWatch gate."""
    plane = ControlPlane(
        workdir=tmp_path_factory.mktemp("cp-unsharded"), sharded_list_and_watch=False
    )
    plane.start(timeout=90.0)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module", params=["gate-on", "gate-off"])
def plane(request: pytest.FixtureRequest) -> Iterator[Plane]:
    """The session's control plane (gate on) or the module's (gate off), 30 namespaces filled."""
    gate = request.param == "gate-on"
    control: ControlPlane = request.getfixturevalue("control_plane" if gate else "gate_off_plane")
    assert control.sharded_list_and_watch is gate
    install_crd(control)
    kube = KubeClient.from_config(kubeconfig=str(control.kubeconfig_path), qps=0)
    made = Plane(control, kube, gate)
    made.populate(fresh_namespaces("shard", PER_SHARD))
    try:
        yield made
    finally:
        if gate:  # the session's plane lives on: leave it clean
            for ns in made.namespaces:
                with contextlib.suppress(ApiError):
                    kube.delete(NAMESPACES, None, ns, propagation_policy="Background")
        kube.close()


def keys_in(namespaces: list[str], shard: ShardRange | None = None) -> set[str]:
    """``ns/name`` of the objects the module creates in ``namespaces`` (of ``shard``)."""
    return {
        f"{ns}/{name}"
        for ns in namespaces
        for name in ("app", "settings")
        if shard is None or shard.contains(ns)
    }


def split_key(key: str) -> str:
    return key.split("/", 1)[0]


# ----------------------------------------------------------------------------- list answers


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: r.plural)
def test_list_answers_say_whether_the_server_sharded(plane: Plane, resource: Resource) -> None:
    ours = set(plane.namespaces)
    name = "app" if resource is CONFIGBUNDLES else "settings"
    everything = {f"{ns}/{name}" for ns in ours}
    union: set[str] = set()
    for shard in shard_ranges(SHARDS):
        expected = {key for key in everything if shard.contains(split_key(key))}
        assert len(expected) == PER_SHARD
        # Paged: the selector goes with every page, and each page is filtered.
        got: set[str] = set()
        foreign = 0
        continue_: str | None = None
        pages = 0
        while True:
            answer = plane.kube.list(
                resource, limit=7, continue_=continue_, shard_selector=shard.selector()
            )
            pages += 1
            meta = answer["metadata"]
            info = meta.get("shardInfo")
            if plane.gate and resource is CONFIGMAPS:
                assert info == {"selector": shard.selector()}, meta
            else:
                # Custom resources are filtered without saying so; the gate off, nothing is.
                assert info is None, meta
            for item in answer["items"]:
                ns = item["metadata"]["namespace"]
                foreign += not shard.contains(ns)
                if ns in ours:
                    got.add(f"{ns}/{item['metadata']['name']}")
            continue_ = meta.get("continue") or None
            if not continue_:
                break
        assert pages >= 2
        if plane.gate:
            assert foreign == 0
            assert got == expected
        else:
            assert foreign >= 2 * PER_SHARD  # the selector was ignored
            assert got == everything
        union |= got
    assert union == everything


# ----------------------------------------------------------------------------- informers


class Recorder:
    """Records each notification's kind and ``ns/name`` (thread-safe)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def _add(self, kind: str, obj: Any) -> None:
        if isinstance(obj, DeletedFinalStateUnknown):
            key = obj.key
        else:
            key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        with self.lock:
            self.events.append((kind, key))

    def on_add(self, obj: Any) -> None:
        self._add("add", obj)

    def on_update(self, old: Any, new: Any) -> None:
        self._add("update", new)

    def on_delete(self, obj: Any) -> None:
        self._add("delete", obj)

    def keys(self, kind: str | None = None) -> set[str]:
        with self.lock:
            return {key for k, key in self.events if kind is None or k == kind}


@dataclass
class Shard:
    shard: ShardRange
    factory: SharedInformerFactory
    informers: dict[str, SharedInformer]
    recorders: dict[str, Recorder]

    def cached(self, resource: Resource, namespaces: set[str]) -> set[str]:
        """``ns/name`` of the cached objects of ``resource`` in ``namespaces``."""
        keys = self.informers[resource.plural].lister().list_keys()
        return {key for key in keys if split_key(key) in namespaces}


@contextlib.contextmanager
def sharded_informers(kube: KubeClient) -> Iterator[list[Shard]]:
    """Three factories, one per shard, each with a ConfigBundle and a ConfigMap informer."""
    shards: list[Shard] = []
    for shard in shard_ranges(SHARDS):
        factory = SharedInformerFactory(kube, resync_period=0, shard=shard)
        informers = {res.plural: factory.informers_for(res)[None] for res in RESOURCES}
        recorders = {plural: Recorder() for plural in informers}
        for plural, informer in informers.items():
            informer.add_event_handler(recorders[plural])
        shards.append(Shard(shard, factory, informers, recorders))
    for s in shards:
        s.factory.start()
    try:
        for s in shards:
            assert s.factory.wait_for_cache_sync(WAIT), s.factory.refusals()
        yield shards
    finally:
        for s in shards:
            s.factory.shutdown()
            for informer in s.informers.values():
                informer.indexer().check_mutations()


def test_three_shards_cache_exactly_their_namespaces_and_get_only_their_events(
    plane: Plane,
) -> None:
    ours = set(plane.namespaces)
    with sharded_informers(plane.kube) as shards:
        # ---- after the sync: each cache is its shard's slice; together they are all.
        for res in RESOURCES:
            union: set[str] = set()
            for s in shards:
                informer = s.informers[res.plural]
                assert informer.name == f"{res.plural}/* shard {s.shard}"
                got = s.cached(res, ours)
                name = "app" if res is CONFIGBUNDLES else "settings"
                assert got == {k for k in keys_in(plane.namespaces, s.shard) if k.endswith(name)}
                # Nothing of another shard, from any namespace, is cached.
                everywhere = informer.lister().list_keys()
                assert all(s.shard.contains(split_key(key)) for key in everywhere)
                # (Other tests' namespaces may still be going away: no exact count.)
                assert informer.object_count() >= len(got)
                union |= got
                if plane.gate:
                    # ConfigMaps: confirmed by shardInfo; ConfigBundles: filtered unsaid.
                    assert informer.server_side_sharding is (res is CONFIGMAPS)
                    assert informer.shard_dropped == 0  # the server did the filtering
                else:
                    assert informer.server_side_sharding is False
                    assert informer.shard_dropped >= 2 * PER_SHARD
            assert union == {k for k in keys_in(plane.namespaces) if k.endswith(name)}
        dropped_at_sync = {
            (s.shard.index, plural): inf.shard_dropped
            for s in shards
            for plural, inf in s.informers.items()
        }

        # ---- watch events: new namespaces (one per shard), updates, deletes.
        new = fresh_namespaces("shard-new", 1)
        plane.populate(new)
        changed: list[str] = []
        deleted: list[str] = []
        for index in range(SHARDS):
            in_shard = [ns for ns in plane.namespaces if shard_of(ns, SHARDS) == index]
            plane.kube.patch(
                CONFIGBUNDLES, in_shard[0], "app", {"metadata": {"labels": {"touched": "yes"}}}
            )
            changed.append(f"{in_shard[0]}/app")
            plane.kube.delete(CONFIGMAPS, in_shard[1], "settings")
            deleted.append(f"{in_shard[1]}/settings")
        ours |= set(new)

        def settled() -> bool:
            for s in shards:
                bundles = s.cached(CONFIGBUNDLES, ours)
                maps = s.cached(CONFIGMAPS, ours)
                mine = keys_in(plane.namespaces, s.shard) - set(deleted)
                if bundles | maps != mine:
                    return False
                touched = {k for k in changed if s.shard.contains(split_key(k))}
                if not touched <= s.recorders["configbundles"].keys("update"):
                    return False
            return True

        wait_for(settled, WAIT, message="every shard's cache to follow the changes")
        for s in shards:
            seen = s.recorders["configbundles"].keys() | s.recorders["configmaps"].keys()
            assert all(s.shard.contains(split_key(key)) for key in seen)
            assert {k for k in keys_in(new) if s.shard.contains(split_key(k))} <= (
                s.recorders["configbundles"].keys("add") | s.recorders["configmaps"].keys("add")
            )
            gone = {k for k in deleted if s.shard.contains(split_key(k))}
            assert len(gone) == 1
            assert gone <= s.recorders["configmaps"].keys("delete")
            for plural, informer in s.informers.items():
                before = dropped_at_sync[(s.shard.index, plural)]
                if plane.gate:
                    assert informer.shard_dropped == 0  # watch events filtered by the server
                else:
                    assert informer.shard_dropped > before  # ... or here
