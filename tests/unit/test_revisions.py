"""Revision ConfigMaps of the ConfigBundle reconcile, on the fake API server.

Made before the plain ConfigMap, collected by the workloads' history (the newest
``keep``, what a cached template names, 0.2.0's pins, other owners, a grace period),
collected before a create (a quota), a refused create reported and retried, a revision
a template names made again when its content is at hand (docs/revisions.md). The
``Pinned`` condition: tests/unit/test_revisions_verify.py.
"""

from __future__ import annotations

import pytest

from cbop.api import content_hash
from cbop.api.revisions import LABEL_REVISION_OF
from cbop.configbundle import Action, Reconciler
from cbop.kube import CONFIGMAPS, REPLICASETS, ApiError
from cbop.revisions.caches import revision_owners
from cbop.revisions.legacy import PARAMS_NAME
from cbop.runtime import Requeue
from cbop_testing.fakekube.reactions import fail
from cbop_testing.objects import UID

from .revisionworld import GRACE, NOW, ON, World, replicaset, rev


def owned_by_replicaset(w: World, name: str) -> dict[str, str]:
    """Give revision ``name`` a ReplicaSet's owner reference too (as 0.2.0's history did)."""
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "rs-1"}
    revision = w.configmap(name)
    revision["metadata"]["ownerReferences"].append(owner)
    w.kube.tracker.add(CONFIGMAPS, revision)
    return owner


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
    # One change, four writes: the collection goes first (room for the new revision
    # under a quota), then the revision, the plain ConfigMap, the status.
    assert w.reconcile() == [
        ("delete", "configmaps", rev({"a": "1"})),
        ("create", "configmaps", rev({"a": "3"})),
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
    w.clock.step(GRACE)
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
    # The revision current until now waits out the grace (a rollout may be naming it).
    assert w.reconcile() == [
        ("update", "configmaps", "app"),
        ("patch/status", "configbundles", "app"),
    ]
    assert w.bundle()["status"]["revision"] == rev({"a": "1"})
    w.settle()
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


# ---------------------------------------------------------------- collection by history


def named_by(w: World, name: str, revision: str) -> None:
    """A ReplicaSet ``name`` in the history whose template names ``revision`` of ``app``."""
    w.kube.tracker.add(REPLICASETS, replicaset(name, {"app": revision}))


def test_a_revision_a_template_in_the_history_names_is_kept_and_collected_once_unnamed() -> None:
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": {"a": "1"}, "revisions": keep1})
    w.settle()
    named_by(w, "web-1", rev({"a": "1"}))
    w.set_spec({"data": {"a": "2"}, "revisions": keep1})
    w.settle()
    w.set_spec({"data": {"a": "3"}, "revisions": keep1})
    w.settle()
    # Past keep, named by a ReplicaSet of the history: kept, with the bundle's reference
    # only (nothing of the workloads' adds one).
    assert rev({"a": "1"}) in w.configmap_names()
    assert [r["uid"] for r in w.configmap(rev({"a": "1"}))["metadata"]["ownerReferences"]] == [UID]
    assert rev({"a": "2"}) not in w.configmap_names()  # named by nothing: collected
    # The history limit deletes the ReplicaSet (its deletion wakes the bundle). The
    # revision was named until now: it waits out the grace, then goes.
    w.kube.tracker.delete(REPLICASETS, "demo", "web-1")
    assert w.reconcile() == []
    assert w.result.requeue_after == GRACE
    w.clock.step(GRACE - 1)
    assert w.reconcile() == []
    assert w.result.requeue_after == 1.0
    w.clock.step(1)
    assert w.reconcile() == [("delete", "configmaps", rev({"a": "1"}))]
    assert w.reconcile() == []
    assert w.configmap_names() == sorted(["app", rev({"a": "3"})])


def test_a_revision_just_current_waits_out_the_grace_and_a_restart_waits_again() -> None:
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": {"a": "1"}, "revisions": keep1})
    w.settle()
    # A change moments after: the old revision was status.revision at the reconcile's
    # start, so a template the rollout is applying may name it: not deleted yet.
    w.set_spec({"data": {"a": "2"}, "revisions": keep1}, seconds=1)
    assert ("delete", "configmaps", rev({"a": "1"})) not in w.reconcile()
    assert w.result.requeue_after == GRACE
    # A new process (a restart, a new leader) knows nothing of what was named: it
    # waits the grace out from its first look.
    w.reconciler = Reconciler(
        client=w.kube,
        bundles=w.bundles,
        configmaps=w.configmaps,
        now=lambda: NOW,
        history=w.history,
        revision_grace=GRACE,
        clock=w.clock,
    )
    w.clock.step(GRACE)
    assert w.reconcile() == []
    assert w.result.requeue_after == GRACE
    w.clock.step(GRACE)
    assert w.reconcile() == [("delete", "configmaps", rev({"a": "1"}))]


def test_without_the_history_nothing_is_collected_past_keep() -> None:
    """``cbop --once`` has no caches of the workloads: it deletes nothing they may name."""
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": {"a": "1"}, "revisions": keep1}, history=False)
    w.settle()
    w.set_spec({"data": {"a": "2"}, "revisions": keep1})
    w.settle()
    w.set_spec({"data": {"a": "3"}, "revisions": keep1})
    w.settle()
    assert w.configmap_names() == sorted(["app", *(rev({"a": str(i)}) for i in (1, 2, 3))])


def legacy_pins(w: World, entries: dict[str, str] | None) -> None:
    """Make 0.2.0's pins ConfigMap hold ``entries`` (None: delete it)."""
    if entries is None:
        w.kube.tracker.delete(CONFIGMAPS, "demo", PARAMS_NAME)
        return
    w.kube.tracker.add(
        CONFIGMAPS,
        {
            "metadata": {
                "name": PARAMS_NAME,
                "namespace": "demo",
                "labels": {"app.kubernetes.io/managed-by": "cbop"},
            },
            "data": entries,
        },
    )


def test_a_revision_0_2_0s_pins_name_is_kept_until_they_go() -> None:
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": {"a": "1"}, "revisions": keep1})
    w.settle()
    legacy_pins(w, {"a" * 40: f"app={rev({'a': '1'})}\n", "Deployment.web": "#frozen\n"})
    w.set_spec({"data": {"a": "2"}, "revisions": keep1})
    w.settle()
    w.set_spec({"data": {"a": "3"}, "revisions": keep1})
    w.settle()
    assert rev({"a": "1"}) in w.configmap_names()
    assert w.configmap(PARAMS_NAME)["data"]["a" * 40] == f"app={rev({'a': '1'})}\n"  # untouched
    legacy_pins(w, None)
    w.clock.step(GRACE)
    assert w.reconcile() == [("delete", "configmaps", rev({"a": "1"}))]


# ---------------------------------------------------------------- a quota on ConfigMaps


def test_collectable_revisions_go_before_a_create_and_a_refused_create_is_reported() -> None:
    """A quota full of collectable revisions leaves room for the new one (case 31)."""
    keep3 = {"enabled": True, "keep": 3}
    w = World({"data": {"a": "1"}, "revisions": keep3})
    w.settle()
    for i in (2, 3):
        w.set_spec({"data": {"a": str(i)}, "revisions": keep3})
        w.settle()
    # keep lowered to 1 with a change: the two older ones (idle past the grace) are
    # deleted before the new one is created; the one current until now waits the grace.
    keep1 = {"enabled": True, "keep": 1}
    w.set_spec({"data": {"a": "4"}, "revisions": keep1})
    assert w.reconcile() == [
        ("delete", "configmaps", rev({"a": "2"})),
        ("delete", "configmaps", rev({"a": "1"})),
        ("create", "configmaps", rev({"a": "4"})),
        ("update", "configmaps", "app"),
        ("patch/status", "configbundles", "app"),
    ]
    # Now a quota that refuses the next create: the plain ConfigMap still gets the
    # content, Ready says why, and the reconcile is retried with backoff.
    quota = ApiError(
        403,
        "Forbidden",
        'configmaps "app-x" is forbidden: exceeded quota: cm, requested: count/configmaps=1',
    )
    w.kube.prepend_reactor("create", "configmaps", fail(quota, times=1))
    w.set_spec({"data": {"a": "5"}, "revisions": keep1}, seconds=1)
    with pytest.raises(Requeue):
        w.reconcile()
    assert w.configmap("app")["data"] == {"a": "5"}
    ready = w.condition("Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "RevisionNotCreated")
    assert "exceeded quota" in ready["message"]
    assert "revision" not in w.bundle()["status"]
    assert [e["reason"] for e in w.events("RevisionNotCreated")] == ["RevisionNotCreated"]
    # The quota raised: the next try converges.
    assert ("create", "configmaps", rev({"a": "5"})) in w.reconcile()
    ready = w.condition("Ready")
    assert ready is not None
    assert ready["status"] == "True"
    assert w.bundle()["status"]["revision"] == rev({"a": "5"})


# ---------------------------------------------------------------- a revision deleted by hand


def test_a_revision_a_template_names_is_made_again_from_a_revision_of_that_content() -> None:
    keep2 = {"enabled": True, "keep": 2}
    w = World({"data": {"a": "1"}, "revisions": keep2})
    w.settle()
    w.set_spec({"data": {"a": "2"}, "revisions": keep2})
    w.settle()
    # A ReplicaSet names a revision of the content {"a": "1"} under the name "app" that
    # is gone, while another revision with that content exists (here: {"a": "1"}'s own,
    # kept): made again from it, with the bundle's labels and its own content hash.
    gone = rev({"a": "1"})
    named_by(w, "web-1", gone)
    w.kube.tracker.delete(CONFIGMAPS, "demo", gone)
    w.kube.tracker.add(
        CONFIGMAPS,
        {
            **w.configmap(rev({"a": "2"})),
            "metadata": {
                **w.configmap(rev({"a": "2"}))["metadata"],
                "name": "copy",
                "uid": "copy-uid",
                "annotations": {"cbop.dev/content-hash": content_hash({"a": "1"}, {})},
            },
            "data": {"a": "1"},
        },
    )
    assert w.reconcile() == [("create", "configmaps", gone)]
    made = w.configmap(gone)
    assert made["data"] == {"a": "1"}
    assert made["immutable"] is True
    assert made["metadata"]["annotations"]["cbop.dev/content-hash"] == content_hash({"a": "1"}, {})
    assert made["metadata"]["labels"][LABEL_REVISION_OF] == "app"
    assert w.reconcile() == []


def test_a_revision_left_without_owners_is_deleted() -> None:
    # A revision past keep with no owner reference at all (taken off by hand, or left by
    # a bundle deleted with --cascade=orphan): the garbage collector never deletes it.
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": {"a": "1"}, "revisions": keep1})
    w.settle()
    replicaset = owned_by_replicaset(w, rev({"a": "1"}))
    w.set_spec({"data": {"a": "2"}, "revisions": keep1})
    w.settle()
    w.clock.step(GRACE)
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
    # Past the newest keep but named by a template of the history: held again, not deleted.
    named_by(w, "web-1", rev({"a": "1"}))
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
