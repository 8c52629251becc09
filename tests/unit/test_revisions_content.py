"""Revisions cached without their content, and the rare paths that need it.

The managed-ConfigMap informer keeps a revision (its name carries its content hash)
without ``data`` and ``binaryData``, from its list and its watch alike; a revision made
again from another one reads that one's content with one GET, its failures reported as
any failed request of the reconcile; a revision held again is patched, never written
back whole (docs/revisions.md).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cbop.api import content_hash
from cbop.api.revisions import LABEL_REVISION_OF
from cbop.configbundle import controller as configbundle
from cbop.informers import FuncHandler, SharedInformerFactory
from cbop.kube import CONFIGMAPS, REPLICASETS, ApiError
from cbop.metrics.controller import ConfigMapWriteMetrics
from cbop.revisions.objects import content_left_out, read_back, strip_revision_content
from cbop.rollout import controller as rollout
from cbop.runtime import Scope
from cbop_testing.fakekube import FakeKube, errors
from cbop_testing.fakekube.reactions import fail

from .revisionworld import World, replicaset, rev

KEEP2 = {"enabled": True, "keep": 2}


def gets(w: World) -> list[str]:
    """The ConfigMaps the last reconcile read with a GET."""
    return [a.name or "" for a in w.kube.actions if a.verb == "get" and a.resource == "configmaps"]


def other_bundles_revision(w: World, data: dict[str, str]) -> str:
    """Add bundle ``other``'s revision of ``data`` to the server (as cbop makes it); its name."""
    name = rev(data, "other")
    template = w.configmap(w.bundle()["status"]["revision"])
    meta = template["metadata"]
    w.kube.tracker.add(
        CONFIGMAPS,
        {
            "metadata": {
                "namespace": "demo",
                "name": name,
                "labels": {**meta["labels"], LABEL_REVISION_OF: "other"},
                "annotations": {"cbop.dev/content-hash": content_hash(data, {})},
                "ownerReferences": [
                    {**meta["ownerReferences"][0], "name": "other", "uid": "uid-other"}
                ],
            },
            "immutable": True,
            "data": dict(data),
        },
    )
    return name


def lost_revision(w: World) -> tuple[str, str]:
    """``{"a": "1"}``'s revision of ``app``, named by a ReplicaSet and deleted by hand,
    while bundle ``other`` holds a revision of the same content: (gone, other)."""
    w.settle()
    w.set_spec({"data": {"a": "2"}, "revisions": KEEP2})
    w.settle()
    gone = rev({"a": "1"})
    w.kube.tracker.add(REPLICASETS, replicaset("web-1", {"app": gone}))
    other = other_bundles_revision(w, {"a": "1"})
    w.kube.tracker.delete(CONFIGMAPS, "demo", gone)
    return gone, other


def test_the_cache_keeps_revisions_without_content_and_plain_configmaps_whole() -> None:
    w = World({"data": {"a": "1"}, "revisions": KEEP2})
    w.settle()
    name = rev({"a": "1"})
    cached = w.configmaps.get("demo", name)
    assert cached is not None
    assert "data" not in cached
    assert cached["metadata"]["annotations"]["cbop.dev/content-hash"] == content_hash(
        {"a": "1"}, {}
    )
    assert w.configmap(name)["data"] == {"a": "1"}
    plain = w.configmaps.get("demo", "app")
    assert plain is not None
    assert plain["data"] == {"a": "1"}


def test_a_plain_configmap_shaped_like_a_revision_is_cached_whole_and_left_alone() -> None:
    """spec.labels may carry the revision label, and spec.immutable: the controller
    reference (and its name) still tell the plain ConfigMap from a revision."""
    spec = {
        "data": {"a": "1"},
        "labels": {LABEL_REVISION_OF: "app"},
        "immutable": True,
        "revisions": KEEP2,
    }
    w = World(spec)
    w.settle()
    plain = w.configmaps.get("demo", "app")
    assert plain is not None
    assert plain["data"] == {"a": "1"}
    assert not content_left_out(plain)
    assert w.reconcile() == []


def test_the_transform_drops_content_and_managed_fields_of_a_revision_only() -> None:
    w = World({"data": {"a": "1"}, "revisions": KEEP2})
    w.settle()
    revision = w.configmap(rev({"a": "1"}))
    revision["metadata"]["managedFields"] = [{"manager": "cbop"}]
    stripped = strip_revision_content(dict(revision, metadata=dict(revision["metadata"])))
    assert set(revision) - set(stripped) == {"data"}
    assert "managedFields" not in stripped["metadata"]
    # Under another name (not the head of its hash) it is not taken for a revision.
    renamed = dict(revision, metadata={**revision["metadata"], "name": "copy"})
    assert strip_revision_content(renamed)["data"] == {"a": "1"}


def reads(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("cbop_revision_content_reads_total")


def test_a_revision_made_again_from_another_revision_reads_its_content_with_one_get() -> None:
    registry = CollectorRegistry()
    w = World({"data": {"a": "1"}, "revisions": KEEP2}, observer=ConfigMapWriteMetrics(registry))
    gone, other = lost_revision(w)
    assert reads(registry) == 0
    assert w.reconcile() == [("create", "configmaps", gone)]
    assert gets(w) == [other]
    assert reads(registry) == 1
    made = w.configmap(gone)
    assert made["data"] == {"a": "1"}
    assert made["immutable"] is True
    assert made["metadata"]["labels"][LABEL_REVISION_OF] == "app"
    assert made["metadata"]["annotations"]["cbop.dev/content-hash"] == content_hash({"a": "1"}, {})
    assert w.reconcile() == []
    assert gets(w) == []
    assert reads(registry) == 1


def test_a_revision_of_the_current_content_is_made_again_without_a_get() -> None:
    w = World({"data": {"a": "1"}, "revisions": KEEP2})
    w.settle()
    name = rev({"a": "1"})
    w.kube.tracker.add(REPLICASETS, replicaset("web-1", {"app": name}))
    w.kube.tracker.delete(CONFIGMAPS, "demo", name)
    assert w.reconcile() == [("create", "configmaps", name)]
    assert gets(w) == []
    assert w.configmap(name)["data"] == {"a": "1"}


def test_a_source_gone_before_its_get_leaves_the_revision_missing_and_reported() -> None:
    w = World({"data": {"a": "1"}, "revisions": KEEP2})
    gone, other = lost_revision(w)
    w.kube.prepend_reactor(
        "get",
        "configmaps",
        fail(lambda a: errors.not_found(CONFIGMAPS, a.name or ""), when=lambda a: a.name == other),
    )
    w.reconcile()
    assert gets(w) == [other]
    assert gone not in w.configmap_names()
    pinned = w.condition("Pinned")
    assert pinned is not None
    assert (pinned["status"], pinned["reason"]) == ("False", "RevisionMissing")
    assert gone in pinned["message"]


def test_a_failed_get_fails_the_reconcile_with_a_condition_and_the_retry_makes_it() -> None:
    w = World({"data": {"a": "1"}, "revisions": KEEP2})
    gone, other = lost_revision(w)
    w.kube.prepend_reactor(
        "get",
        "configmaps",
        fail(
            ApiError(500, "InternalError", "etcd is away"), times=1, when=lambda a: a.name == other
        ),
    )
    with pytest.raises(ApiError):
        w.reconcile()
    ready = w.condition("Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "ReconcileError")
    assert "etcd is away" in ready["message"]
    assert ("create", "configmaps", gone) in w.reconcile()
    assert w.configmap(gone)["data"] == {"a": "1"}


def test_a_get_finding_another_object_under_the_name_copies_nothing() -> None:
    w = World({"data": {"a": "1"}, "revisions": KEEP2})
    w.settle()
    cached = w.configmaps.get("demo", rev({"a": "1"}))
    assert cached is not None
    fresh = w.configmap(rev({"a": "1"}))
    assert read_back(cached, fresh) == fresh
    assert read_back(cached, None) is None
    assert read_back(cached, {**fresh, "metadata": {**fresh["metadata"], "uid": "new"}}) is None
    assert read_back(cached, {**fresh, "data": {"a": "changed"}}) is None


# ---------------------------------------------------------------- the informer itself


def test_the_shared_informer_strips_revisions_listed_and_watched() -> None:
    """Both controllers share the managed-ConfigMap informer, whichever is set up first."""
    w = World({"data": {"a": "1"}, "revisions": KEEP2})
    w.settle()
    listed = rev({"a": "1"})
    kube = FakeKube(w.kube.tracker)
    informers = SharedInformerFactory(kube, namespaces=["demo"], resync_period=0)
    scope = Scope(kube, informers=informers)
    rollout.setup(scope)
    configbundle.setup(scope)
    lister = scope.lister(CONFIGMAPS, label_selector="app.kubernetes.io/managed-by=cbop")
    (informer,) = informers.informers_for(
        CONFIGMAPS, label_selector="app.kubernetes.io/managed-by=cbop"
    ).values()
    seen: list[Mapping[str, Any]] = []
    cond = threading.Condition()

    def added(obj: Mapping[str, Any]) -> None:
        with cond:
            seen.append(obj)
            cond.notify_all()

    informer.add_event_handler(FuncHandler(on_add=added))
    try:
        informers.start()
        assert informers.wait_for_cache_sync(5.0)
        kube.wait_watching("configmaps", "demo")
        watched = other_bundles_revision(w, {"b": "1"})
        with cond:
            assert cond.wait_for(lambda: any(o["metadata"]["name"] == watched for o in seen), 5)
        for name in (listed, watched):
            cached = lister.get("demo", name)
            assert cached is not None
            assert "data" not in cached
        plain = lister.get("demo", "app")
        assert plain is not None
        assert plain["data"] == {"a": "1"}
    finally:
        informers.shutdown()
