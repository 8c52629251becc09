"""The ClusterConfigBundle decision: which namespaces, which stamp writes, which
conflicts, and the status, from cached objects alone (no server)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import pytest

from cbop.api import LABEL_CLUSTER_BUNDLE, MAX_FAILED_NAMESPACES, label_value
from cbop.clusterbundle.decision import (
    Create,
    Delete,
    Failure,
    Plan,
    Update,
    decide,
    decide_namespace,
    desired_stamp,
    owner_reference,
    status_of,
)

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
SELECT = {"matchLabels": {"ca": "yes"}}


def ccb(
    name: str = "trusted-ca",
    *,
    selector: Any = None,
    template: dict[str, Any] | None = None,
    uid: str = "uid-1",
    created: str = "2026-01-01T00:00:00Z",
    generation: int = 1,
    **meta: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "cbop.dev/v1beta1",
        "kind": "ClusterConfigBundle",
        "metadata": {
            "name": name,
            "uid": uid,
            "creationTimestamp": created,
            "generation": generation,
            **meta,
        },
        "spec": {
            "namespaceSelector": SELECT if selector is None else selector,
            "template": template if template is not None else {"data": {"ca.crt": "x"}},
        },
    }


def ns(
    name: str, labels: dict[str, str] | None = None, *, terminating: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {"name": name, "labels": labels or {}}}
    if terminating:
        out["status"] = {"phase": "Terminating"}
        out["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return out


def stamped(
    owner: dict[str, Any], namespace: str, *, ready: str | None = "True", **kw: Any
) -> dict[str, Any]:
    body = desired_stamp(owner, namespace)
    body["metadata"].update(generation=1, uid=f"stamp-{namespace}", resourceVersion="7")
    if ready is not None:
        body["status"] = {
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "observedGeneration": 1,
                    "reason": kw.get("reason", "Synced"),
                    "message": kw.get("message", ""),
                }
            ],
        }
    return body


def plan(
    owner: dict[str, Any],
    namespaces: list[dict[str, Any]],
    bundles: Mapping[str, dict[str, Any]] | None = None,
    others: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> Plan:
    found = dict(bundles or {})
    name = owner["metadata"]["name"]
    stamps = [
        b
        for b in found.values()
        if (b["metadata"].get("labels") or {}).get(LABEL_CLUSTER_BUNDLE) == label_value(name)
    ]
    return decide(
        owner,
        namespaces=namespaces,
        bundle_at=lambda n: (
            found.get(n) if found.get(n, {}).get("metadata", {}).get("name") == name else None
        ),
        stamps=stamps,
        others=[owner, *others],
    )


def test_every_selected_namespace_without_a_stamp_gets_one() -> None:
    owner = ccb()
    got = plan(owner, [ns("b", {"ca": "yes"}), ns("a", {"ca": "yes"}), ns("c", {"ca": "no"})])
    assert got.selected == ("a", "b")
    assert [type(a) for a in got.actions] == [Create, Create]
    first = got.actions[0]
    assert isinstance(first, Create)
    assert first.namespace == "a"
    assert first.body["metadata"] == {
        "name": "trusted-ca",
        "namespace": "a",
        "labels": {LABEL_CLUSTER_BUNDLE: "trusted-ca"},
        "ownerReferences": [owner_reference(owner)],
    }
    assert first.body["spec"] == {"data": {"ca.crt": "x"}, "configMapName": "trusted-ca"}
    assert owner_reference(owner)["controller"] is True
    assert owner_reference(owner)["blockOwnerDeletion"] is True
    assert got.served == ("a", "b")


def test_the_empty_selector_selects_every_namespace_but_terminating_ones() -> None:
    got = plan(ccb(selector={}), [ns("a"), ns("kube-system"), ns("gone", terminating=True)])
    assert got.selected == ("a", "kube-system")
    assert {a.namespace for a in got.actions} == {"a", "kube-system"}


def test_a_ready_stamp_equal_to_the_template_needs_nothing() -> None:
    owner = ccb()
    got = plan(owner, [ns("a", {"ca": "yes"})], {"a": stamped(owner, "a")})
    assert got.actions == ()
    assert got.ready == ("a",)
    assert got.failures == ()


@pytest.mark.parametrize(
    "edit",
    ["spec", "label", "owner"],
)
def test_a_hand_edited_stamp_is_put_back_keeping_what_others_added(edit: str) -> None:
    owner = ccb()
    stamp = stamped(owner, "a")
    stamp["metadata"]["labels"]["team"] = "x"
    stamp["metadata"]["finalizers"] = ["cbop.dev/orphan"]
    if edit == "spec":
        stamp["spec"]["data"] = {"ca.crt": "hand"}
    elif edit == "label":
        del stamp["metadata"]["labels"][LABEL_CLUSTER_BUNDLE]
    else:
        stamp["metadata"]["ownerReferences"] = []
    got = plan(owner, [ns("a", {"ca": "yes"})], {"a": stamp})
    (action,) = got.actions
    assert isinstance(action, Update)
    meta = action.body["metadata"]
    assert action.body["spec"] == {"data": {"ca.crt": "x"}, "configMapName": "trusted-ca"}
    assert meta["labels"] == {"team": "x", LABEL_CLUSTER_BUNDLE: "trusted-ca"}
    assert meta["ownerReferences"] == [owner_reference(owner)]
    assert meta["finalizers"] == ["cbop.dev/orphan"]
    assert meta["resourceVersion"] == "7"
    assert "status" not in action.body
    assert stamp["metadata"]["labels"].get("team") == "x"  # the cached object untouched
    assert got.ready == ()


def test_a_template_change_updates_every_stamp_once() -> None:
    old = ccb()
    new = ccb(template={"data": {"ca.crt": "y"}}, generation=2)
    bundles = {n: stamped(old, n) for n in ("a", "b")}
    got = plan(new, [ns("a", {"ca": "yes"}), ns("b", {"ca": "yes"})], bundles)
    assert [(type(a), a.namespace) for a in got.actions] == [(Update, "a"), (Update, "b")]


def test_a_foreign_configbundle_of_the_stamp_name_is_reported_and_left_alone() -> None:
    owner = ccb()
    foreign = {
        "metadata": {"name": "trusted-ca", "namespace": "a", "uid": "f"},
        "spec": {"data": {"mine": "1"}},
    }
    other_owned = stamped(ccb(uid="uid-old"), "b")  # a ClusterConfigBundle recreated
    got = plan(
        owner, [ns("a", {"ca": "yes"}), ns("b", {"ca": "yes"})], {"a": foreign, "b": other_owned}
    )
    assert got.actions == ()
    assert [(f.namespace, f.reason) for f in got.failures] == [
        ("a", "ConfigBundleConflict"),
        ("b", "ConfigBundleConflict"),
    ]


def test_a_stamp_reporting_a_configmap_conflict_fails_its_namespace() -> None:
    owner = ccb()
    stamp = stamped(owner, "a", ready="False", reason="ConfigMapConflict", message="not ours")
    got = plan(owner, [ns("a", {"ca": "yes"})], {"a": stamp})
    assert got.actions == ()
    assert got.failures == (Failure("a", "ConfigMapConflict", "not ours"),)


@pytest.mark.parametrize(
    ("status", "reason", "generation"),
    [("False", "Deleting", 1), ("True", "Synced", 2), (None, "", 1), ("False", "Synced", 2)],
    ids=["deleting", "status-of-an-older-spec", "no-status-yet", "failing-for-an-older-spec"],
)
def test_a_stamp_not_yet_ready_is_pending(status: str | None, reason: str, generation: int) -> None:
    owner = ccb()
    stamp = stamped(owner, "a", ready=status, reason=reason)
    stamp["metadata"]["generation"] = generation
    got = plan(owner, [ns("a", {"ca": "yes"})], {"a": stamp})
    assert (got.actions, got.ready, got.failures) == ((), (), ())


def test_a_namespace_that_leaves_the_selector_loses_its_stamp() -> None:
    owner = ccb()
    bundles = {"a": stamped(owner, "a"), "b": stamped(owner, "b"), "t": stamped(owner, "t")}
    namespaces = [ns("a", {"ca": "yes"}), ns("b", {"ca": "no"}), ns("t", terminating=True)]
    got = plan(owner, namespaces, bundles)
    assert got.actions == (Delete("b", "trusted-ca", "stamp-b"),)
    assert got.selected == ("a",)


def test_the_older_of_two_cluster_bundles_keeping_one_configmap_name_wins() -> None:
    older = ccb("first", uid="u1", created="2026-01-01T00:00:00Z", template={"configMapName": "ca"})
    newer = ccb(
        "second", uid="u2", created="2026-01-02T00:00:00Z", template={"configMapName": "ca"}
    )
    namespaces = [ns("a", {"ca": "yes"})]
    winner = plan(older, namespaces, others=[newer])
    assert [type(a) for a in winner.actions] == [Create]
    loser = plan(newer, namespaces, {"a": stamped(newer, "a")}, others=[older])
    assert [(f.namespace, f.reason) for f in loser.failures] == [("a", "ConfigMapNameConflict")]
    assert "first" in loser.failures[0].message
    # Its own stamp there (made before the older one selected the namespace) goes.
    assert loser.actions == (Delete("a", "second", "stamp-a"),)


def test_same_age_falls_back_to_the_name_and_other_configmap_names_do_not_conflict() -> None:
    a = ccb("a-bundle", uid="u1", template={"configMapName": "ca"})
    b = ccb("b-bundle", uid="u2", template={"configMapName": "ca"})
    c = ccb("c-bundle", uid="u3", template={"configMapName": "other"})
    namespaces = [ns("x", {"ca": "yes"})]
    assert plan(a, namespaces, others=[b, c]).failures == ()
    assert [f.reason for f in plan(b, namespaces, others=[a, c]).failures] == [
        "ConfigMapNameConflict"
    ]
    assert plan(c, namespaces, others=[a, b]).failures == ()


def test_a_cluster_bundle_being_deleted_decides_nothing() -> None:
    owner = ccb(deletionTimestamp="2026-01-01T00:00:00Z")
    assert plan(owner, [ns("a", {"ca": "yes"})]) == Plan()


def test_an_invalid_selector_decides_nothing_and_says_why() -> None:
    owner = ccb(selector={"matchExpressions": [{"key": "a", "operator": "Near"}]})
    owned = {"a": stamped(ccb(), "a")}
    got = plan(owner, [ns("a", {"ca": "yes"})], owned)
    assert got.actions == ()
    assert got.invalid is not None
    status = status_of(owner, got, now=NOW)
    assert status["conditions"][0]["reason"] == "InvalidSelector"


def test_status_counts_ready_and_failed_and_says_ready_only_when_all_are() -> None:
    owner = ccb()
    done = Plan(selected=("a", "b"), ready=("a", "b"))
    status = status_of(owner, done, now=NOW)
    assert status["namespaces"] == {"selected": 2, "ready": 2, "failed": 0}
    assert status["failedNamespaces"] == []
    (cond,) = status["conditions"]
    assert (cond["status"], cond["reason"]) == ("True", "AllNamespacesReady")
    assert cond["lastTransitionTime"] == "2026-01-02T03:04:05Z"
    assert status["observedGeneration"] == 1
    pending = status_of(owner, Plan(selected=("a", "b"), ready=("a",)), now=NOW)
    assert pending["conditions"][0]["reason"] == "NamespacesPending"
    failing = status_of(
        owner,
        Plan(selected=("a", "b"), ready=("a",)),
        [Failure("b", "Refused", "denied by policy")],
        now=NOW,
    )
    assert failing["namespaces"] == {"selected": 2, "ready": 1, "failed": 1}
    assert failing["failedNamespaces"] == [
        {"namespace": "b", "reason": "Refused", "message": "denied by policy"}
    ]
    assert failing["conditions"][0]["reason"] == "NamespacesFailing"


def test_failed_namespaces_are_bounded_and_the_rest_counted() -> None:
    names = tuple(f"ns-{i:03}" for i in range(50))
    failures = tuple(Failure(n, "ConfigBundleConflict", "m") for n in reversed(names))
    status = status_of(ccb(), Plan(selected=names, failures=failures), now=NOW)
    assert status["namespaces"]["failed"] == 50
    listed = [f["namespace"] for f in status["failedNamespaces"]]
    assert listed == list(names[:MAX_FAILED_NAMESPACES])
    assert "and 45 more" in status["conditions"][0]["message"]


def test_an_unchanged_world_gives_an_equal_status() -> None:
    owner = ccb()
    first = status_of(owner, Plan(selected=("a",), ready=("a",)), now=NOW)
    owner["status"] = first
    later = NOW + datetime.timedelta(hours=1)
    assert status_of(owner, Plan(selected=("a",), ready=("a",)), now=later) == first
    flipped = status_of(owner, Plan(selected=("a",)), now=later)
    assert flipped["conditions"][0]["lastTransitionTime"] == "2026-01-02T04:04:05Z"


def test_each_namespace_alone_is_decided_as_decide_decides_it_among_all() -> None:
    """decide_namespace (one stamp key's work) agrees with decide (the status's view) on
    every kind of namespace: new, ready, edited, foreign, rival-held, left, terminating."""
    own = ccb()
    older = ccb("older", template={"configMapName": "trusted-ca"}, uid="uid-0", created="2025")
    older["spec"]["namespaceSelector"] = {"matchLabels": {"rival": "yes"}}
    edited = stamped(own, "edited")
    edited["spec"] = {"data": {"ca.crt": "hand"}}
    foreign = {"metadata": {"name": "trusted-ca", "namespace": "foreign"}}
    spaces = [
        ns("new", {"ca": "yes"}),
        ns("ready", {"ca": "yes"}),
        ns("edited", {"ca": "yes"}),
        ns("foreign", {"ca": "yes"}),
        ns("rival", {"ca": "yes", "rival": "yes"}),
        ns("left"),
        ns("going", {"ca": "yes"}, terminating=True),
    ]
    bundles: dict[str, Mapping[str, Any]] = {
        "ready": stamped(own, "ready"),
        "edited": edited,
        "foreign": foreign,
        "rival": stamped(own, "rival"),
        "left": stamped(own, "left"),
        "going": stamped(own, "going"),
    }
    plan = decide(
        own,
        namespaces=spaces,
        bundle_at=bundles.get,
        stamps=[b for b in bundles.values() if b is not foreign],
        others=[own, older],
    )
    verdicts = {
        str(space["metadata"]["name"]): decide_namespace(
            own, space, current=bundles.get(space["metadata"]["name"]), others=[own, older]
        )
        for space in spaces
    }
    assert sorted(n for n, v in verdicts.items() if v.selected) == list(plan.selected)
    assert sorted(n for n, v in verdicts.items() if v.ready) == list(plan.ready)
    assert sorted((f for v in verdicts.values() if (f := v.failure)), key=str) == sorted(
        plan.failures, key=str
    )
    actions = [v.action for v in verdicts.values() if v.action is not None]
    assert sorted(actions, key=repr) == sorted(plan.actions, key=repr)
    kinds = {n: type(v.action).__name__ for n, v in verdicts.items() if v.action is not None}
    assert kinds == {"new": "Create", "edited": "Update", "rival": "Delete", "left": "Delete"}
    assert decide_namespace(own, None, current=None) == decide_namespace(
        own, spaces[-1], current=None
    )
