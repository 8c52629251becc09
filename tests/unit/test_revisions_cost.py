"""What a bundle's reconcile reads of a long pinned history: counts, not the history.

Every ReplicaSet and pod of a rollout names every bundle its template reads, and each
of their events wakes each of those bundles: a reconcile that read every holder naming
the bundle would cost events x bundles per template x history. These tests count the
holders whose mapping a reconcile reads (:func:`cbop.revisions.model.mapping_of`, in
every module of the revision checks) on the fake API server
(tests/unit/revisionworld.py): none of a history whose revisions all exist, and only
the holders of a revision that is gone when one is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from cbop.kube import CONFIGMAPS, DEPLOYMENTS, PODS, REPLICASETS
from cbop.revisions import bundle as bundle_module
from cbop.revisions import caches, model, verify

from .revisionworld import ON, World, deployment, pod, replicaset, rev

#: The history of S12 for one Deployment's bundle: 1,100 ReplicaSets, 100 pods.
REPLICASETS_KEPT = 1_100
PODS_RUNNING = 100


def _read_by_reconcile(w: World, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Sync the caches, reconcile once; return the names of the objects whose mapping it read."""
    w.sync()
    w.kube.clear_actions()
    read: list[str] = []
    real = model.mapping_of

    def counted(obj: Mapping[str, Any]) -> dict[str, str]:
        read.append(str(obj["metadata"]["name"]))
        return real(obj)

    with monkeypatch.context() as patch:
        for module in (bundle_module, verify, caches):
            patch.setattr(module, "mapping_of", counted)
        w.result = w.reconciler.reconcile(w.key)
    w.recorder.flush()
    return read


def _long_history(contents: int) -> World:
    """A bundle of ``contents`` successive contents, named by 1,100 ReplicaSets and 100 pods."""
    w = World({"data": {"a": "0"}, "revisions": ON})
    w.settle()
    per_content = REPLICASETS_KEPT // contents
    for c in range(contents):
        if c:
            w.set_spec({"data": {"a": str(c)}, "revisions": ON})
            w.settle()
        mapping = {"app": rev({"a": str(c)})}
        for i in range(per_content):
            w.kube.tracker.add(REPLICASETS, replicaset(f"web-{c}-{i}", mapping))
    last = {"app": rev({"a": str(contents - 1)})}
    for i in range(PODS_RUNNING):
        name = f"web-{contents - 1}-{i}"
        w.kube.tracker.add(PODS, pod(f"{name}-a", name, last, reads=last["app"]))
    w.kube.tracker.add(DEPLOYMENTS, deployment(last))
    w.settle()
    return w


def test_a_no_op_reconcile_reads_no_holder_of_a_long_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w = _long_history(contents=4)
    cond = w.condition()
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("True", "Pinned")
    read = _read_by_reconcile(w, monkeypatch)
    assert w.kube.actions == []
    # The Deployment that reads the ConfigMap, once: not one ReplicaSet or pod.
    assert read == ["web"]


def test_a_change_of_content_reads_no_holder_of_a_long_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w = _long_history(contents=4)
    w.set_spec({"data": {"a": "new"}, "revisions": ON})
    read = _read_by_reconcile(w, monkeypatch)
    created = [a.name for a in w.kube.actions if a.verb == "create" and a.resource == "configmaps"]
    assert created == [rev({"a": "new"})]
    assert read == ["web"]
    cond = w.condition()
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("True", "Pinned")


def test_with_a_revision_gone_only_the_holders_naming_it_are_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": {"a": "0"}, "revisions": keep1})
    w.settle()
    gone = rev({"a": "0"})
    w.kube.tracker.add(REPLICASETS, replicaset("web-old", {"app": gone}))
    w.set_spec({"data": {"a": "1"}, "revisions": keep1})
    w.settle()
    current = {"app": rev({"a": "1"})}
    for i in range(REPLICASETS_KEPT):
        w.kube.tracker.add(REPLICASETS, replicaset(f"web-{i}", current))
    w.kube.tracker.add(DEPLOYMENTS, deployment(current))
    # Deleted by hand, its content held nowhere: reported, not made again.
    w.kube.tracker.delete(CONFIGMAPS, "demo", gone)
    w.settle()
    cond = w.condition()
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("False", "RevisionMissing")
    assert cond["message"] == (
        f"Deployment/web: ReplicaSet web-old names revision {gone}, which is gone and "
        "whose content cbop no longer has: its new pods cannot start"
    )
    read = _read_by_reconcile(w, monkeypatch)
    assert w.kube.actions == []
    # The missing-revision check and the verdict each read the one holder of the
    # revision that is gone; the verdict reads the reader.
    assert sorted(read) == ["web", "web-old", "web-old"]
