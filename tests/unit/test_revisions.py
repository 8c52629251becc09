"""Revision ConfigMaps of the ConfigBundle reconcile, on the fake API server.

As the other act-layer tests: the reconcile is called directly, its caches synced from
the fake server's tracker between reconciles (the watch caught up), and the recorded
API actions are compared with the expected ones.
"""

from __future__ import annotations

import datetime
from typing import Any

import structlog

from cbop.api import content_hash
from cbop.api.revisions import LABEL_REVISION_OF, PARAMS_NAME, revision_name
from cbop.configbundle import Action, Reconciler
from cbop.configbundle.pinpolicy import PinPolicyCheck
from cbop.configbundle.revisions import (
    POLICY_RECHECK,
    REVISION_OF_INDEX,
    index_by_revision_of,
    revision_owners,
    revisions_pinned_by,
)
from cbop.informers import CONTROLLER_UID_INDEX, index_by_controller_uid
from cbop.kube import (
    CONFIGBUNDLES,
    CONFIGMAPS,
    MUTATINGADMISSIONPOLICIES,
    MUTATINGADMISSIONPOLICYBINDINGS,
)
from cbop.runtime.events import EventRecorder
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import CacheLister, FakeKube, ObjectTracker
from cbop_testing.fakekube.errors import forbidden
from cbop_testing.fakekube.reactions import fail
from cbop_testing.objects import UID, bundle

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
ON = {"enabled": True}

Call = tuple[str, str, str]


def writes(kube: FakeKube) -> list[Call]:
    """The writes made, Events left out: (verb[/subresource], resource, name)."""
    return [
        (f"{a.verb}/{a.subresource}" if a.subresource else a.verb, a.resource, a.name or "")
        for a in kube.actions
        if a.verb not in ("get", "list") and a.resource != "events"
    ]


def rev(data: dict[str, str], name: str = "app") -> str:
    """The revision name of ``data`` under ConfigMap ``name``."""
    return revision_name(name, content_hash(data, {}))


class World:
    """A fake API server and one reconciler whose caches follow it."""

    def __init__(
        self, spec: dict[str, Any], *, dry_run: bool = False, check_policy: bool = False, **kw: Any
    ) -> None:
        # The server's clock (creationTimestamp): stepped between changes.
        self.clock = FakeClock(1_767_225_600.0)
        self.kube = FakeKube(ObjectTracker(now=self.clock.now))
        self.policy = PinPolicyCheck(self.kube, clock=self.clock) if check_policy else None
        self.kube.tracker.add(CONFIGBUNDLES, bundle(spec, **kw))
        self.bundles = CacheLister(())
        self.configmaps = CacheLister(
            (),
            indexers={
                CONTROLLER_UID_INDEX: index_by_controller_uid,
                REVISION_OF_INDEX: index_by_revision_of,
            },
        )
        self.recorder = EventRecorder(self.kube, clock=lambda: NOW, level="all")
        self.reconciler = Reconciler(
            client=self.kube,
            bundles=self.bundles,
            configmaps=self.configmaps,
            recorder=self.recorder,
            now=lambda: NOW,
            dry_run=dry_run,
            pin_policy=self.policy,
        )
        self.key = f"demo/{kw.get('name', 'app')}"

    def reconcile(self) -> list[Call]:
        """Sync the caches, reconcile once, return the writes made."""
        self.bundles.sync(self.kube.tracker, CONFIGBUNDLES)
        self.configmaps.sync(self.kube.tracker, CONFIGMAPS)
        self.kube.clear_actions()
        self.result = self.reconciler.reconcile(self.key)
        self.recorder.flush()
        return writes(self.kube)

    def settle(self) -> None:
        """Reconcile until a reconcile writes nothing (at most five times)."""
        for _ in range(5):
            if not self.reconcile():
                return
        raise AssertionError("the reconcile never settled")

    def bundle(self) -> dict[str, Any]:
        name = self.key.partition("/")[2]
        return self.kube.tracker.get(CONFIGBUNDLES, "demo", name)

    def set_spec(self, spec: dict[str, Any]) -> None:
        self.clock.step(60)
        b = self.bundle()
        b["spec"] = spec
        b["metadata"]["generation"] += 1
        self.kube.tracker.add(CONFIGBUNDLES, b)

    def configmap(self, name: str) -> dict[str, Any]:
        return self.kube.tracker.get(CONFIGMAPS, "demo", name)

    def configmap_names(self) -> list[str]:
        return sorted(o["metadata"]["name"] for o in self.kube.tracker.objects(CONFIGMAPS))


def owned_by_replicaset(w: World, name: str) -> dict[str, str]:
    """Give revision ``name`` a ReplicaSet's owner reference too (as the history does)."""
    replicaset = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "rs-1"}
    revision = w.configmap(name)
    revision["metadata"]["ownerReferences"].append(replicaset)
    w.kube.tracker.add(CONFIGMAPS, revision)
    return replicaset


def gc_removes(w: World, name: str, uid: str) -> None:
    """The garbage collector's patch: the reference to ``uid`` removed, whatever the version."""
    cm = w.configmap(name)
    refs = cm["metadata"]["ownerReferences"]
    cm["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
    w.kube.tracker.put(CONFIGMAPS, cm)


def test_a_new_bundle_makes_its_revision_first_then_the_plain_configmap() -> None:
    """The revision exists before any reader can see the content under the plain name."""
    w = World({"data": {"a": "1"}, "revisions": ON})
    assert w.reconcile() == [
        ("create", "configmaps", rev({"a": "1"})),
        ("create", "configmaps", "app"),
        ("patch/status", "configbundles", "app"),
    ]
    assert w.bundle()["status"]["revision"] == rev({"a": "1"})
    assert w.result.ready == "True"
    revision = w.configmap(rev({"a": "1"}))
    assert revision["immutable"] is True
    assert revision["data"] == {"a": "1"}
    meta = revision["metadata"]
    assert meta["labels"][LABEL_REVISION_OF] == "app"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "cbop"
    assert meta["annotations"]["cbop.dev/content-hash"] == content_hash({"a": "1"}, {})
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "cbop.dev/v1beta1",
            "kind": "ConfigBundle",
            "name": "app",
            "uid": UID,
            "controller": False,
            "blockOwnerDeletion": False,
        }
    ]
    # The plain ConfigMap is as without revisions: mutable, controlled by the bundle.
    assert "immutable" not in w.configmap("app")


def test_steady_state_writes_nothing_and_makes_no_request() -> None:
    w = World({"data": {"a": "1"}, "revisions": ON})
    w.settle()
    for _ in range(3):
        assert w.reconcile() == []
        assert w.result.action is Action.NONE
    assert w.kube.actions == []


def test_a_change_makes_a_new_revision_and_keeps_the_old() -> None:
    w = World({"data": {"a": "1"}, "revisions": ON})
    w.settle()
    w.set_spec({"data": {"a": "2"}, "revisions": ON})
    assert w.reconcile() == [
        ("create", "configmaps", rev({"a": "2"})),
        ("update", "configmaps", "app"),
        ("patch/status", "configbundles", "app"),
    ]
    w.settle()
    assert w.configmap_names() == sorted(["app", rev({"a": "1"}), rev({"a": "2"})])
    assert w.bundle()["status"]["revision"] == rev({"a": "2"})
    assert w.configmap("app")["data"] == {"a": "2"}


def test_a_revert_creates_no_revision() -> None:
    """The revision of earlier content exists: only the plain ConfigMap and status change."""
    w = World({"data": {"a": "1"}, "revisions": ON})
    w.settle()
    w.set_spec({"data": {"a": "2"}, "revisions": ON})
    w.settle()
    w.set_spec({"data": {"a": "1"}, "revisions": ON})
    assert w.reconcile() == [
        ("update", "configmaps", "app"),
        ("patch/status", "configbundles", "app"),
    ]
    assert w.bundle()["status"]["revision"] == rev({"a": "1"})
    w.settle()
    assert w.configmap_names() == sorted(["app", rev({"a": "1"}), rev({"a": "2"})])


def test_a_revision_deleted_by_hand_is_made_again() -> None:
    w = World({"data": {"a": "1"}, "revisions": ON})
    w.settle()
    name = rev({"a": "1"})
    revision = w.configmap(name)
    assert revision_owners(revision) == ["demo/app"]
    w.kube.tracker.delete(CONFIGMAPS, "demo", name)
    assert w.reconcile() == [("create", "configmaps", name)]
    w.settle()
    assert name in w.configmap_names()


def test_a_revision_that_lost_the_bundle_reference_gets_it_back() -> None:
    w = World({"data": {"a": "1"}, "revisions": ON})
    w.settle()
    name = rev({"a": "1"})
    revision = w.configmap(name)
    revision["metadata"]["ownerReferences"] = []
    w.kube.tracker.add(CONFIGMAPS, revision)
    w.set_spec({"data": {"a": "1"}, "revisions": {"enabled": True, "keep": 2}})
    assert ("update", "configmaps", name) in w.reconcile()
    assert [r["uid"] for r in w.configmap(name)["metadata"]["ownerReferences"]] == [UID]


def test_a_name_too_long_for_the_suffix_is_invalid_and_the_plain_configmap_kept() -> None:
    long_name = "b" * 250
    w = World({"data": {"a": "1"}, "revisions": ON}, name=long_name)
    w.settle()
    assert w.configmap_names() == [long_name]
    assert w.result.ready == "False"
    status = w.bundle()["status"]
    (ready,) = status["conditions"]
    assert ready["reason"] == "InvalidSpec"
    assert "at most 242" in ready["message"]
    assert "revision" not in status
    assert w.reconcile() == []


def test_revisions_turned_off_removes_status_revision_and_keeps_the_revisions() -> None:
    w = World({"data": {"a": "1"}, "revisions": ON})
    w.settle()
    w.set_spec({"data": {"a": "1"}, "revisions": {"enabled": False}})
    assert w.reconcile() == [("patch/status", "configbundles", "app")]
    assert w.kube.actions[-1].body["status"]["revision"] is None
    w.settle()
    assert "revision" not in w.bundle()["status"]
    assert rev({"a": "1"}) in w.configmap_names()


def test_a_foreign_configmap_at_the_revision_name_is_a_conflict() -> None:
    name = rev({"a": "1"})
    w = World({"data": {"a": "1"}, "revisions": ON})
    w.kube.tracker.add(
        CONFIGMAPS,
        {"metadata": {"name": name, "namespace": "demo"}, "data": {"x": "y"}},
    )
    w.settle()
    assert w.result.ready == "False"
    assert w.result.reason is not None
    assert w.result.reason.value == "ConfigMapConflict"
    assert name in w.result.message
    assert w.configmap(name)["data"] == {"x": "y"}
    assert w.configmap("app")["data"] == {"a": "1"}


def test_revisions_off_by_default_make_none() -> None:
    w = World({"data": {"a": "1"}})
    w.settle()
    assert w.configmap_names() == ["app"]
    assert "revision" not in w.bundle()["status"]


def test_revision_owners_maps_only_revisions() -> None:
    plain = {
        "metadata": {
            "namespace": "demo",
            "name": "app",
            "ownerReferences": [{"apiVersion": "cbop.dev/v1beta1", "kind": "ConfigBundle"}],
        }
    }
    assert revision_owners(plain) == []


def test_the_bundle_holds_the_newest_keep_and_deletes_older_revisions_it_alone_held() -> None:
    keep2 = {"enabled": True, "keep": 2}
    w = World({"data": {"a": "1"}, "revisions": keep2})
    w.settle()
    w.set_spec({"data": {"a": "2"}, "revisions": keep2})
    w.settle()
    assert w.configmap_names() == sorted(["app", rev({"a": "1"}), rev({"a": "2"})])
    w.set_spec({"data": {"a": "3"}, "revisions": keep2})
    first = w.configmap(rev({"a": "1"}))
    assert w.reconcile() == [
        ("create", "configmaps", rev({"a": "3"})),
        ("delete", "configmaps", rev({"a": "1"})),
        ("update", "configmaps", "app"),
        ("patch/status", "configbundles", "app"),
    ]
    # Deleted on the precondition of the version cbop saw: never one that gained an owner.
    (delete,) = [a for a in w.kube.actions if a.verb == "delete"]
    assert delete.options["preconditions"] == {
        "uid": first["metadata"]["uid"],
        "resourceVersion": first["metadata"]["resourceVersion"],
    }
    w.settle()
    assert w.configmap_names() == sorted(["app", rev({"a": "2"}), rev({"a": "3"})])
    assert w.reconcile() == []


def test_an_older_revision_with_other_owners_is_deleted_once_they_are_gone() -> None:
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": {"a": "1"}, "revisions": keep1})
    w.settle()
    replicaset = owned_by_replicaset(w, rev({"a": "1"}))
    w.set_spec({"data": {"a": "2"}, "revisions": keep1})
    # Past keep, but a ReplicaSet still owns it: the bundle keeps its reference and
    # writes nothing to it (letting go now would race the collector's patch).
    assert rev({"a": "1"}) not in [name for _, _, name in w.reconcile()]
    w.settle()
    assert [r["uid"] for r in w.configmap(rev({"a": "1"}))["metadata"]["ownerReferences"]] == [
        UID,
        "rs-1",
    ]
    # The ReplicaSet goes; the collector's patch removes its reference and wakes the
    # bundle (its reference is still there), which deletes the revision: one write.
    gc_removes(w, rev({"a": "1"}), replicaset["uid"])
    assert revision_owners(w.configmap(rev({"a": "1"}))) == ["demo/app"]
    assert w.reconcile() == [("delete", "configmaps", rev({"a": "1"}))]
    assert w.reconcile() == []
    assert w.configmap_names() == sorted(["app", rev({"a": "2"})])


def test_a_revert_to_a_revision_other_owners_hold_writes_nothing_to_it() -> None:
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": {"a": "1"}, "revisions": keep1})
    w.settle()
    owned_by_replicaset(w, rev({"a": "1"}))
    w.set_spec({"data": {"a": "2"}, "revisions": keep1})
    w.settle()
    w.set_spec({"data": {"a": "1"}, "revisions": keep1})
    assert w.reconcile() == [
        ("delete", "configmaps", rev({"a": "2"})),
        ("update", "configmaps", "app"),
        ("patch/status", "configbundles", "app"),
    ]
    assert w.bundle()["status"]["revision"] == rev({"a": "1"})
    assert w.configmap_names() == sorted(["app", rev({"a": "1"})])


def test_a_revert_to_a_collected_revision_makes_it_again() -> None:
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": {"a": "1"}, "revisions": keep1})
    w.settle()
    w.set_spec({"data": {"a": "2"}, "revisions": keep1})
    w.settle()
    assert w.configmap_names() == sorted(["app", rev({"a": "2"})])
    w.set_spec({"data": {"a": "1"}, "revisions": keep1})
    w.settle()
    assert w.configmap_names() == sorted(["app", rev({"a": "1"})])


def test_a_foreign_configmap_at_the_revision_name_is_rechecked() -> None:
    """cbop may not watch that ConfigMap, so its deletion is found by a recheck."""
    w = World({"data": {"a": "1"}, "revisions": ON})
    w.kube.tracker.add(
        CONFIGMAPS, {"metadata": {"name": rev({"a": "1"}), "namespace": "demo"}, "data": {}}
    )
    w.settle()
    assert w.result.requeue_after == 15.0
    w.kube.tracker.delete(CONFIGMAPS, "demo", rev({"a": "1"}))
    w.settle()
    assert w.result.ready == "True"
    assert w.bundle()["status"]["revision"] == rev({"a": "1"})


def test_the_bundle_reference_taken_off_the_current_revision_is_put_back() -> None:
    w = World({"data": {"a": "1"}, "revisions": ON})
    w.settle()
    current = w.configmap(rev({"a": "1"}))
    current["metadata"]["ownerReferences"] = []
    w.kube.tracker.add(CONFIGMAPS, current)
    assert w.reconcile() == [("update", "configmaps", rev({"a": "1"}))]
    assert w.reconcile() == []


def test_the_plain_configmap_is_never_taken_for_a_revision() -> None:
    """Even when spec.labels puts the revision label on it, it is neither released nor deleted."""
    keep1 = {"enabled": True, "keep": 1}
    spec = {"data": {"a": "1"}, "labels": {LABEL_REVISION_OF: "app"}, "revisions": keep1}
    w = World(spec)
    w.settle()
    w.set_spec({**spec, "data": {"a": "2"}})
    w.settle()
    assert w.configmap_names() == sorted(["app", rev({"a": "2"})])
    refs = w.configmap("app")["metadata"]["ownerReferences"]
    assert [r["controller"] for r in refs] == [True]


# ---------------------------------------------------------------- dry runs


def dry_run_of(w: World) -> World:
    """A dry-run reconciler on ``w``'s fake API server (its objects as they are)."""
    dry = World({}, dry_run=True)
    dry.kube = w.kube
    dry.reconciler = Reconciler(
        client=w.kube,
        bundles=dry.bundles,
        configmaps=dry.configmaps,
        now=lambda: NOW,
        dry_run=True,
    )
    return dry


def test_a_dry_run_names_the_revision_a_new_bundle_would_create_and_creates_none() -> None:
    w = World({"data": {"a": "1"}, "revisions": ON}, dry_run=True)
    w.reconcile()
    assert w.result.new_revision == rev({"a": "1"})
    assert w.result.pending
    assert w.result.message.startswith(
        f"would create revision {rev({'a': '1'})}; would create ConfigMap app (1 keys, "
    )
    assert w.result.message.endswith("; the bundle would then be Ready")
    assert [(a.verb, a.name, a.options.get("dry_run")) for a in w.kube.write_actions()] == [
        ("create", "app", True)  # the plain ConfigMap, with dryRun=All; no revision
    ]
    assert w.configmap_names() == []


def test_a_dry_run_of_a_change_names_the_new_revision() -> None:
    w = World({"data": {"a": "1"}, "revisions": ON})
    w.settle()
    w.set_spec({"data": {"a": "2"}, "revisions": ON})
    dry = dry_run_of(w)
    dry.reconcile()
    assert dry.result.new_revision == rev({"a": "2"})
    assert dry.result.message.startswith(f"would create revision {rev({'a': '2'})}; would update")
    assert rev({"a": "2"}) not in w.configmap_names()


def test_a_dry_run_of_turning_revisions_on_is_pending_for_the_revision_alone() -> None:
    w = World({"data": {"a": "1"}})
    w.settle()
    w.set_spec({"data": {"a": "1"}, "revisions": ON})
    dry = dry_run_of(w)
    dry.reconcile()
    assert dry.result.action is Action.NONE
    assert dry.result.pending
    assert dry.result.new_revision == rev({"a": "1"})
    assert dry.result.message == (
        f"would create revision {rev({'a': '1'})}; the bundle would then be Ready"
    )


def test_a_dry_run_of_a_revert_or_without_revisions_names_none() -> None:
    w = World({"data": {"a": "1"}, "revisions": ON})
    w.settle()
    w.set_spec({"data": {"a": "2"}, "revisions": ON})
    w.settle()
    w.set_spec({"data": {"a": "1"}, "revisions": ON})  # its revision exists
    dry = dry_run_of(w)
    dry.reconcile()
    assert dry.result.pending
    assert dry.result.new_revision is None
    assert "revision" not in dry.result.message
    w.set_spec({"data": {"a": "3"}})
    dry.reconcile()
    assert dry.result.pending
    assert dry.result.new_revision is None


def test_a_dry_run_says_what_a_revision_problem_would_make_the_bundle() -> None:
    taken = World({"data": {"a": "1"}, "revisions": ON}, dry_run=True)
    taken.kube.tracker.add(
        CONFIGMAPS, {"metadata": {"name": rev({"a": "1"}), "namespace": "demo"}, "data": {}}
    )
    taken.reconcile()
    assert taken.result.new_revision is None
    assert taken.result.message.endswith("the bundle would then be ConfigMapConflict")
    long_name = World({"data": {"a": "1"}, "revisions": ON}, dry_run=True, name="b" * 250)
    long_name.reconcile()
    assert long_name.result.new_revision is None
    assert long_name.result.message.endswith("the bundle would then be InvalidSpec")


def pins(w: World, entries: dict[str, str] | None) -> None:
    """Make the namespace's pins ConfigMap hold ``entries`` (None: delete it)."""
    if entries is None:
        w.kube.tracker.delete(CONFIGMAPS, "demo", PARAMS_NAME)
        return
    w.kube.tracker.add(
        CONFIGMAPS,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": PARAMS_NAME,
                "namespace": "demo",
                "labels": {"app.kubernetes.io/managed-by": "cbop"},
            },
            "data": entries,
        },
    )


def test_a_revision_the_pins_name_is_never_let_go_and_is_collected_once_unnamed() -> None:
    # keep 1, and a template pinned to the first revision whose ReplicaSet has no owner
    # reference on it yet: two content changes must not delete it.
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": {"a": "1"}, "revisions": keep1})
    w.settle()
    pins(w, {"a" * 40: f"app={rev({'a': '1'})}\n", "b" * 40: "other=other-0123456789\n"})
    w.set_spec({"data": {"a": "2"}, "revisions": keep1})
    w.settle()
    w.set_spec({"data": {"a": "3"}, "revisions": keep1})
    w.settle()
    assert rev({"a": "1"}) in w.configmap_names()
    assert [r["uid"] for r in w.configmap(rev({"a": "1"}))["metadata"]["ownerReferences"]] == [UID]
    assert rev({"a": "2"}) not in w.configmap_names()  # not pinned: collected as before
    # The pins' change wakes the bundle (the old object's entries are mapped too)...
    old = w.configmap(PARAMS_NAME)
    pins(w, {"b" * 40: "other=other-0123456789\n"})
    mapper = revisions_pinned_by(w.configmaps)
    w.configmaps.sync(w.kube.tracker, CONFIGMAPS)
    assert mapper(old) == ["demo/app"]
    assert mapper(w.configmap(PARAMS_NAME)) == []
    assert mapper(w.configmap("app")) == []
    # ... and its reconcile, past the no-op fast path, deletes the revision unnamed now.
    assert w.reconcile() == [("delete", "configmaps", rev({"a": "1"}))]
    assert w.reconcile() == []
    assert w.configmap_names() == sorted(["app", PARAMS_NAME, rev({"a": "3"})])


def test_a_pinned_revision_with_other_owners_keeps_the_bundle_reference() -> None:
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": {"a": "1"}, "revisions": keep1})
    w.settle()
    replicaset = owned_by_replicaset(w, rev({"a": "1"}))
    pins(w, {"a" * 40: f"app={rev({'a': '1'})}\n"})
    w.set_spec({"data": {"a": "2"}, "revisions": keep1})
    w.settle()
    assert [r["uid"] for r in w.configmap(rev({"a": "1"}))["metadata"]["ownerReferences"]] == [
        UID,
        "rs-1",
    ]
    # No longer pinned, still owned by the ReplicaSet: nothing to write yet.
    pins(w, None)
    assert w.reconcile() == []
    gc_removes(w, rev({"a": "1"}), replicaset["uid"])
    assert w.reconcile() == [("delete", "configmaps", rev({"a": "1"}))]


def ready_message(w: World) -> str:
    (ready,) = [c for c in w.bundle()["status"]["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "True"
    return str(ready["message"])


def policy_lists(w: World) -> list[str]:
    return [a.resource for a in w.kube.actions if a.verb == "list" and "mutating" in a.resource]


def install_policy(w: World, name: str = "rel-cbop-pin-revisions") -> None:
    """The policy and its binding, named as the chart names them (release prefix)."""
    w.kube.tracker.add(MUTATINGADMISSIONPOLICIES, {"metadata": {"name": name}})
    w.kube.tracker.add(
        MUTATINGADMISSIONPOLICYBINDINGS,
        {
            "metadata": {"name": name},
            "spec": {"policyName": name, "paramRef": {"name": PARAMS_NAME}},
        },
    )


def test_a_missing_pin_policy_is_told_in_the_ready_message_and_logged_once() -> None:
    w = World({"data": {"a": "1"}, "revisions": ON}, check_policy=True)
    with structlog.testing.capture_logs() as logs:
        w.settle()
        missing = (
            "MutatingAdmissionPolicy cbop-pin-revisions and its binding (paramRef cbop-revisions)"
        )
        assert ready_message(w).endswith(
            f"; pods are not pointed at revisions: {missing} not installed or not served "
            "(docs/revisions.md)"
        )
        assert w.result.requeue_after == POLICY_RECHECK
        assert w.result.ready == "True"
        # Looked at once a minute at most, whatever the reconciles.
        w.clock.step(30)
        w.reconcile()
        assert policy_lists(w) == []
        # Installed: the sentence goes at the next look.
        install_policy(w)
        w.clock.step(30)
        assert w.reconcile() == [("patch/status", "configbundles", "app")]
        assert policy_lists(w) == [
            "mutatingadmissionpolicies",
            "mutatingadmissionpolicybindings",
        ]
        assert "revisions" not in ready_message(w)
        assert w.result.requeue_after is None
        assert w.reconcile() == []  # steady state, by the no-op fast path
        # The policy removed, its binding left: the fast path notices at the next look.
        w.kube.tracker.delete(MUTATINGADMISSIONPOLICIES, None, "rel-cbop-pin-revisions")
        w.clock.step(60)
        assert w.reconcile() == [("patch/status", "configbundles", "app")]
        assert (
            "pods are not pointed at revisions: MutatingAdmissionPolicy "
            "rel-cbop-pin-revisions (named by its binding) not installed"
        ) in ready_message(w)
    warnings = [e for e in logs if e["event"].startswith("pin policy missing")]
    assert [e["missing"] for e in warnings] == [
        missing,
        "MutatingAdmissionPolicy rel-cbop-pin-revisions (named by its binding)",
    ]
    assert [e["event"] for e in logs].count(
        "pin policy installed: new pods are pointed at their revisions"
    ) == 1


def test_a_pin_policy_that_cannot_be_read_or_revisions_off_say_nothing() -> None:
    w = World({"data": {"a": "1"}, "revisions": ON}, check_policy=True)
    w.kube.prepend_reactor(
        "list",
        "mutatingadmissionpolicies",
        fail(forbidden(MUTATINGADMISSIONPOLICIES, "list", None)),
    )
    w.settle()
    assert "revisions" not in ready_message(w)
    assert w.result.requeue_after is None
    off = World({"data": {"a": "1"}}, check_policy=True)
    off.kube.prepend_reactor(
        "list", "mutatingadmissionpolicies", fail(AssertionError("looked without revisions"))
    )
    off.settle()
    assert "revisions" not in ready_message(off)


def test_a_revision_left_without_owners_is_deleted() -> None:
    # A revision past keep with no owner reference at all (taken off by hand, or left by
    # a bundle deleted with --cascade=orphan): the garbage collector never deletes it.
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": {"a": "1"}, "revisions": keep1})
    w.settle()
    replicaset = owned_by_replicaset(w, rev({"a": "1"}))
    w.set_spec({"data": {"a": "2"}, "revisions": keep1})
    w.settle()
    gc_removes(w, rev({"a": "1"}), UID)
    gc_removes(w, rev({"a": "1"}), replicaset["uid"])
    orphan = w.configmap(rev({"a": "1"}))
    assert orphan["metadata"]["ownerReferences"] == []
    # Its watch event wakes the bundle its label names, whose reconcile (past the
    # no-op fast path) deletes it on the precondition of the version it saw.
    assert revision_owners(orphan) == ["demo/app"]
    assert w.reconcile() == [("delete", "configmaps", rev({"a": "1"}))]
    (delete,) = [a for a in w.kube.actions if a.verb == "delete"]
    assert delete.options["preconditions"] == {
        "uid": orphan["metadata"]["uid"],
        "resourceVersion": orphan["metadata"]["resourceVersion"],
    }
    assert w.reconcile() == []
    assert w.configmap_names() == sorted(["app", rev({"a": "2"})])


def test_an_ownerless_revision_still_kept_or_pinned_is_held_again() -> None:
    keep2 = {"enabled": True, "keep": 2}
    w = World({"data": {"a": "1"}, "revisions": keep2})
    w.settle()
    w.set_spec({"data": {"a": "2"}, "revisions": keep2})
    w.settle()
    gc_removes(w, rev({"a": "1"}), UID)  # among the newest keep: held again
    assert w.reconcile() == [("update", "configmaps", rev({"a": "1"}))]
    assert [r["uid"] for r in w.configmap(rev({"a": "1"}))["metadata"]["ownerReferences"]] == [UID]
    assert w.reconcile() == []
    # Past the newest keep but named by the pins: held again, not deleted.
    pins(w, {"a" * 40: f"app={rev({'a': '1'})}\n"})
    w.set_spec({"data": {"a": "3"}, "revisions": keep2})
    w.settle()
    gc_removes(w, rev({"a": "1"}), UID)
    assert w.reconcile() == [("update", "configmaps", rev({"a": "1"}))]
    assert w.reconcile() == []
    assert rev({"a": "1"}) in w.configmap_names()


def test_an_ownerless_configmap_that_is_not_a_revision_is_left_alone() -> None:
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": {"a": "1"}, "revisions": keep1})
    w.settle()
    w.set_spec({"data": {"a": "2"}, "revisions": keep1})
    w.settle()
    # Someone's own ConfigMap with the label, mutable: neither adopted nor deleted.
    mine = {
        "metadata": {
            "namespace": "demo",
            "name": "mine",
            "labels": {LABEL_REVISION_OF: "app"},
            "creationTimestamp": "2020-01-01T00:00:00Z",
        },
        "data": {"x": "1"},
    }
    w.kube.tracker.add(CONFIGMAPS, mine)
    assert revision_owners(mine) == []
    assert w.reconcile() == []
    assert "mine" in w.configmap_names()
