"""The finalizer part alone: the ``cbop.dev/orphan`` patch and the release it guards.

:class:`cbop.configbundle.release.Finalizer` against the fake API server, with a fake
writer (it notes the releases it is asked for) and fake reports; no reconciler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from cbop.configbundle.decision import Action, FinalizerChange
from cbop.configbundle.interfaces import Requeue
from cbop.configbundle.release import Finalizer
from cbop.kube import CONFIGBUNDLES, ApiError
from cbop_testing.fakekube import FakeKube, errors, fail
from cbop_testing.objects import bundle, decide_for, written

ORPHAN = "cbop.dev/orphan"


class Writer:
    """A fake writer: notes each release, raises ``error`` if given."""

    def __init__(self, error: Exception | None = None) -> None:
        self.released: list[Mapping[str, Any]] = []
        self.error = error

    def release(self, bundle: Mapping[str, Any], body: Mapping[str, Any]) -> None:
        if self.error is not None:
            raise self.error
        self.released.append(body)


class Reports:
    """A fake of the reports: notes Event reasons."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def event(self, bundle: Any, type_: str, reason: str, message: str, **_: Any) -> None:
        self.reasons.append(reason)

    def count(self, operation: str) -> None:
        raise AssertionError("the finalizer counts no ConfigMap write")


def finalizer(
    kube: FakeKube, writer: Writer | None = None, *, dry_run: bool = False
) -> tuple[Finalizer, Writer, Reports]:
    w, r = writer or Writer(), Reports()
    return Finalizer(client=kube, writer=w, reports=r, dry_run=dry_run), w, r


def stored(kube: FakeKube) -> dict[str, Any]:
    return kube.tracker.get(CONFIGBUNDLES, "demo", "app")


def test_add_patches_the_finalizer_on_the_resource_version_read() -> None:
    kube = FakeKube()
    b = kube.tracker.add(CONFIGBUNDLES, bundle(finalizers=["other"]))
    f, _, _ = finalizer(kube)
    patched = f.set(b, FinalizerChange.ADD)
    assert patched["metadata"]["finalizers"] == ["other", ORPHAN]
    (patch,) = kube.write_actions()
    assert patch.body["metadata"]["resourceVersion"] == b["metadata"]["resourceVersion"]
    assert patch.options["patch_type"] == "merge"


def test_a_bundle_changed_meanwhile_is_a_requeue() -> None:
    kube = FakeKube()
    b = kube.tracker.add(CONFIGBUNDLES, bundle())
    kube.tracker.put(CONFIGBUNDLES, {**stored(kube), "spec": {"data": {"a": "2"}}})
    f, _, _ = finalizer(kube)
    with pytest.raises(Requeue):
        f.set(b, FinalizerChange.ADD)  # the resourceVersion read is not the server's
    assert "finalizers" not in stored(kube)["metadata"]


def test_removing_from_a_bundle_gone_meanwhile_is_no_error() -> None:
    kube = FakeKube()
    b = bundle(finalizers=[ORPHAN])
    f, _, _ = finalizer(kube)
    assert f.set(b, FinalizerChange.REMOVE) is b
    kube.prepend_reactor("patch", "configbundles", fail(errors.not_found(CONFIGBUNDLES, "app")))
    with pytest.raises(ApiError) as raised:  # adding to a gone bundle is an error
        f.set(b, FinalizerChange.ADD)
    assert raised.value.is_not_found


def test_a_dry_run_patches_nothing() -> None:
    kube = FakeKube()
    b = kube.tracker.add(CONFIGBUNDLES, bundle())
    f, _, _ = finalizer(kube, dry_run=True)
    assert f.set(b, FinalizerChange.ADD) is b
    assert kube.actions == []


def test_release_lets_go_of_the_configmap_then_of_the_bundle() -> None:
    spec = {"data": {"a": "1"}, "deletionPolicy": "Orphan"}
    cm = written(bundle(spec))
    kube = FakeKube()
    gone = kube.tracker.add(CONFIGBUNDLES, bundle(spec, finalizers=[ORPHAN], deleting=True))
    decision = decide_for(gone, cm)
    assert decision.action is Action.RELEASE
    f, writer, reports = finalizer(kube)
    result = f.release("demo/app", gone, decision)
    assert (result.action, result.pending) == (Action.RELEASE, False)
    assert [body["metadata"]["ownerReferences"] for body in writer.released] == [[]]
    assert reports.reasons == ["Orphaned"]
    assert [(a.verb, a.resource) for a in kube.write_actions()] == [("patch", "configbundles")]
    assert kube.tracker.objects(CONFIGBUNDLES) == []  # its last finalizer gone


def test_release_without_a_configmap_only_drops_the_finalizer() -> None:
    spec = {"data": {"a": "1"}, "deletionPolicy": "Orphan"}
    kube = FakeKube()
    gone = kube.tracker.add(CONFIGBUNDLES, bundle(spec, finalizers=[ORPHAN], deleting=True))
    decision = decide_for(gone, None)
    assert decision.action is Action.RELEASE
    f, writer, reports = finalizer(kube)
    f.release("demo/app", gone, decision)
    assert (writer.released, reports.reasons) == ([], [])
    assert kube.tracker.objects(CONFIGBUNDLES) == []


def test_a_release_that_loses_a_race_keeps_the_finalizer() -> None:
    spec = {"data": {"a": "1"}, "deletionPolicy": "Orphan"}
    cm = written(bundle(spec))
    kube = FakeKube()
    gone = kube.tracker.add(CONFIGBUNDLES, bundle(spec, finalizers=[ORPHAN], deleting=True))
    f, _, reports = finalizer(kube, Writer(Requeue("ConfigMap changed while being released")))
    with pytest.raises(Requeue):
        f.release("demo/app", gone, decide_for(gone, cm))
    assert reports.reasons == []
    assert stored(kube)["metadata"]["finalizers"] == [ORPHAN]


def test_a_dry_run_release_is_pending_and_writes_nothing() -> None:
    spec = {"data": {"a": "1"}, "deletionPolicy": "Orphan"}
    cm = written(bundle(spec))
    kube = FakeKube()
    gone = kube.tracker.add(CONFIGBUNDLES, bundle(spec, finalizers=[ORPHAN], deleting=True))
    f, writer, _ = finalizer(kube, dry_run=True)
    result = f.release("demo/app", gone, decide_for(gone, cm))
    assert result.pending
    assert result.message.startswith(f"would release the ConfigMap and remove the {ORPHAN}")
    assert (writer.released, kube.actions) == ([], [])
