"""The ``Pinned`` condition of a bundle with revisions, verified from the caches.

The ConfigBundle reconcile on the fake API server (tests/unit/revisionworld.py), with
pinned ReplicaSets, pods and an opted-in Deployment stored on it: the condition says
whether the pods of the workloads that read the bundle's ConfigMap read its revisions,
a Warning Event goes to each workload a new finding names, and ``Ready`` stays about
the ConfigMap (docs/revisions.md).
"""

from __future__ import annotations

import pytest

from cbop.kube import (
    CONFIGMAPS,
    DEPLOYMENTS,
    MUTATINGADMISSIONPOLICIES,
    MUTATINGADMISSIONPOLICYBINDINGS,
    PODS,
    REPLICASETS,
)
from cbop.revisions import model
from cbop.revisions.bundle import POLICY_RECHECK
from cbop.revisions.policy import POLICY_LABEL
from cbop_testing.fakekube.errors import forbidden, not_found
from cbop_testing.fakekube.reactions import fail

from .revisionworld import ON, World, deployment, pod, replicaset, rev

A1 = {"a": "1"}


def pinned(w: World) -> tuple[str, str, str]:
    cond = w.condition()
    assert cond is not None
    return cond["status"], cond["reason"], cond["message"]


def test_a_bundle_no_workload_reads_is_pinned_trivially_and_ready_stays_about_the_configmap() -> (
    None
):
    w = World({"data": A1, "revisions": ON})
    w.settle()
    assert pinned(w) == (
        "True",
        "NothingToPin",
        "no workload labelled cbop.dev/rollout=true reads ConfigMap app",
    )
    ready = w.condition("Ready")
    assert ready is not None
    assert ready["message"].startswith("ConfigMap app matches the spec")
    assert "revision" not in ready["message"]
    # Steady state: no request at all.
    assert w.reconcile() == []
    assert w.kube.actions == []


def test_a_workload_is_not_pinned_until_its_template_names_the_revision() -> None:
    w = World({"data": A1, "revisions": ON})
    w.settle()
    w.kube.tracker.add(DEPLOYMENTS, deployment())
    assert w.reconcile() == [("patch/status", "configbundles", "app")]
    status, reason, message = pinned(w)
    assert (status, reason) == ("False", "NotPinnedYet")
    assert (
        message == "Deployment/web: its pod template reads ConfigMap app by name, with no revision"
    )
    # No Warning for it: the rollout is about to pin it (or says why it does not).
    assert w.events("NotPinnedYet") == []
    assert w.reconcile() == []
    # The rollout pins it: True, naming it.
    w.kube.tracker.put(DEPLOYMENTS, deployment({"app": rev(A1)}))
    assert w.reconcile() == [("patch/status", "configbundles", "app")]
    assert pinned(w) == (
        "True",
        "Pinned",
        "the pods of Deployment/web read the revisions of ConfigMap app their templates name",
    )
    assert w.events() == []


def test_a_pod_the_policy_did_not_rewrite_is_reported_on_the_bundle_and_the_workload() -> None:
    w = World({"data": A1, "revisions": ON})
    w.settle()
    w.kube.tracker.add(DEPLOYMENTS, deployment({"app": rev(A1)}))
    w.kube.tracker.add(REPLICASETS, replicaset("web-1", {"app": rev(A1)}))
    w.kube.tracker.add(PODS, pod("web-1-a", "web-1", {"app": rev(A1)}, reads=rev(A1)))
    w.settle()
    assert pinned(w)[:2] == ("True", "Pinned")
    w.kube.tracker.add(PODS, pod("web-1-b", "web-1", {"app": rev(A1)}, reads="app"))
    assert w.reconcile() == [("patch/status", "configbundles", "app")]
    assert pinned(w) == (
        "False",
        "PodNotPinned",
        f"Deployment/web: pod web-1-b reads ConfigMap app in volumes[0].configMap, "
        f"not revision {rev(A1)}",
    )
    (event,) = w.events("PodNotPinned")
    assert (event["involvedObject"]["kind"], event["involvedObject"]["name"]) == (
        "Deployment",
        "web",
    )
    assert event["message"].startswith("ConfigMap app (ConfigBundle app): pod web-1-b")
    # The pod goes (replaced by a pinned one): True again.
    w.kube.tracker.delete(PODS, "demo", "web-1-b")
    assert w.reconcile() == [("patch/status", "configbundles", "app")]
    assert pinned(w)[:2] == ("True", "Pinned")


def test_a_revision_gone_with_its_content_is_reported_on_the_bundle_and_the_workload() -> None:
    keep1 = {"enabled": True, "keep": 1}
    w = World({"data": A1, "revisions": keep1})
    w.settle()
    w.kube.tracker.add(DEPLOYMENTS, deployment({"app": rev(A1)}))
    w.kube.tracker.add(REPLICASETS, replicaset("web-1", {"app": rev(A1)}))
    w.set_spec({"data": {"a": "2"}, "revisions": keep1})
    w.settle()
    # Deleted by hand; no ConfigMap holds {"a": "1"} any more: reported, not made.
    w.kube.tracker.delete(CONFIGMAPS, "demo", rev(A1))
    assert w.reconcile() == [("patch/status", "configbundles", "app")]
    assert {e["involvedObject"]["name"] for e in w.events("RevisionMissing")} == {"web"}
    assert w.reconcile() == []
    assert rev(A1) not in w.configmap_names()
    status, reason, message = pinned(w)
    assert (status, reason) == ("False", "RevisionMissing")
    assert message == (
        f"Deployment/web: Deployment web names revision {rev(A1)}, which is gone and whose "
        "content cbop no longer has: its new pods cannot start (and 1 more)"
    )
    ready = w.condition("Ready")
    assert ready is not None
    assert ready["status"] == "True"  # the ConfigMap is right


def _install(w: World, *, labelled: bool = True) -> None:
    key, value = POLICY_LABEL
    labels = {key: value} if labelled else {}
    w.kube.tracker.add(
        MUTATINGADMISSIONPOLICIES, {"metadata": {"name": "rel-cbop-pin-pods", "labels": labels}}
    )
    w.kube.tracker.add(
        MUTATINGADMISSIONPOLICYBINDINGS,
        {"metadata": {"name": "rel-cbop-pin-pods"}, "spec": {"policyName": "rel-cbop-pin-pods"}},
    )


def test_the_policy_missing_or_not_served_is_said_and_looked_at_again() -> None:
    w = World({"data": A1, "revisions": ON}, check_policy=True)
    w.settle()
    status, reason, message = pinned(w)
    assert (status, reason) == ("False", "PolicyMissing")
    assert message.startswith("the MutatingAdmissionPolicy cbop-pin-pods or its binding")
    assert w.result.requeue_after == POLICY_RECHECK
    ready = w.condition("Ready")
    assert ready is not None
    assert ready["status"] == "True"
    # Installed (named as the chart names it; found by its label): True at the next look.
    _install(w)
    w.clock.step(60)
    assert w.reconcile() == [("patch/status", "configbundles", "app")]
    assert pinned(w)[:2] == ("True", "NothingToPin")
    assert w.reconcile() == []
    # An unlabelled policy of that name is not cbop's.
    other = World({"data": A1, "revisions": ON}, check_policy=True)
    _install(other, labelled=False)
    other.settle()
    assert pinned(other)[1] == "PolicyMissing"


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (not_found(MUTATINGADMISSIONPOLICIES, ""), "PolicyNotServed"),
        (forbidden(MUTATINGADMISSIONPOLICIES, "list", None), "NothingToPin"),
    ],
    ids=["404-not-served", "403-unknown"],
)
def test_an_api_server_without_the_policy_api_is_told_and_a_refusal_tells_nothing(
    error: Exception, reason: str
) -> None:
    w = World({"data": A1, "revisions": ON}, check_policy=True)
    w.kube.prepend_reactor("list", "mutatingadmissionpolicies", fail(error))
    w.settle()
    assert pinned(w)[1] == reason
    if reason == "PolicyNotServed":
        assert "Kubernetes 1.36" in pinned(w)[2]


def test_without_the_rollout_nothing_is_pinned_and_it_says_so() -> None:
    w = World({"data": A1, "revisions": ON}, rollout=False)
    w.settle()
    assert pinned(w)[:2] == ("False", "RolloutOff")


def test_revisions_off_have_no_pinned_condition() -> None:
    w = World({"data": A1, "revisions": ON})
    w.settle()
    assert w.condition() is not None
    w.set_spec({"data": A1})
    w.settle()
    assert w.condition() is None
    assert "revision" not in w.bundle()["status"]


def test_before_the_history_has_listed_nothing_is_verified_nor_collected_past_keep() -> None:
    """RBAC without pods or the apps group: the bundles are reconciled all the same."""
    keep1 = {"enabled": True, "keep": 1}
    listed = [False]
    w = World({"data": A1, "revisions": keep1}, listed=lambda: listed[0])
    w.reconcile()
    assert pinned(w)[:2] == ("Unknown", "NotVerified")
    assert w.result.requeue_after == 10.0  # looked at again until the caches list
    for data in ({"a": "2"}, {"a": "3"}):
        w.set_spec({"data": data, "revisions": keep1})
        w.reconcile()
        w.clock.step(60)
        w.reconcile()
    assert rev(A1) in w.configmap_names()  # nothing past keep deleted
    ready = w.condition("Ready")
    assert ready is not None
    assert ready["status"] == "True"
    listed[0] = True
    w.settle()
    assert pinned(w)[:2] == ("True", "NothingToPin")
    assert rev(A1) not in w.configmap_names()


def test_a_reconcile_reads_a_mapping_the_history_repeats_once_not_once_per_replicaset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every ReplicaSet and pod of a template carries the same mapping, and each of their
    # events wakes every bundle the mapping names: a long history must not make each of
    # those reconciles validate the same pairs again for every ReplicaSet.
    w = World({"data": A1, "revisions": ON})
    w.settle()
    mapping = {"app": rev(A1)}
    w.kube.tracker.add(DEPLOYMENTS, deployment(mapping))
    for i in range(200):
        w.kube.tracker.add(REPLICASETS, replicaset(f"web-{i}", mapping))
    w.kube.tracker.add(PODS, pod("web-199-a", "web-199", mapping, reads=rev(A1)))
    w.settle()
    assert pinned(w)[:2] == ("True", "Pinned")
    checked: list[str] = []
    real = model.valid_pair

    def counted(plain: str, revision: str) -> bool:
        checked.append(revision)
        return real(plain, revision)

    monkeypatch.setattr(model, "valid_pair", counted)
    assert w.reconcile() == []
    assert pinned(w)[:2] == ("True", "Pinned")
    # One distinct mapping of one pair: validated at most once.
    assert len(checked) <= 1, f"{len(checked)} validations of {len(set(checked))} pairs"
