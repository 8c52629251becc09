"""The rollout reconciler's parts alone: the applier, the reporter, the pin planner.

:class:`cbop.rollout.apply.WorkloadApplier` against the fake API server (which keeps
managedFields, so server-side apply conflicts are the server's own);
:class:`cbop.rollout.report.RolloutReporter` with a FakeRecorder;
:class:`cbop.rollout.pins.PinPlanner` over a CacheLister of ConfigMaps. No reconciler
(tests/unit/test_rollout_reconcile.py has the reconciles).
"""

from __future__ import annotations

from typing import Any

import pytest

from cbop.api.revisions import LABEL_REVISION_OF
from cbop.kube import DEPLOYMENTS, NAMESPACES
from cbop.revisions.model import ANNOTATION_REVISIONS
from cbop.rollout import ANNOTATION_CONFIG_HASH, Action, apply_body, decide
from cbop.rollout.apply import WorkloadApplier
from cbop.rollout.decision import ManagedConfigMap
from cbop.rollout.pins import PinPlanner
from cbop.rollout.report import RolloutReporter
from cbop_testing.fakekube import CacheLister, FakeKube, FakeRecorder, ObjectTracker, errors, fail
from cbop_testing.objects import configmap, rolled, workload

OLD = "sha256:" + "0" * 64
NEW = "sha256:" + "1" * 64


# -- the applier -----------------------------------------------------------------------


class Server:
    """A fake server holding the Deployment ``demo/web``, and an applier over it."""

    def __init__(self, *, force: bool = False) -> None:
        self.kube = FakeKube(ObjectTracker(write_managed_fields=True, namespace_lifecycle=True))
        self.kube.tracker.add(NAMESPACES, {"metadata": {"name": "demo"}})
        self.cached = self.kube.tracker.add(DEPLOYMENTS, rolled(workload(volumes=["a"]), OLD))
        self.applier = WorkloadApplier(resource=DEPLOYMENTS, client=self.kube, force=force)

    def body(self, digest: str = NEW) -> dict[str, Any]:
        return apply_body(self.cached, DEPLOYMENTS.api_version, DEPLOYMENTS.kind, digest)

    def stored(self) -> dict[str, Any]:
        return self.kube.tracker.get(DEPLOYMENTS, "demo", "web")

    def written_by(self, manager: str, *, apply: bool) -> None:
        """``manager`` writes the annotation, with a server-side apply or a plain update."""
        annotations = {ANNOTATION_CONFIG_HASH: "theirs"}
        if apply:
            body: dict[str, Any] = {
                "apiVersion": DEPLOYMENTS.api_version,
                "kind": DEPLOYMENTS.kind,
                "metadata": {"name": "web", "namespace": "demo"},
                "spec": {"template": {"metadata": {"annotations": annotations}}},
            }
            self.kube.tracker.patch(
                DEPLOYMENTS, "demo", "web", body, patch_type="apply", field_manager=manager
            )
        else:
            body = {"spec": {"template": {"metadata": {"annotations": annotations}}}}
            self.kube.tracker.patch(DEPLOYMENTS, "demo", "web", body, field_manager=manager)
        self.cached = self.stored()

    def forces(self) -> list[bool]:
        return [a.options["force"] for a in self.kube.write_actions() if a.verb == "patch"]


MARK = ("uid-web", 1, NEW)


def test_an_apply_is_pending_until_the_cache_shows_it() -> None:
    s = Server()
    applied = s.applier.apply("demo/web", s.cached, s.body(), digest=NEW, mark=MARK)
    assert (applied.gone, applied.conflict, applied.took_back) == (False, None, ())
    assert s.forces() == [False]
    assert s.stored()["spec"]["template"]["metadata"]["annotations"][ANNOTATION_CONFIG_HASH] == NEW
    assert s.applier.pending("demo/web", s.cached, NEW)  # the cache is behind the apply
    assert not s.applier.pending("demo/web", s.cached, OLD)  # another digest
    assert not s.applier.pending("demo/web", s.stored(), NEW)  # the cache caught up
    s.applier.forget("demo/web")
    assert not s.applier.pending("demo/web", s.cached, NEW)


def test_a_conflict_with_an_applier_is_not_forced_and_remembered_at_its_mark() -> None:
    s = Server()
    s.written_by("argocd-controller", apply=True)
    applied = s.applier.apply("demo/web", s.cached, s.body(), digest=NEW, mark=MARK)
    assert applied.conflict is not None
    assert "argocd-controller" in applied.conflict
    assert applied.error is not None
    assert applied.error.is_conflict
    assert s.forces() == [False]
    assert s.applier.refused("demo/web", MARK)
    assert not s.applier.refused("demo/web", ("uid-web", 2, NEW))  # the spec changed
    assert not s.applier.pending("demo/web", s.cached, NEW)
    s.applier.forget("demo/web")
    assert not s.applier.refused("demo/web", MARK)


def test_keys_a_plain_update_took_are_taken_back_with_force() -> None:
    s = Server()
    s.written_by("kubectl-rollout", apply=False)
    applied = s.applier.apply("demo/web", s.cached, s.body(), digest=NEW, mark=MARK)
    assert [o.manager for o in applied.took_back] == ["kubectl-rollout"]
    assert s.forces() == [False, True]
    assert [a.verb for a in s.kube.actions if a.resource == "deployments"] == [
        "patch",
        "get",
        "patch",
    ]
    assert s.stored()["spec"]["template"]["metadata"]["annotations"][ANNOTATION_CONFIG_HASH] == NEW


def test_with_force_the_keys_are_taken_from_anyone_at_once() -> None:
    s = Server(force=True)
    s.written_by("argocd-controller", apply=True)
    applied = s.applier.apply("demo/web", s.cached, s.body(), digest=NEW, mark=MARK)
    assert (applied.conflict, applied.took_back) == (None, ())
    assert s.forces() == [True]


def test_a_workload_deleted_meanwhile_is_gone() -> None:
    s = Server()
    s.kube.prepend_reactor("patch", "deployments", fail(errors.not_found(DEPLOYMENTS, "web")))
    applied = s.applier.apply("demo/web", s.cached, s.body(), digest=NEW, mark=MARK)
    assert applied.gone
    assert not s.applier.pending("demo/web", s.cached, NEW)


def test_another_failure_is_raised() -> None:
    s = Server()
    s.kube.prepend_reactor("patch", "deployments", fail(errors.internal_error("down"), times=1))
    with pytest.raises(Exception, match="down"):
        s.applier.apply("demo/web", s.cached, s.body(), digest=NEW, mark=MARK)
    assert not s.applier.refused("demo/web", MARK)


# -- the reporter ----------------------------------------------------------------------


class Counter:
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def rolled_out(self, kind: str) -> None:
        self.kinds.append(kind)


def managed(*pairs: tuple[str, str]) -> list[ManagedConfigMap]:
    return [ManagedConfigMap(name=n, bundle=f"demo/{n}", content_hash=h) for n, h in pairs]


def reporter() -> tuple[RolloutReporter, FakeRecorder, Counter]:
    recorder, counter = FakeRecorder(), Counter()
    return (
        RolloutReporter(resource=DEPLOYMENTS, recorder=recorder, observer=counter),
        recorder,
        counter,
    )


def test_a_roll_names_only_what_changed_since_the_last_look() -> None:
    r, recorder, counter = reporter()
    web = workload(volumes=["a", "b"])
    first = r.describe(web, managed(("a", OLD), ("b", OLD)))
    assert first.startswith("ConfigBundle(s) demo/a, demo/b changed (ConfigMaps a, b)")
    r.seen(web, managed(("a", OLD), ("b", OLD)))
    message = r.describe(web, managed(("a", NEW), ("b", OLD)))
    assert message.startswith("ConfigBundle(s) demo/a changed (ConfigMaps a);")
    assert f"{ANNOTATION_CONFIG_HASH} set to sha256:" in message
    r.rolled(web, managed(("a", NEW), ("b", OLD)), message)
    assert [(e.kind, e.name, e.reason) for e in recorder.recorded] == [
        ("Deployment", "web", "ConfigChanged")
    ]
    assert counter.kinds == ["Deployment"]
    gone = r.describe(web, managed(("a", NEW)))
    assert "ConfigMap(s) b no longer managed by cbop" in gone


def test_a_pin_is_reported_as_revisions_pinned() -> None:
    r, recorder, _ = reporter()
    r.rolled(workload(), managed(("a", OLD)), "pinned", pinned=True)
    assert [e.reason for e in recorder.recorded] == ["RevisionsPinned"]


def test_paused_and_refused_are_reported_once_per_mark() -> None:
    r, recorder, _ = reporter()
    web = workload(paused=True)
    assert r.paused("demo/web", web, MARK, "paused")
    assert not r.paused("demo/web", web, MARK, "paused")
    assert r.refused("demo/web", web, "a loop", MARK)
    assert not r.refused("demo/web", web, "a loop", MARK)
    assert r.paused("demo/web", web, ("uid-web", 2, NEW), "paused")  # a new generation
    r.forget("demo/web")
    assert r.refused("demo/web", web, "a loop", MARK)
    assert [(e.type, e.reason) for e in recorder.recorded] == [
        ("Normal", "RolloutPaused"),
        ("Warning", "RevisionsNotPinned"),
        ("Normal", "RolloutPaused"),
        ("Warning", "RevisionsNotPinned"),
    ]
    r.conflict(web, "taken")
    assert recorder.recorded[-1].reason == "RolloutConflict"


# -- the pin planner -------------------------------------------------------------------


def revision_of(cm: dict[str, Any]) -> dict[str, Any]:
    """The revision ConfigMap of ``cm``'s content, as the bundle's side makes it."""
    meta = cm["metadata"]
    digits = meta["annotations"]["cbop.dev/content-hash"].removeprefix("sha256:")[:10]
    labels = {**meta["labels"], LABEL_REVISION_OF: meta["labels"]["cbop.dev/bundle"]}
    return {**cm, "metadata": {**meta, "name": f"{meta['name']}-{digits}", "labels": labels}}


def plan(cms: list[dict[str, Any]], w: dict[str, Any]) -> tuple[Any, Any]:
    planner = PinPlanner(CacheLister(cms), DEPLOYMENTS.kind)
    cached = {cm["metadata"]["name"]: cm for cm in cms}
    return planner.plan(w, decide(w, cached, frozenset()))


def test_a_workload_without_a_managed_reference_asks_nothing() -> None:
    w = workload(volumes=["a"])
    decision = decide(w, {}, frozenset())
    pin, planned = PinPlanner(CacheLister(), DEPLOYMENTS.kind).plan(w, decision)
    assert (dict(pin.mapping), pin.pin, pin.refused) == ({}, False, None)
    assert planned is decision


def test_a_template_reading_a_revisioned_configmap_by_name_is_pinned_once() -> None:
    a = configmap("a")
    w = workload(volumes=["a"])
    _, first = plan([a, revision_of(a)], w)
    in_sync = rolled(w, first.digest)  # rolled for this content already
    pin, decision = plan([a, revision_of(a)], in_sync)
    assert pin.pin
    assert dict(pin.mapping) == {"a": revision_of(a)["metadata"]["name"]}
    assert (decision.action, decision.digest) == (Action.APPLY, first.digest)
    body = PinPlanner.body(
        apply_body(in_sync, DEPLOYMENTS.api_version, DEPLOYMENTS.kind, decision.digest),
        pin,
        decision.digest,
    )
    assert ANNOTATION_REVISIONS in body["spec"]["template"]["metadata"]["annotations"]
    paused = rolled(workload(volumes=["a"], paused=True), first.digest)
    pin, decision = plan([a, revision_of(a)], paused)
    assert (pin.pin, decision.action) == (True, Action.SKIP)
    assert "paused" in decision.message


def test_a_roll_carries_the_mapping_and_is_no_pin() -> None:
    a = configmap("a")
    w = rolled(workload(volumes=["a"]), OLD)  # rolled for older content: this one rolls
    pin, decision = plan([a, revision_of(a)], w)
    assert decision.action is Action.APPLY
    assert not pin.pin
    assert dict(pin.mapping) == {"a": revision_of(a)["metadata"]["name"]}
