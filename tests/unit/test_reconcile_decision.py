"""The pure reconcile decision: desired vs actual -> one action (no server)."""

from __future__ import annotations

import base64
import copy
import hashlib
from typing import Any

import pytest

from cbop.api import ANNOTATION_CONTENT_HASH, SpecError, TooLargeError, content_hash, parse_spec
from cbop.configbundle.decision import Action, FinalizerChange, status_can_wait
from cbop.configbundle.desired import in_sync
from cbop_testing.objects import UID, bundle, decide_for, synced_status, written


def test_missing_configmap_is_created_with_owner_reference_and_labels() -> None:
    d = decide_for(bundle({"data": {"a": "1"}, "labels": {"env": "prod"}}), None)
    assert d.action is Action.CREATE
    assert d.body is not None
    meta = d.body["metadata"]
    assert meta["name"] == "app"
    assert meta["labels"] == {
        "env": "prod",
        "app.kubernetes.io/managed-by": "cbop",
        "cbop.dev/bundle": "app",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "cbop.dev/v1beta1",
            "kind": "ConfigBundle",
            "name": "app",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert d.body["data"] == {"a": "1"}


def test_matching_configmap_needs_no_write() -> None:
    b = bundle({"data": {"a": "1"}, "binaryData": {"img": "/w=="}})
    assert decide_for(b, written(b)).action is Action.NONE


def test_foreign_label_added_to_configmap_is_left_alone() -> None:
    """Case 5: another actor's label causes no write."""
    b = bundle({"data": {"a": "1"}})
    cm = written(b)
    cm["metadata"]["labels"]["team"] = "x"
    assert decide_for(b, cm).action is Action.NONE


def test_hand_edit_is_drift_and_restores_content() -> None:
    """Case 7: tampered value and extra key are corrected; drift is flagged."""
    b = bundle({"data": {"a": "1"}}, status=synced_status())
    cm = written(b)
    cm["data"] = {"a": "tampered", "extra": "x"}
    d = decide_for(b, cm)
    assert d.action is Action.UPDATE
    assert d.drift
    assert d.body is not None
    assert d.body["data"] == {"a": "1"}
    assert d.body["metadata"]["resourceVersion"] == "7"


def test_spec_change_is_an_update_not_drift() -> None:
    old = bundle({"data": {"a": "1"}}, status=synced_status(1))
    new = bundle({"data": {"a": "2"}}, generation=2, status=synced_status(1))
    d = decide_for(new, written(old))
    assert d.action is Action.UPDATE
    assert not d.drift


def test_hand_delete_is_recreated_as_drift() -> None:
    """Case 8."""
    d = decide_for(bundle(status=synced_status()), None)
    assert d.action is Action.CREATE
    assert d.drift


def test_removed_spec_label_is_removed_and_foreign_label_kept() -> None:
    """Case 9."""
    v1 = bundle({"data": {"a": "1"}, "labels": {"env": "prod", "tier": "web"}})
    cm = written(v1)
    cm["metadata"]["labels"]["reloader.example/match"] = "true"
    v2 = bundle({"data": {"a": "1"}, "labels": {"env": "prod"}}, generation=2)
    d = decide_for(v2, cm)
    assert d.action is Action.UPDATE
    assert d.body is not None
    labels = d.body["metadata"]["labels"]
    assert "tier" not in labels
    assert labels["reloader.example/match"] == "true"
    assert labels["env"] == "prod"


def test_removed_spec_annotation_is_removed_and_foreign_annotation_kept() -> None:
    v1 = bundle({"data": {"a": "1"}, "annotations": {"x/a": "1", "x/b": "2"}})
    cm = written(v1)
    cm["metadata"]["annotations"]["other/keep"] = "yes"
    v2 = bundle({"data": {"a": "1"}}, generation=2)
    d = decide_for(v2, cm)
    assert d.body is not None
    annotations = d.body["metadata"]["annotations"]
    assert "x/a" not in annotations
    assert "x/b" not in annotations
    assert annotations["other/keep"] == "yes"
    assert "cbop.dev/managed-annotations" not in annotations


def test_bundle_metadata_is_never_copied() -> None:
    """Case 10."""
    b = bundle(
        {"data": {"a": "1"}, "labels": {"a": "b"}},
        labels={"app.kubernetes.io/instance": "gitops-app"},
    )
    d = decide_for(b, None)
    assert d.body is not None
    assert d.body["metadata"]["labels"] == {
        "a": "b",
        "app.kubernetes.io/managed-by": "cbop",
        "cbop.dev/bundle": "app",
    }
    assert set(d.body["metadata"]["annotations"]) == {
        ANNOTATION_CONTENT_HASH,
        "cbop.dev/managed-labels",
    }


def test_foreign_finalizers_and_owner_references_are_kept() -> None:
    b = bundle({"data": {"a": "1"}})
    cm = written(b)
    cm["metadata"]["finalizers"] = ["other.example/keep"]
    other_ref = {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u2"}
    cm["metadata"]["ownerReferences"].append(other_ref)
    cm["data"] = {"a": "changed"}
    d = decide_for(b, cm)
    assert d.body is not None
    assert d.body["metadata"]["finalizers"] == ["other.example/keep"]
    assert other_ref in d.body["metadata"]["ownerReferences"]
    assert in_sync(
        d.desired,  # type: ignore[arg-type]
        {**cm, "data": {"a": "1"}},
    )


def test_an_update_body_shares_nothing_it_may_change_with_the_cached_configmap() -> None:
    b = bundle({"data": {"a": "1"}, "labels": {"env": "prod"}})
    cm = written(b)
    cm["metadata"]["finalizers"] = ["other.example/keep"]
    cm["metadata"]["labels"]["team"] = "web"
    cm["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:data": {}}}]
    cm["data"] = {"a": "changed"}
    before = copy.deepcopy(cm)
    d = decide_for(b, cm)
    assert d.body is not None
    meta = d.body["metadata"]
    assert "managedFields" not in meta
    assert meta["resourceVersion"] == "7"
    assert meta["labels"]["team"] == "web"
    # Changing the body changes nothing in the cache it was rendered from.
    meta["finalizers"].append("mine")
    meta["labels"]["x"] = "y"
    meta["annotations"]["x"] = "y"
    meta["ownerReferences"][0]["name"] = "other"
    d.body["data"]["a"] = "2"
    assert cm == before


def test_owner_references_compare_by_their_fields_in_any_order() -> None:
    b = bundle({"data": {"a": "1"}})
    d = decide_for(b, None)
    assert d.desired is not None
    assert in_sync(d.desired, written(b))
    ours = written(b)["metadata"]["ownerReferences"][0]
    other_ref = {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u2"}
    # A foreign reference kept, in another order, and a field cbop does not compare.
    cm = written(b)
    cm["metadata"]["ownerReferences"] = [{**ours, "extra": "x"}, other_ref]
    assert in_sync(d.desired, cm)
    # A controller reference without blockOwnerDeletion is not cbop's.
    cm["metadata"]["ownerReferences"] = [
        {k: v for k, v in ours.items() if k != "blockOwnerDeletion"},
        other_ref,
    ]
    assert not in_sync(d.desired, cm)


def test_spec_maps_of_other_types_are_refused_by_key() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(bundle({"data": {"a": "1", "b": 2, "c": "3"}}))
    assert "spec.data['b'] must be a string" in err.value.message
    with pytest.raises(SpecError) as err:
        parse_spec(bundle({"labels": {"x": None}}))
    assert "spec.labels['x']" in err.value.message


def test_spec_size_counts_utf8_bytes() -> None:
    assert parse_spec(bundle({"data": {"a": "abc", "b": "\u00e9\u20ac"}})).size == 3 + 2 + 3


@pytest.mark.parametrize(
    ("blocker_refs", "needle"),
    [
        pytest.param(None, "not managed by this ConfigBundle", id="plain"),
        pytest.param(
            [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "d",
                    "uid": "x",
                    "controller": True,
                }
            ],
            "controlled by Deployment d",
            id="other-controller",
        ),
        pytest.param(
            [
                {
                    "apiVersion": "cbop.dev/v1alpha1",
                    "kind": "ConfigBundle",
                    "name": "app",
                    "uid": "old-uid",
                    "controller": True,
                }
            ],
            "earlier ConfigBundle",
            id="previous-incarnation",
        ),
    ],
)
def test_name_taken_by_foreign_configmap_is_a_conflict(
    blocker_refs: list[dict[str, object]] | None, needle: str
) -> None:
    """Case 11: the existing ConfigMap is never modified."""
    blocker: dict[str, object] = {
        "metadata": {"name": "app", "namespace": "demo", "uid": "b", "resourceVersion": "1"},
        "data": {"k": "mine"},
    }
    if blocker_refs:
        blocker["metadata"]["ownerReferences"] = blocker_refs  # type: ignore[index]
    d = decide_for(bundle(), blocker)
    assert d.action is Action.CONFLICT
    assert d.body is None
    assert needle in d.message


def test_key_moving_from_binary_data_to_data_converges() -> None:
    """Case 2: both maps are rebuilt from the spec on every write."""
    v1 = bundle({"binaryData": {"cfg": "aGk="}})
    cm = written(v1)
    v2 = bundle({"data": {"cfg": "hi"}}, generation=2)
    d = decide_for(v2, cm)
    assert d.action is Action.UPDATE
    assert d.body is not None
    assert d.body["data"] == {"cfg": "hi"}
    assert "binaryData" not in d.body


def test_binary_content_is_byte_exact() -> None:
    """Case 3."""
    raw = bytes([0xFF, 0xFE, 0x00, 0x80])
    d = decide_for(bundle({"binaryData": {"img": base64.b64encode(raw).decode()}}), None)
    assert d.body is not None
    assert base64.b64decode(d.body["binaryData"]["img"]) == raw
    assert hashlib.sha256(base64.b64decode(d.body["binaryData"]["img"])).digest() == (
        hashlib.sha256(raw).digest()
    )


def test_binary_data_in_other_base64_spelling_is_in_sync() -> None:
    b = bundle({"binaryData": {"img": "/w=="}})
    cm = written(b)
    assert decide_for(b, cm).action is Action.NONE


def test_immutable_content_change_replaces() -> None:
    """Case 4."""
    v1 = bundle({"immutable": True, "data": {"a": "1"}})
    cm = written(v1)
    v2 = bundle({"immutable": True, "data": {"a": "2"}}, generation=2)
    d = decide_for(v2, cm)
    assert d.action is Action.REPLACE
    assert d.precondition == {"uid": "cm-uid", "resourceVersion": "7"}
    assert d.body is not None
    assert "resourceVersion" not in d.body["metadata"]
    assert d.body["immutable"] is True


def test_configmap_made_immutable_by_hand_is_replaced_on_change() -> None:
    """Case 4, second half: someone set immutable on the ConfigMap."""
    v1 = bundle({"data": {"a": "1"}})
    cm = written(v1)
    cm["immutable"] = True
    assert decide_for(v1, cm).action is Action.REPLACE
    v2 = bundle({"data": {"a": "2"}}, generation=2)
    assert decide_for(v2, cm).action is Action.REPLACE


def test_immutable_configmap_metadata_only_change_is_an_update() -> None:
    v1 = bundle({"immutable": True, "data": {"a": "1"}})
    cm = written(v1)
    v2 = bundle({"immutable": True, "data": {"a": "1"}, "labels": {"x": "y"}}, generation=2)
    assert decide_for(v2, cm).action is Action.UPDATE


def test_suspended_bundle_makes_no_write() -> None:
    d = decide_for(bundle({"data": {"a": "1"}, "suspend": True}), None)
    assert d.action is Action.SUSPENDED
    assert d.body is None


def test_deleting_bundle_without_finalizer_gets_no_writes() -> None:
    b = bundle(deleting=True)
    d = decide_for(b, written(bundle()))
    assert d.action is Action.DELETING
    assert d.body is None


def test_orphan_policy_adds_finalizer_and_release_strips_ownership() -> None:
    b = bundle({"data": {"a": "1"}, "deletionPolicy": "Orphan"})
    assert decide_for(b, None).finalizer is FinalizerChange.ADD
    cm = written(b)
    cm["metadata"]["labels"]["team"] = "x"
    gone = bundle(
        {"data": {"a": "1"}, "deletionPolicy": "Orphan"},
        finalizers=["cbop.dev/orphan"],
        deleting=True,
    )
    d = decide_for(gone, cm)
    assert d.action is Action.RELEASE
    assert d.finalizer is FinalizerChange.REMOVE
    assert d.body is not None
    assert d.body["metadata"]["ownerReferences"] == []
    assert d.body["metadata"]["labels"] == {"team": "x"}
    assert ANNOTATION_CONTENT_HASH not in d.body["metadata"]["annotations"]
    assert d.body["data"] == {"a": "1"}


def released(spec: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """The ConfigMap as cbop's Orphan release left it (bundle ``kw`` or demo/app)."""
    spec = spec or {"data": {"a": "1"}, "deletionPolicy": "Orphan"}
    gone = bundle(spec, finalizers=["cbop.dev/orphan"], deleting=True, **kw)
    d = decide_for(gone, written(bundle(spec, **kw)))
    assert d.action is Action.RELEASE
    assert d.body is not None
    return copy.deepcopy(d.body)


def test_release_records_who_released_the_configmap() -> None:
    cm = released()
    assert cm["metadata"]["annotations"]["cbop.dev/released-by"] == "demo/app"


@pytest.mark.parametrize(
    ("data", "immutable", "action", "restored"),
    [
        ({"a": "1"}, False, Action.UPDATE, False),
        ({"a": "edited"}, False, Action.UPDATE, True),
        ({"a": "edited"}, True, Action.REPLACE, True),
    ],
    ids=["same-content", "edited", "edited-immutable"],
)
def test_the_same_bundle_takes_its_released_configmap_back(
    data: dict[str, str], immutable: bool, action: Action, restored: bool
) -> None:
    """Issue 11 item 8: a re-applied bundle adopts what its namesake released."""
    cm = released()
    cm["data"] = data
    if immutable:
        cm["immutable"] = True
    cm["metadata"]["labels"] = {"team": "x"}
    again = bundle({"data": {"a": "1"}, "deletionPolicy": "Orphan"})
    again["metadata"]["uid"] = "new-uid"
    d = decide_for(again, cm)
    assert d.action is action
    assert d.adopted
    assert ("content was restored" in d.message) is restored
    assert d.body is not None
    meta = d.body["metadata"]
    assert [r["uid"] for r in meta["ownerReferences"]] == ["new-uid"]
    assert "cbop.dev/released-by" not in meta["annotations"]
    assert meta["labels"]["team"] == "x"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "cbop"
    assert d.body["data"] == {"a": "1"}


def test_released_configmap_is_not_taken_by_another_bundle() -> None:
    cm = released()
    other = bundle({"data": {"a": "2"}, "configMapName": "app"}, name="other")
    d = decide_for(other, cm)
    assert d.action is Action.CONFLICT
    assert not d.adopted
    elsewhere = released(namespace="copy-source")
    elsewhere["metadata"]["namespace"] = "demo"  # copied to another namespace by a tool
    assert decide_for(bundle(), elsewhere).action is Action.CONFLICT


@pytest.mark.parametrize("how", ["annotation-removed", "controller-set"])
def test_a_released_configmap_someone_kept_is_never_taken(how: str) -> None:
    cm = released()
    if how == "annotation-removed":
        del cm["metadata"]["annotations"]["cbop.dev/released-by"]
    else:
        cm["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "d",
                "uid": "d1",
                "controller": True,
            }
        ]
    d = decide_for(bundle(), cm)
    assert d.action is Action.CONFLICT
    assert d.body is None


def test_switching_back_to_delete_policy_removes_finalizer() -> None:
    b = bundle({"data": {"a": "1"}}, finalizers=["cbop.dev/orphan"])
    assert decide_for(b, written(b)).finalizer is FinalizerChange.REMOVE


def test_content_hash_framing_is_unambiguous() -> None:
    assert content_hash({"ab": "c"}, {}) != content_hash({"a": "bc"}, {})
    assert content_hash({"a": "1"}, {}) != content_hash({}, {"a": b"1"})
    assert content_hash({"a": "1", "b": "2"}, {}) == content_hash({"b": "2", "a": "1"}, {})
    assert content_hash({}, {}).startswith("sha256:")


def test_content_hash_is_stable_across_releases() -> None:
    # Every managed ConfigMap carries this digest: a different byte stream would make an
    # upgraded operator rewrite every ConfigMap it manages.
    assert content_hash(
        {"b": "two", "a": "one \u00e9", "z": ""}, {"bin": b"\x00\xff", "a2": b""}
    ) == ("sha256:07d85e7d94d84297e572f6e47384fc6c2cb25d909632c24020ac8ab51acee9a2")
    assert content_hash({}, {}) == (
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


# -- spec validation (second line of defence behind the CRD) --------------------------

BAD_KEYS = [
    "hello.io/is-host",
    "x:y",
    "..data",
    ".",
    "..",
    "a b",
    "привет",
    "k" * 254,
]


@pytest.mark.parametrize("key", BAD_KEYS, ids=lambda k: k[:12])
@pytest.mark.parametrize("field", ["data", "binaryData"])
def test_invalid_keys_are_rejected_by_name(key: str, field: str) -> None:
    """Case 1: never renamed silently; the message names the key."""
    value = "aGk=" if field == "binaryData" else "v"
    with pytest.raises(SpecError) as err:
        parse_spec(bundle({field: {key: value}}))
    assert repr(key[:20])[:15] in err.value.message or key[:20] in err.value.message


@pytest.mark.parametrize("key", ["a.b-c_D", "k" * 253, ".hidden", "a..b"])
def test_valid_edge_keys_are_accepted(key: str) -> None:
    assert parse_spec(bundle({"data": {key: "v"}})).data == {key: "v"}


def test_same_key_in_both_maps_is_rejected() -> None:
    with pytest.raises(SpecError, match="'cfg'") as one:
        parse_spec(bundle({"data": {"cfg": "x"}, "binaryData": {"cfg": "aGk="}}))
    assert str(one.value).startswith("key 'cfg' appears in both spec.data and spec.binaryData")
    with pytest.raises(SpecError) as two:
        parse_spec(bundle({"data": {"a": "x", "b": "y"}, "binaryData": {"a": "aGk=", "b": "aGk="}}))
    assert str(two.value).startswith("keys 'a', 'b' appear in both")


def test_invalid_base64_is_rejected() -> None:
    with pytest.raises(SpecError, match=r"binaryData\['img'\] is not valid base64"):
        parse_spec(bundle({"binaryData": {"img": "not base64!"}}))


def test_size_limit_counts_bytes_exactly() -> None:
    """Case 15: exactly 1 MiB is accepted; one byte more is ConfigMapTooLarge."""
    assert parse_spec(bundle({"data": {"a": "x" * 1_048_576}})).size == 1_048_576
    with pytest.raises(TooLargeError) as err:
        parse_spec(bundle({"data": {"a": "x" * 1_048_577}}))
    assert err.value.size == 1_048_577
    assert "1,048,577 bytes" in err.value.message
    # Multi-byte characters count as bytes, not characters.
    with pytest.raises(TooLargeError):
        parse_spec(bundle({"data": {"a": "é" * 524_289}}))
    # binaryData counts decoded bytes.
    exact = base64.b64encode(b"\0" * 1_048_576).decode()
    assert parse_spec(bundle({"binaryData": {"b": exact}})).size == 1_048_576


def test_ten_thousand_one_byte_keys_work() -> None:
    data = {f"k{i}": "x" for i in range(10_000)}
    d = decide_for(bundle({"data": data}), None)
    assert d.action is Action.CREATE
    assert d.body is not None
    assert len(d.body["data"]) == 10_000


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"labels": {"app.kubernetes.io/managed-by": "me"}}, "reserved"),
        ({"annotations": {"cbop.dev/content-hash": "x"}}, "reserved"),
        ({"labels": {"ok": "bad value!"}}, "label 'ok'"),
        ({"labels": {"Bad_Prefix.io/x": "v"}}, "invalid prefix"),
        ({"configMapName": "Not_A_Name"}, "configMapName"),
        ({"deletionPolicy": "Keep"}, "deletionPolicy"),
        ({"immutable": "yes"}, "immutable"),
        ({"data": {"a": 1}}, "must be a string"),
    ],
    ids=[
        "reserved-label",
        "reserved-annotation",
        "label-value",
        "label-prefix",
        "cm-name",
        "policy",
        "immutable-type",
        "value-type",
    ],
)
def test_invalid_spec_fields_are_explained(spec: dict[str, object], needle: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(bundle(spec))
    assert needle in err.value.message


def test_invalid_spec_decides_invalid_without_body() -> None:
    d = decide_for(bundle({"data": {"bad key": "v"}}), None)
    assert d.action is Action.INVALID
    assert d.body is None
    assert d.error is not None


def test_long_bundle_name_gets_a_valid_label_value() -> None:
    name = "n" * 200
    d = decide_for(bundle(name=name), None)
    assert d.body is not None
    value = d.body["metadata"]["labels"]["cbop.dev/bundle"]
    assert len(value) <= 63
    assert (
        value
        != decide_for(bundle(name="n" * 201), None).body["metadata"]["labels"][  # type: ignore[index]
            "cbop.dev/bundle"
        ]
    )


def test_render_never_mutates_the_cached_object() -> None:
    b = bundle({"data": {"a": "1"}, "labels": {"x": "y"}})
    cm = written(b)
    cm["data"] = {"a": "2"}
    snapshot = copy.deepcopy(cm)
    decide_for(b, cm)
    assert cm == snapshot


def test_an_owner_reference_written_as_v1alpha1_is_kept_and_needs_no_write() -> None:
    """After the upgrade to v1beta1, a ConfigMap that 0.1.0 made (its owner reference
    naming cbop.dev/v1alpha1) is in sync: an upgrade rewrites no ConfigMap, and any
    write keeps the old reference as it is (the garbage collector resolves it)."""
    b = bundle({"data": {"a": "1"}})
    current = written(b)
    current["metadata"]["ownerReferences"][0]["apiVersion"] = "cbop.dev/v1alpha1"
    assert decide_for(b, current).action is Action.NONE
    changed = decide_for(bundle({"data": {"a": "2"}}, generation=2), current)
    assert changed.action is Action.UPDATE
    assert changed.body is not None
    assert changed.body["metadata"]["ownerReferences"] == current["metadata"]["ownerReferences"]
    # A reference that is not a blocking controller reference to it is replaced.
    loose = dict(current["metadata"]["ownerReferences"][0], blockOwnerDeletion=False)
    current["metadata"]["ownerReferences"] = [loose]
    fixed = decide_for(b, current)
    assert fixed.action is Action.UPDATE
    assert fixed.body is not None
    assert fixed.body["metadata"]["ownerReferences"][0]["apiVersion"] == "cbop.dev/v1beta1"


def _ready_with(content: str, generation: int = 1) -> dict[str, Any]:
    status = synced_status(generation)
    status["conditions"][0]["observedGeneration"] = generation
    status["contentHash"] = content_hash({"a": content}, {})
    return status


def test_new_content_within_a_ready_generation_lets_the_status_wait() -> None:
    """What a changed source brings: the ConfigMap now, the status on the next round."""
    old = bundle({"data": {"a": "1"}}, status=_ready_with("1"))
    new = bundle({"data": {"a": "2"}}, status=_ready_with("1"))
    d = decide_for(new, written(old))
    assert d.action is Action.UPDATE
    assert status_can_wait(new, d)


@pytest.mark.parametrize(
    "case",
    ["spec change", "drift", "not ready", "in sync", "created", "condition of an older generation"],
)
def test_every_other_write_reports_in_the_same_reconcile(case: str) -> None:
    old = bundle({"data": {"a": "1"}}, status=_ready_with("1"))
    new = bundle({"data": {"a": "2"}}, status=_ready_with("1"))
    current: dict[str, Any] | None = written(old)
    if case == "spec change":
        new = bundle({"data": {"a": "2"}}, generation=2, status=_ready_with("1"))
    elif case == "drift":
        new = bundle({"data": {"a": "2"}}, status=_ready_with("2"))
    elif case == "not ready":
        new["status"]["conditions"][0]["status"] = "False"
    elif case == "in sync":
        current = written(new)
    elif case == "created":
        current = None
    else:
        new["status"]["conditions"][0]["observedGeneration"] = 0
    assert not status_can_wait(new, decide_for(new, current))
