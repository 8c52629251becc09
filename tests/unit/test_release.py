"""Releasing a bundle with deletionPolicy Orphan: by cbop's reconciler, and without cbop
by :func:`cbop.configbundle.release.release_deleted` (what ``cbop release`` runs),
against the fake API server; the calls made are the ones compared.

Both write the same bodies: the ConfigMap without cbop's owner reference, labels and
annotations (content kept, marked ``cbop.dev/released-by``), then the finalizer off.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from cbop.api import ANNOTATION_RELEASED_BY, FINALIZER_ORPHAN, Reason
from cbop.cli.release import release_main
from cbop.configbundle import Reconciler
from cbop.configbundle.decision import release_body
from cbop.configbundle.release import ConfigMapOutcome, Release, release_deleted
from cbop.informers import CONTROLLER_UID_INDEX, index_by_controller_uid
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS
from cbop_testing.fakekube import CacheLister, FakeKube, conflict_on
from cbop_testing.objects import UID, bundle, written

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
ORPHAN = {"deletionPolicy": "Orphan", "data": {"a": "1"}}


def _world(spec: dict[str, Any] = ORPHAN, *, with_configmap: bool = True) -> FakeKube:
    """A bundle of ``spec`` with cbop's finalizer and its ConfigMap, then deleted."""
    kube = FakeKube()
    found = bundle(spec, finalizers=[FINALIZER_ORPHAN])
    kube.tracker.add(CONFIGBUNDLES, found)
    if with_configmap:
        kube.tracker.add(CONFIGMAPS, written(bundle(ORPHAN)))
    kube.tracker.delete(CONFIGBUNDLES, "demo", "app")  # held by the finalizer
    return kube


def _bundle(kube: FakeKube) -> dict[str, Any]:
    return kube.tracker.get(CONFIGBUNDLES, "demo", "app")


def _writes(kube: FakeKube) -> list[tuple[str, str, str | None]]:
    return [(a.verb, a.resource, a.name) for a in kube.write_actions()]


def test_a_bundle_being_deleted_is_released_as_cbop_releases_it() -> None:
    kube = _world()
    listed = _bundle(kube)
    before = kube.tracker.get(CONFIGMAPS, "demo", "app")
    done = release_deleted(kube, listed)
    assert done == Release("demo/app", "demo/app", ConfigMapOutcome.RELEASED, True)
    assert _writes(kube) == [("update", "configmaps", "app"), ("patch", "configbundles", "app")]
    update = kube.write_actions()[0]
    assert update.body == release_body(before, listed)
    cm = kube.tracker.get(CONFIGMAPS, "demo", "app")
    assert cm["data"] == {"a": "1"}
    assert not cm["metadata"].get("ownerReferences")
    assert cm["metadata"]["annotations"][ANNOTATION_RELEASED_BY] == "demo/app"
    with pytest.raises(Exception, match="not found"):
        _bundle(kube)  # the last finalizer gone: the deletion finished


@pytest.mark.parametrize(
    "found",
    [
        bundle(ORPHAN, finalizers=[FINALIZER_ORPHAN]),  # not being deleted
        bundle(ORPHAN, deleting=True),  # deleted, without cbop's finalizer
        bundle(ORPHAN, deleting=True, finalizers=["example.com/other"]),
    ],
    ids=["live", "no-finalizer", "someone-elses-finalizer"],
)
def test_nothing_is_done_for_a_bundle_cbop_does_not_hold(found: dict[str, Any]) -> None:
    kube = FakeKube()
    assert release_deleted(kube, found) is None
    assert kube.actions == []


def test_a_bundle_in_a_namespace_being_deleted_counts_as_being_deleted() -> None:
    """Right after ``kubectl delete namespace`` the namespace controller has not deleted
    the bundle yet; it will, whatever it holds: released now, as cbop would then."""
    kube = FakeKube()
    kube.tracker.add(CONFIGBUNDLES, bundle(ORPHAN, finalizers=[FINALIZER_ORPHAN]))
    kube.tracker.add(CONFIGMAPS, written(bundle(ORPHAN)))
    done = release_deleted(kube, _bundle(kube), being_deleted=True)
    assert done == Release("demo/app", "demo/app", ConfigMapOutcome.RELEASED, True)
    assert FINALIZER_ORPHAN not in (_bundle(kube)["metadata"].get("finalizers") or ())


def test_the_configmap_gone_with_its_namespace_only_lets_the_bundle_go() -> None:
    kube = _world(with_configmap=False)
    done = release_deleted(kube, _bundle(kube))
    assert done == Release("demo/app", "demo/app", ConfigMapOutcome.GONE, True)
    assert _writes(kube) == [("patch", "configbundles", "app")]


def test_racing_a_running_cbop_nothing_is_done_twice() -> None:
    """cbop released the ConfigMap and took its finalizer off between our list and our
    writes: the ConfigMap is found released (no update), the finalizer patch carrying
    the listed resourceVersion loses its race (409), and a fresh read finds it gone."""
    kube = FakeKube()
    kube.tracker.add(
        CONFIGBUNDLES, bundle(ORPHAN, finalizers=[FINALIZER_ORPHAN, "example.com/hold"])
    )
    kube.tracker.add(CONFIGMAPS, written(bundle(ORPHAN)))
    kube.tracker.delete(CONFIGBUNDLES, "demo", "app")
    listed = _bundle(kube)
    # cbop, meanwhile:
    kube.tracker.put(CONFIGMAPS, release_body(kube.tracker.get(CONFIGMAPS, "demo", "app"), listed))
    held = copy.deepcopy(listed)
    held["metadata"]["finalizers"] = ["example.com/hold"]
    kube.tracker.put(CONFIGBUNDLES, held)
    done = release_deleted(kube, listed)
    assert done == Release("demo/app", "demo/app", ConfigMapOutcome.NOT_CONTROLLED, False)
    assert _writes(kube) == [("patch", "configbundles", "app")]
    assert _bundle(kube)["metadata"]["finalizers"] == ["example.com/hold"]


def test_a_lost_race_on_the_finalizer_is_retried_from_a_fresh_read() -> None:
    kube = _world()
    kube.prepend_reactor("patch", "configbundles", conflict_on(1))
    done = release_deleted(kube, _bundle(kube))
    assert done is not None
    assert done.finalizer_removed
    assert [(a.verb, a.resource) for a in kube.actions if a.verb in ("get", "patch")][-3:] == [
        ("patch", "configbundles"),
        ("get", "configbundles"),
        ("patch", "configbundles"),
    ]


def test_a_bundle_whose_spec_does_not_parse_still_releases_the_configmap_it_names() -> None:
    """The spec went invalid after cbop added the finalizer: the ConfigMap is still
    named (spec.configMapName, else the bundle's name), and released."""
    spec = {**ORPHAN, "data": {"bad key!": "x"}}
    kube = _world(spec)
    done = release_deleted(kube, _bundle(kube))
    assert done is not None
    assert done.outcome is ConfigMapOutcome.RELEASED


class _Harness:
    """A fake API server, caches synced on demand, and cbop's reconciler."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        self.bundles = CacheLister()
        self.configmaps = CacheLister(indexers={CONTROLLER_UID_INDEX: index_by_controller_uid})
        self.sources = CacheLister()
        self.reconciler = Reconciler(
            client=kube,
            bundles=self.bundles,
            configmaps=self.configmaps,
            sources=self.sources,
            now=lambda: NOW,
        )

    def reconcile(self) -> Any:
        tracker = self.kube.tracker
        self.bundles.sync(tracker, CONFIGBUNDLES)
        self.configmaps.sync(tracker, CONFIGMAPS)
        labelled = [
            o
            for o in tracker.objects(CONFIGMAPS)
            if (o["metadata"].get("labels") or {}).get("cbop.dev/source") == "true"
        ]
        self.sources.indexer.replace(labelled, tracker.resource_version)
        return self.reconciler.reconcile("demo/app")


def test_cbop_releases_the_configmap_of_a_bundle_whose_source_fails() -> None:
    """An Orphan bundle whose source is no longer shared keeps its last good content,
    and when it is deleted its ConfigMap is released with that content. cbop used to
    say "released" and leave the owner reference, so the collector deleted it."""
    spec = {
        "deletionPolicy": "Orphan",
        "sources": [{"configMap": {"name": "defaults", "namespace": "platform"}}],
    }
    kube = FakeKube()
    source: dict[str, Any] = {
        "metadata": {
            "name": "defaults",
            "namespace": "platform",
            "labels": {"cbop.dev/source": "true"},
            "annotations": {"cbop.dev/share-with": "demo"},
        },
        "data": {"a": "1"},
    }
    kube.tracker.add(CONFIGMAPS, source)
    kube.tracker.add(CONFIGBUNDLES, bundle(spec))
    h = _Harness(kube)
    assert h.reconcile().ready == "True"
    h.reconcile()  # the finalizer's patch seen
    assert FINALIZER_ORPHAN in _bundle(kube)["metadata"]["finalizers"]
    revoked = copy.deepcopy(source)
    revoked["metadata"]["annotations"]["cbop.dev/share-with"] = "someone-else"
    kube.tracker.put(CONFIGMAPS, revoked)
    assert h.reconcile().reason is Reason.SOURCE_NOT_SHARED
    kube.tracker.delete(CONFIGBUNDLES, "demo", "app")
    h.reconcile()
    cm = kube.tracker.get(CONFIGMAPS, "demo", "app")
    assert cm["data"] == {"a": "1"}
    assert not cm["metadata"].get("ownerReferences")
    assert cm["metadata"]["annotations"][ANNOTATION_RELEASED_BY] == "demo/app"
    assert UID not in str(cm["metadata"])


@pytest.mark.parametrize(
    "argv", [[], ["--all", "--namespace", "demo"]], ids=["no-scope", "both-scopes"]
)
def test_the_command_asks_for_one_scope(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        release_main(argv)
    assert stopped.value.code == 2
    assert "--all" in capsys.readouterr().err
