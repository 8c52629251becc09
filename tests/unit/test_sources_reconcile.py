"""Bundles with sources: the reconciler against the fake API server, and the key mapping.

The caches are CacheListers the test syncs from the server's tracker (the source cache
holds only labelled ConfigMaps, as the server-side selector does); one reconciler
lives through each test, so its memo sees every change as a running controller would.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest

from cbop.api import SOURCE_SELECTOR, Reason
from cbop.configbundle import Action, Reconciler
from cbop.configbundle import controller as configbundle
from cbop.informers import CONTROLLER_UID_INDEX, SharedInformerFactory, index_by_controller_uid
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS
from cbop.runtime import Scope
from cbop.shardrange import ShardRange
from cbop_testing.fakekube import CacheLister, FakeKube
from cbop_testing.objects import bundle

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def source(
    name: str, data: dict[str, str], namespace: str = "demo", share_with: str | None = None
) -> Any:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {"cbop.dev/source": "true"},
    }
    if share_with is not None:
        meta["annotations"] = {"cbop.dev/share-with": share_with}
    return {"metadata": meta, "data": data}


class Counts:
    """The reconciler's metrics hooks, counted."""

    def __init__(self) -> None:
        self.writes: list[str] = []
        self.drift = 0

    def configmap_write(self, operation: str) -> None:
        self.writes.append(operation)

    def secret_write(self, operation: str) -> None:
        self.writes.append(f"secret {operation}")

    def drift_corrected(self) -> None:
        self.drift += 1


class Harness:
    """A fake API server, caches synced from it on demand, and one reconciler."""

    def __init__(self, *objs: tuple[Any, dict[str, Any]], scope: list[str] | None = None) -> None:
        self.kube = FakeKube()
        for res, obj in objs:
            self.kube.tracker.add(res, obj)
        self.bundles = CacheLister(indexers={})
        self.configmaps = CacheLister(indexers={CONTROLLER_UID_INDEX: index_by_controller_uid})
        self.sources = CacheLister()
        self.sync()
        self.counts = Counts()
        self.reconciler = Reconciler(
            client=self.kube,
            observer=self.counts,
            bundles=self.bundles,
            configmaps=self.configmaps,
            sources=self.sources,
            source_scope=scope,
            now=lambda: NOW,
        )

    def sync(self) -> None:
        """Let every cache catch up with the server."""
        tracker = self.kube.tracker
        self.bundles.sync(tracker, CONFIGBUNDLES)
        self.configmaps.sync(tracker, CONFIGMAPS)
        labelled = [
            o
            for o in tracker.objects(CONFIGMAPS)
            if (o["metadata"].get("labels") or {}).get("cbop.dev/source") == "true"
        ]
        self.sources.indexer.replace(labelled, tracker.resource_version)

    def reconcile(self, key: str = "demo/app") -> Any:
        self.kube.clear_actions()
        result = self.reconciler.reconcile(key)
        self.sync()
        return result

    def writes(self) -> list[tuple[str, str]]:
        return [
            (f"{a.verb}/{a.subresource}" if a.subresource else a.verb, a.resource)
            for a in self.kube.actions
            if a.verb not in ("get", "list") and a.resource != "events"
        ]

    def gets(self) -> int:
        return sum(1 for a in self.kube.actions if a.verb == "get")

    def configmap(self, name: str = "app") -> Any:
        return self.kube.tracker.get(CONFIGMAPS, "demo", name)

    def status(self) -> Any:
        return self.kube.tracker.get(CONFIGBUNDLES, "demo", "app").get("status") or {}


SPEC: dict[str, Any] = {
    "sources": [
        {"configMap": {"name": "logging-defaults", "namespace": "platform"}},
        {"configMap": {"name": "team-overrides", "optional": True}},
    ],
    "data": {"owner": "demo"},
    "merge": [{"key": "log.yaml", "format": "yaml"}],
}


@pytest.fixture
def harness() -> Harness:
    return Harness(
        (
            CONFIGMAPS,
            source(
                "logging-defaults",
                {"log.yaml": "level: info\nformat: {time: iso}\n", "owner": "platform"},
                "platform",
                share_with="demo",
            ),
        ),
        (CONFIGBUNDLES, bundle(SPEC)),
    )


def test_a_bundle_is_composed_from_its_sources_and_says_so_in_status(harness: Harness) -> None:
    result = harness.reconcile()
    assert result.action is Action.CREATE
    assert harness.writes() == [("create", "configmaps"), ("patch/status", "configbundles")]
    assert harness.configmap()["data"] == {
        "log.yaml": "level: info\nformat: {time: iso}\n",
        "owner": "demo",
    }
    status = harness.status()
    assert [(s["namespace"], s["name"]) for s in status["sources"]] == [
        ("platform", "logging-defaults")
    ]
    assert status["sources"][0]["contentHash"].startswith("sha256:")
    assert status["keySources"] == {"log.yaml": "platform/logging-defaults", "owner": "spec"}
    assert "keySourcesOmitted" not in status
    assert status["keyCount"] == 2


def test_a_source_change_is_one_write_and_an_unchanged_result_none(harness: Harness) -> None:
    harness.reconcile()
    harness.reconcile()
    assert harness.writes() == []
    # The optional source appears: a new layer.
    harness.kube.tracker.add(
        CONFIGMAPS, source("team-overrides", {"log.yaml": "level: debug\n", "extra": "1"})
    )
    harness.sync()
    assert harness.reconcile().action is Action.UPDATE
    # The ConfigMap first; the status waits for the reconcile its watch event brings, so
    # a source read by many bundles updates every reader's ConfigMap before any status.
    assert harness.writes() == [("update", "configmaps")]
    assert harness.configmap()["data"]["log.yaml"] == "level: debug\nformat: {time: iso}\n"
    assert harness.status()["keySources"]["log.yaml"] == "platform/logging-defaults"
    harness.sync()
    assert harness.reconcile().action is Action.NONE
    assert harness.writes() == [("patch/status", "configbundles")]
    assert harness.status()["keySources"]["log.yaml"] == (
        "platform/logging-defaults+demo/team-overrides"
    )
    # New content from a source is no drift (no DriftCorrected Event, not counted).
    assert harness.counts.drift == 0
    assert harness.counts.writes == ["create", "update"]
    # A change of the source that leaves the merged result as it is (the comment on an
    # overriding key's line, the spaces between key and value are not written) writes
    # nothing.
    harness.kube.tracker.add(
        CONFIGMAPS, source("team-overrides", {"log.yaml": "level:   debug  # same\n", "extra": "1"})
    )
    harness.sync()
    harness.reconcile()
    assert [w for w in harness.writes() if w[1] == "configmaps"] == []
    assert harness.gets() == 0


def test_a_deleted_required_source_keeps_the_last_good_content(harness: Harness) -> None:
    harness.reconcile()
    before = harness.configmap()
    good = harness.status()
    harness.kube.tracker.delete(CONFIGMAPS, "platform", "logging-defaults")
    harness.sync()
    result = harness.reconcile()
    assert result.ready == "False"
    assert result.reason is Reason.SOURCE_NOT_FOUND
    assert harness.writes() == [("patch/status", "configbundles")]
    assert harness.configmap() == before
    ready = harness.status()["conditions"][0]
    assert ready["reason"] == "SourceNotFound"
    assert "platform/logging-defaults" in ready["message"]
    # The provenance of the last good content stays, and so do its hash and key count:
    # the status still says what the ConfigMap holds.
    assert harness.status()["keySources"]["log.yaml"] == "platform/logging-defaults"
    assert harness.status()["contentHash"] == good["contentHash"]
    assert harness.status()["keyCount"] == good["keyCount"] == 2
    assert harness.status()["configMapName"] == "app"
    # So the next look finds the status as it should be, and writes nothing.
    harness.sync()
    harness.reconcile()
    assert harness.writes() == []
    # Re-created: healed.
    harness.kube.tracker.add(
        CONFIGMAPS,
        source(
            "logging-defaults",
            {"log.yaml": "level: warn\n"},
            "platform",
            share_with="*",
        ),
    )
    harness.sync()
    assert harness.reconcile().ready == "True"
    assert harness.configmap()["data"]["log.yaml"] == "level: warn\n"


def test_a_missing_source_on_a_first_render_creates_nothing() -> None:
    h = Harness((CONFIGBUNDLES, bundle(SPEC)))
    result = h.reconcile()
    assert result.reason is Reason.SOURCE_NOT_FOUND
    assert h.writes() == [("patch/status", "configbundles")]
    with pytest.raises(Exception, match="not found"):
        h.configmap()


def test_an_orphan_bundle_whose_source_is_missing_still_gets_its_finalizer() -> None:
    """deletionPolicy Orphan holds while a source fails: deleting the bundle then keeps
    the ConfigMap (with its last good content) instead of leaving it to the collector."""
    h = Harness(
        (CONFIGMAPS, source("logging-defaults", {"a": "1"}, "platform", share_with="demo")),
        (CONFIGBUNDLES, bundle(SPEC)),
    )
    assert h.reconcile().ready == "True"
    # The policy changes to Orphan in the same edit that adds a source not there yet.
    spec = {
        **SPEC,
        "deletionPolicy": "Orphan",
        "sources": [*SPEC["sources"], {"configMap": {"name": "not-yet"}}],
    }
    h.kube.tracker.put(CONFIGBUNDLES, bundle(spec, generation=2))
    h.sync()
    result = h.reconcile()
    assert result.reason is Reason.SOURCE_NOT_FOUND
    stored = h.kube.tracker.get(CONFIGBUNDLES, "demo", "app")
    assert stored["metadata"]["finalizers"] == ["cbop.dev/orphan"]
    assert [w for w in h.writes() if w[1] == "configmaps"] == []


def test_an_unshared_source_is_refused_and_a_grant_heals() -> None:
    h = Harness(
        (CONFIGMAPS, source("logging-defaults", {"a": "1"}, "platform")),
        (CONFIGBUNDLES, bundle(SPEC)),
    )
    assert h.reconcile().reason is Reason.SOURCE_NOT_SHARED
    h.kube.tracker.add(
        CONFIGMAPS,
        source("logging-defaults", {"a": "1"}, "platform", share_with="team-x, demo"),
    )
    h.sync()
    assert h.reconcile().ready == "True"
    assert h.configmap()["data"] == {"a": "1", "owner": "demo"}


def test_outside_the_watched_namespaces_a_source_is_not_found_naming_them() -> None:
    h = Harness(
        (
            CONFIGMAPS,
            source("logging-defaults", {"a": "1"}, "platform", share_with="*"),
        ),
        (CONFIGBUNDLES, bundle(SPEC)),
        scope=["demo"],
    )
    result = h.reconcile()
    assert result.reason is Reason.SOURCE_NOT_FOUND
    assert "--namespace demo" in result.message


def test_a_bundle_without_sources_gets_no_provenance_in_status() -> None:
    h = Harness((CONFIGBUNDLES, bundle({"data": {"a": "1"}})))
    h.reconcile()
    assert "sources" not in h.status()
    assert "keySources" not in h.status()


def test_dry_run_shows_a_source_driven_change(harness: Harness) -> None:
    harness.reconcile()
    harness.kube.tracker.add(
        CONFIGMAPS,
        source(
            "logging-defaults",
            {"log.yaml": "level: error\n"},
            "platform",
            share_with="demo",
        ),
    )
    harness.sync()
    dry = Reconciler(
        client=harness.kube,
        bundles=harness.bundles,
        configmaps=harness.configmaps,
        sources=harness.sources,
        dry_run=True,
        now=lambda: NOW,
    )
    result = dry.reconcile("demo/app")
    assert result.pending
    assert "level: error" in result.diff


# ------------------------------------------------------------------ key mapping


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"data": {}}, []),
        ({"sources": [{"configMap": {"name": "x"}}]}, ["a/x"]),
        (
            {
                "sources": [
                    {"configMap": {"name": "x", "namespace": "p"}},
                    {"configMap": {"name": "x", "namespace": "p"}},
                    {"configMap": {"name": "y"}},
                ]
            },
            ["a/y", "p/x"],
        ),
        ({"sources": "junk"}, []),
        ({"sources": [{"configMap": {}}]}, []),
        (
            {
                "sources": [
                    {"secret": {"name": "x", "namespace": "p"}},
                    {"configMap": {"name": "x", "namespace": "p"}},
                ]
            },
            ["p/x", "secret:p/x"],
        ),
    ],
    ids=["none", "own-namespace", "each-once", "junk", "no-name", "a-secret-apart"],
)
def test_the_source_index_holds_every_source_a_bundle_reads(
    spec: dict[str, Any], expected: list[str]
) -> None:
    obj = {"metadata": {"namespace": "a", "name": "b"}, "spec": spec}
    assert configbundle.index_by_source(obj) == expected


@pytest.fixture
def scope() -> Iterator[Scope]:
    kube = FakeKube()
    informers = SharedInformerFactory(kube, resync_period=0)
    made = Scope(kube, informers=informers)
    yield made
    informers.shutdown()


def test_a_source_event_maps_to_every_bundle_reading_it(scope: Scope) -> None:
    configbundle.setup(scope)
    (informer,) = scope.informers.informers_for(CONFIGBUNDLES).values()
    for ns, name, src in (
        ("a", "one", {"name": "base", "namespace": "platform"}),
        ("b", "two", {"name": "base", "namespace": "platform"}),
        ("platform", "three", {"name": "base"}),
        ("a", "other", {"name": "base"}),
    ):
        informer.indexer().update(
            {"metadata": {"namespace": ns, "name": name}, "spec": {"sources": [{"configMap": src}]}}
        )
    reading = configbundle.bundles_reading(scope.lister(CONFIGBUNDLES))
    assert reading({"metadata": {"namespace": "platform", "name": "base"}}) == [
        "a/one",
        "b/two",
        "platform/three",
    ]
    assert reading({"metadata": {"namespace": "a", "name": "base"}}) == ["a/other"]
    assert reading({"metadata": {"namespace": "a", "name": "nobody"}}) == []


def test_the_source_informer_is_label_selected_and_never_shard_filtered() -> None:
    kube = FakeKube()
    factory = SharedInformerFactory(kube, resync_period=0, shard=ShardRange.of(0, 2))
    configbundle.new_reconciler(kube, factory)
    names = sorted(inf.name for inf in factory.informers if inf.resource == CONFIGMAPS)
    assert names == [
        "configmaps/* shard 0/2",
        f"configmaps/*[{SOURCE_SELECTOR}]",
    ]
    factory.shutdown()


def test_the_reconcile_after_a_status_only_write_is_answered_from_the_memo(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.reconcile()
    harness.reconcile()
    harness.kube.tracker.add(
        CONFIGMAPS, source("team-overrides", {"log.yaml": "level: debug\n", "extra": "1"})
    )
    harness.sync()
    assert harness.reconcile().action is Action.UPDATE  # the ConfigMap
    status_write = harness.reconcile()  # its watch event: the status
    assert harness.writes() == [("patch/status", "configbundles")]
    composed: list[str] = []
    compose = harness.reconciler._sources.compose

    def counted(bundle: Any, spec: Any) -> Any:
        composed.append(bundle["metadata"]["name"])
        return compose(bundle, spec)

    monkeypatch.setattr(harness.reconciler._sources, "compose", counted)
    # The status write's own watch event: nothing to do, and nothing composed again.
    assert harness.reconcile() == status_write
    assert harness.writes() == []
    assert composed == []
    # Anything else that moves (here the bundle's status, by another writer) is
    # reconciled in full again, and the status put back.
    current = harness.kube.tracker.get(CONFIGBUNDLES, "demo", "app")
    harness.kube.tracker.add(CONFIGBUNDLES, {**current, "status": {"keyCount": 99}})
    harness.sync()
    harness.reconcile()
    assert composed == ["app"]
    assert harness.writes() == [("patch/status", "configbundles")]
    assert harness.status()["keyCount"] == 3
