"""SharedInformer against a real kube-apiserver: ordering, selectors, 410, restarts, pauses.

Two control planes are used: the session's (default flags, watch cache on) and, for the
compaction test, a module-scoped one whose watch cache for ConfigMaps is off
(``--watch-cache-sizes=configmaps#0``): with the watch cache on, a watch from a
resourceVersion the cache still holds is served from memory and etcd compaction has no
effect on it; with it off, a watch from a compacted RV reaches etcd and gets 410.

A network partition between the informer and the API server is simulated with a small
TCP proxy on loopback that forwards TLS bytes untouched and can be cut and healed.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from cbop.informers import DeletedFinalStateUnknown, SharedInformer
from cbop.kube import CONFIGMAPS, NAMESPACES, ApiError, KubeClient
from cbop_testing.envtest import ControlPlane

from .netproxy import TcpProxy, proxied_kubeconfig

WAIT = 60.0


@pytest.fixture(autouse=True)
def _detect_cache_mutations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every informer in this module checks that nothing mutates its cache."""
    monkeypatch.setenv("CBOP_CACHE_MUTATION_DETECTOR", "true")


# ----------------------------------------------------------------------------- helpers


class Recorder:
    """Records notifications as (kind, name, resourceVersion | "tombstone")."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.raw: list[tuple[str, Any]] = []
        self.cond = threading.Condition()

    def _add(self, kind: str, obj: Any, info: str) -> None:
        name = obj.key.split("/")[-1] if isinstance(obj, DeletedFinalStateUnknown) else None
        if name is None:
            name = obj["metadata"]["name"]
        with self.cond:
            self.events.append((kind, name, info))
            self.raw.append((kind, obj))
            self.cond.notify_all()

    def on_add(self, obj: Mapping[str, Any]) -> None:
        self._add("add", obj, obj["metadata"]["resourceVersion"])

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._add("update", new, new["metadata"]["resourceVersion"])

    def on_delete(self, obj: Mapping[str, Any] | DeletedFinalStateUnknown) -> None:
        if isinstance(obj, DeletedFinalStateUnknown):
            self._add("delete", obj, "tombstone")
        else:
            self._add("delete", obj, obj["metadata"]["resourceVersion"])

    def wait_for(
        self, pred: Callable[[list[tuple[str, str, str]]], bool], timeout: float = WAIT
    ) -> list[tuple[str, str, str]]:
        with self.cond:
            ok = self.cond.wait_for(lambda: pred(self.events), timeout)
            assert ok, f"timed out; events so far: {self.events}"
            return list(self.events)

    def of(self, name: str) -> list[tuple[str, str]]:
        with self.cond:
            return [(k, info) for k, n, info in self.events if n == name]


def poll(pred: Callable[[], bool], timeout: float = WAIT, message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {message}"
        time.sleep(0.05)


def cm(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"metadata": meta, "data": dict(data)}


@contextlib.contextmanager
def running(informer: SharedInformer) -> Iterator[SharedInformer]:
    informer.start()
    try:
        yield informer
    finally:
        informer.stop()
        informer.indexer().check_mutations()


@pytest.fixture
def kube(kubeconfig: str) -> Iterator[KubeClient]:
    with KubeClient.from_config(kubeconfig=kubeconfig, qps=0) as client:
        yield client


def _list_names(client: KubeClient, ns: str, selector: str | None = None) -> set[str]:
    listed = client.list(CONFIGMAPS, ns, label_selector=selector)
    return {o["metadata"]["name"] for o in listed["items"]}


# ----------------------------------------------------------------------------- ordering


def test_events_arrive_in_order_per_object(kube: KubeClient, namespace: str) -> None:
    rec = Recorder()
    informer = SharedInformer(kube, CONFIGMAPS, namespace=namespace, name="order")
    informer.add_event_handler(rec)
    kube.create(CONFIGMAPS, namespace, cm("before", k="0"))
    with running(informer):
        rec.wait_for(lambda ev: ("add", "before") in [(k, n) for k, n, _ in ev])
        assert informer.has_synced()
        expected: dict[str, list[tuple[str, str]]] = {}
        for name in ("a", "b", "c"):
            created = kube.create(CONFIGMAPS, namespace, cm(name, k="0"))
            expected[name] = [("add", created["metadata"]["resourceVersion"])]
        for i in range(1, 4):
            for name in ("c", "a", "b"):
                updated = kube.patch(CONFIGMAPS, namespace, name, {"data": {"k": str(i)}})
                expected[name].append(("update", updated["metadata"]["resourceVersion"]))
        for name in ("b", "a"):
            current = kube.get(CONFIGMAPS, namespace, name)
            kube.delete(CONFIGMAPS, namespace, name)
            # DELETED carries the object's last state (its last resourceVersion or newer).
            expected[name].append(("delete", current["metadata"]["resourceVersion"]))
        rec.wait_for(lambda ev: sum(1 for k, _, _ in ev if k == "delete") == 2)
        assert rec.of("c") == expected["c"]
        for name in ("a", "b"):
            got = rec.of(name)
            assert got[:-1] == expected[name][:-1]
            assert got[-1][0] == "delete"
            assert int(got[-1][1]) >= int(expected[name][-1][1])
        assert sorted(informer.lister().list_keys()) == [f"{namespace}/before", f"{namespace}/c"]
        cached = informer.lister().get(namespace, "c")
        assert cached is not None
        assert cached["data"] == {"k": "3"}
        assert "managedFields" not in cached["metadata"]
        assert informer.healthy()


# ----------------------------------------------------------------------------- selector

SELECTOR_NOISE = 10_000


@pytest.fixture(scope="module")
def crowded_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A namespace holding 10,000 ConfigMaps that no selector below matches (made once)."""
    client = KubeClient.from_config(kubeconfig=str(control_plane.kubeconfig_path), qps=0)
    name = f"e2e-informer-crowd-{os.getpid()}"
    client.create(NAMESPACES, None, {"metadata": {"name": name}})

    def make(i: int) -> None:
        client.create(CONFIGMAPS, name, cm(f"noise-{i:05d}", {"app": "noise"}, payload="x" * 64))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(make, range(SELECTOR_NOISE)))
    yield name
    with contextlib.suppress(ApiError):
        client.delete(NAMESPACES, None, name, propagation_policy="Background")
    client.close()


def test_label_selector_keeps_unrelated_configmaps_out(
    kube: KubeClient, crowded_namespace: str
) -> None:
    ns = crowded_namespace
    wanted = {"app": "wanted"}
    for name in ("w1", "w2"):
        kube.create(CONFIGMAPS, ns, cm(name, wanted))
    rec = Recorder()
    informer = SharedInformer(
        kube, CONFIGMAPS, namespace=ns, label_selector="app=wanted", name="selector"
    )
    informer.add_event_handler(rec)
    with running(informer):
        poll(informer.has_synced, message="sync")
        assert sorted(informer.lister().list_keys()) == [f"{ns}/w1", f"{ns}/w2"]
        # A noise object changed, a wanted one created, a noise object relabelled into view.
        kube.patch(CONFIGMAPS, ns, "noise-00001", {"data": {"payload": "changed"}})
        kube.create(CONFIGMAPS, ns, cm("w3", wanted))
        kube.patch(CONFIGMAPS, ns, "noise-00002", {"metadata": {"labels": {"app": "wanted"}}})
        rec.wait_for(lambda ev: len(ev) >= 4)
        # In order; the noise object's change (made before w3) never showed up.
        assert [(k, n) for k, n, _ in rec.events] == [
            ("add", "w1"),
            ("add", "w2"),
            ("add", "w3"),
            ("add", "noise-00002"),
        ]
        assert sorted(n for _, n, _ in rec.events) == ["noise-00002", "w1", "w2", "w3"]
        assert len(informer.lister().list()) == 4
        # The server agrees: 10,000 others exist but never reached the cache.
        assert len(_list_names(kube, ns)) == SELECTOR_NOISE + 3


# ----------------------------------------------------------------------------- 410 / gap


@pytest.fixture(scope="module")
def nocache_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane whose ConfigMap watches are served by etcd, not the watch cache."""
    plane = ControlPlane(
        workdir=tmp_path_factory.mktemp("cp-nocache"),
        extra_apiserver_flags=["--watch-cache-sizes=configmaps#0"],
    )
    plane.start(timeout=90.0)
    try:
        yield plane
    finally:
        plane.stop()


def test_compaction_during_a_partition_relists_and_tombstones(
    nocache_plane: ControlPlane, tmp_path: Path
) -> None:
    admin = KubeClient.from_config(kubeconfig=str(nocache_plane.kubeconfig_path), qps=0)
    ns = f"gap-{os.getpid()}-{int(time.time())}"
    admin.create(NAMESPACES, None, {"metadata": {"name": ns}})
    for name in ("a", "b", "c"):
        admin.create(CONFIGMAPS, ns, cm(name, k="0"))

    api_port = int(nocache_plane.api_url.rsplit(":", 1)[1])
    proxy = TcpProxy(("127.0.0.1", api_port))
    kubeconfig = proxied_kubeconfig(
        nocache_plane.kubeconfig_path, proxy.port, tmp_path / "proxied-kubeconfig"
    )
    client = KubeClient.from_config(kubeconfig=str(kubeconfig), qps=0)
    rec = Recorder()
    informer = SharedInformer(client, CONFIGMAPS, namespace=ns, name="gap")
    informer.add_event_handler(rec)
    try:
        with running(informer):
            rec.wait_for(lambda ev: len(ev) == 3)
            cached_b = informer.lister().get(ns, "b")
            assert cached_b is not None
            rv_before = informer.last_sync_resource_version()

            proxy.cut()  # the informer can no longer reach the API server
            poll(
                lambda: client.request_counts().get(("watch", "configmaps"), 0) >= 2,
                message="a failed re-watch",
            )
            admin.delete(CONFIGMAPS, ns, "b")
            a_new = admin.patch(CONFIGMAPS, ns, "a", {"data": {"k": "1"}})
            d_new = admin.create(CONFIGMAPS, ns, cm("d"))
            revision = nocache_plane.compact_etcd()
            assert revision > int(rv_before)
            assert rec.events[3:] == []
            proxy.heal()

            events = rec.wait_for(lambda ev: ("delete", "b", "tombstone") in ev)[3:]
            # The re-watch from the compacted RV got 410 and the informer relisted.
            assert client.request_counts()[("list", "configmaps")] == 2
            assert ("update", "a", a_new["metadata"]["resourceVersion"]) in events
            assert ("add", "d", d_new["metadata"]["resourceVersion"]) in events
            tombstone = next(o for k, o in rec.raw if isinstance(o, DeletedFinalStateUnknown))
            assert tombstone.key == f"{ns}/b"
            assert tombstone.obj is cached_b
            assert sorted(informer.lister().list_keys()) == [f"{ns}/a", f"{ns}/c", f"{ns}/d"]
            assert int(informer.last_sync_resource_version()) >= revision

            # Nothing is lost afterwards: the new watch delivers later changes.
            e_new = admin.create(CONFIGMAPS, ns, cm("e"))
            rec.wait_for(lambda ev: ("add", "e", e_new["metadata"]["resourceVersion"]) in ev)
            poll(informer.healthy, message="healthy")
    finally:
        proxy.close()
        client.close()
        with contextlib.suppress(ApiError):
            admin.delete(NAMESPACES, None, ns)
        admin.close()


# ----------------------------------------------------------------------------- restarts


def test_apiserver_restart_in_place_is_survived(
    control_plane: ControlPlane, kube: KubeClient, namespace: str
) -> None:
    rec = Recorder()
    informer = SharedInformer(kube, CONFIGMAPS, namespace=namespace, name="restart")
    informer.add_event_handler(rec)
    kube.create(CONFIGMAPS, namespace, cm("before"))
    with running(informer):
        rec.wait_for(lambda ev: len(ev) == 1)
        lists_before = kube.request_counts()[("list", "configmaps")]
        control_plane.restart_apiserver()
        created = kube.create(CONFIGMAPS, namespace, cm("after-restart"))
        updated = kube.patch(CONFIGMAPS, namespace, "before", {"data": {"k": "1"}})
        rec.wait_for(
            lambda ev: (
                ("add", "after-restart", created["metadata"]["resourceVersion"]) in ev
                and ("update", "before", updated["metadata"]["resourceVersion"]) in ev
            )
        )
        # The new apiserver's watch cache starts after our RV: 410, and one relist.
        assert kube.request_counts()[("list", "configmaps")] >= lists_before + 1
        poll(informer.healthy, message="healthy after restart")
        assert sorted(informer.lister().list_keys()) == [
            f"{namespace}/after-restart",
            f"{namespace}/before",
        ]


def test_paused_apiserver_is_noticed_by_the_read_timeout(
    control_plane: ControlPlane, kubeconfig: str, namespace: str
) -> None:
    statuses: list[tuple[str, int]] = []
    client = KubeClient.from_config(
        kubeconfig=kubeconfig, qps=0, on_request=lambda v, r, s, t: statuses.append((v, s))
    )
    rec = Recorder()
    informer = SharedInformer(
        client,
        CONFIGMAPS,
        namespace=namespace,
        read_timeout=3.0,
        unhealthy_after=2.0,
        name="pause",
    )
    informer.add_event_handler(rec)
    with running(informer):
        poll(informer.has_synced, message="sync")
        # healthy() is already true within unhealthy_after of the start: wait for the
        # watch itself, so that the pause silences an open watch.
        poll(lambda: ("watch", 200) in statuses, message="the watch is open")
        poll(informer.healthy, message="healthy")
        control_plane.pause_apiserver()
        try:
            # The open watch goes silent; after 3 s the informer gives up on it, and
            # its re-watch hangs too: the watch is down and the informer says so.
            poll(lambda: not informer.healthy(), timeout=20.0, message="unhealthy")
            poll(lambda: ("watch", 0) in statuses, timeout=20.0, message="a timed-out re-watch")
        finally:
            control_plane.resume_apiserver()
        with KubeClient.from_config(kubeconfig=kubeconfig, qps=0) as admin:
            created = admin.create(CONFIGMAPS, namespace, cm("after-pause"))
        rec.wait_for(
            lambda ev: ("add", "after-pause", created["metadata"]["resourceVersion"]) in ev
        )
        poll(informer.healthy, message="healthy after resume")
    assert statuses.count(("watch", 200)) >= 2  # a new watch was opened
    client.close()


# ----------------------------------------------------------------------------- bookmarks


def test_bookmarks_advance_the_resource_version_of_a_quiet_informer(
    kube: KubeClient, namespace: str
) -> None:
    rec = Recorder()
    # Watches of 5-10 s: kube-apiserver sends a bookmark 2 s before a watch's deadline
    # (and about once a minute otherwise); a short watch makes the test short.
    informer = SharedInformer(
        kube,
        CONFIGMAPS,
        namespace=namespace,
        label_selector="app=quiet",
        min_watch_timeout=5.0,
        name="bookmarks",
    )
    informer.add_event_handler(rec)
    with running(informer):
        poll(informer.has_synced, message="sync")
        synced_rv = int(informer.last_sync_resource_version())
        # Writes the informer never sees: they do not match its selector.
        other = kube.create(CONFIGMAPS, namespace, cm("unrelated", {"app": "noisy"}))
        other_rv = int(other["metadata"]["resourceVersion"])
        assert other_rv > synced_rv
        poll(
            lambda: int(informer.last_sync_resource_version()) >= other_rv,
            timeout=30.0,
            message="a bookmark past the unrelated write",
        )
        assert rec.events == []
        assert kube.request_counts()[("list", "configmaps")] == 1
