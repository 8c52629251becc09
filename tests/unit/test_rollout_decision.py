"""The pure rollout decision: references, managed ConfigMaps, the digest, the action."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest

from cbop.rollout import (
    ANNOTATION_CONFIG_HASH,
    LABEL_CONFIG_BASELINE,
    Action,
    apply_body,
    baseline,
    config_digest,
    decide,
    index_by_configmap,
    referenced_configmaps,
)
from cbop.rollout.decision import (
    EMPTY_DIGEST,
    FieldOwner,
    ManagedObject,
    baseline_value,
    in_last_applied,
    is_managed,
    managed_references,
    may_take_back,
    other_owners,
    required_configmaps,
)
from cbop_testing.objects import configmap, rolled, with_annotation, with_baseline, workload

EVERY_REFERENCE: dict[str, Any] = {
    "metadata": {"name": "w", "namespace": "demo"},
    "spec": {
        "template": {
            "spec": {
                "volumes": [
                    {"name": "a", "configMap": {"name": "vol"}},
                    {"name": "s", "secret": {"secretName": "not-a-configmap"}},
                    {
                        "name": "p",
                        "projected": {
                            "sources": [
                                {"configMap": {"name": "projected"}},
                                {"secret": {"name": "also-not"}},
                                {"serviceAccountToken": {"path": "t"}},
                            ]
                        },
                    },
                ],
                "initContainers": [
                    {"name": "i", "envFrom": [{"configMapRef": {"name": "init-env-from"}}]}
                ],
                "containers": [
                    {
                        "name": "c",
                        "envFrom": [
                            {"configMapRef": {"name": "env-from", "optional": True}},
                            {"secretRef": {"name": "secret-env"}},
                        ],
                        "env": [
                            {"name": "X", "value": "1"},
                            {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "key-ref"}}},
                            {"name": "Z", "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
                            {"name": "V", "valueFrom": {"configMapKeyRef": {"name": "vol"}}},
                        ],
                    }
                ],
                "ephemeralContainers": [
                    {
                        "name": "e",
                        "env": [
                            {"name": "E", "valueFrom": {"configMapKeyRef": {"name": "ephemeral"}}}
                        ],
                    }
                ],
            }
        }
    },
}


def test_every_kind_of_reference_is_found_once() -> None:
    assert referenced_configmaps(EVERY_REFERENCE) == [
        "env-from",
        "ephemeral",
        "init-env-from",
        "key-ref",
        "projected",
        "vol",
    ]


@pytest.mark.parametrize(
    "obj",
    [{}, {"spec": {}}, {"spec": {"template": {}}}, {"spec": {"template": {"spec": None}}}],
    ids=["empty", "no-template", "no-pod-spec", "null-pod-spec"],
)
def test_a_workload_without_a_pod_spec_references_nothing(obj: dict[str, Any]) -> None:
    assert referenced_configmaps(obj) == []


def test_the_index_carries_the_namespace() -> None:
    assert index_by_configmap(workload(volumes=["b", "a"], env_from=["a"])) == [
        "demo/a",
        "demo/b",
    ]


@pytest.mark.parametrize(
    ("cm", "managed"),
    [
        (configmap("a"), True),
        (configmap("a", managed=False), False),
        (
            {**configmap("a"), "metadata": {**configmap("a")["metadata"], "ownerReferences": []}},
            False,
        ),
        (
            {**configmap("a"), "metadata": {**configmap("a")["metadata"], "labels": {}}},
            False,
        ),
    ],
    ids=["label-and-owner", "neither", "label-only", "owner-only"],
)
def test_managed_means_the_label_and_a_bundle_controller(cm: dict[str, Any], managed: bool) -> None:
    assert is_managed(cm) is managed


def test_the_digest_is_order_free_and_covers_names_and_hashes() -> None:
    a, b = ManagedObject("a", "x", "sha256:1"), ManagedObject("b", "y", "sha256:2")
    assert config_digest([a, b]) == config_digest([b, a])
    assert config_digest([a, b]) != config_digest([a])
    assert config_digest([a]) != config_digest([ManagedObject("a", "x", "sha256:3")])
    # Framing: moving a character between name and hash changes the digest.
    assert config_digest([ManagedObject("ab", "x", "c")]) != config_digest(
        [ManagedObject("a", "x", "bc")]
    )


def test_the_content_hash_is_the_reconcilers() -> None:
    cm = configmap("a", {"x": "1"})
    (ref,) = managed_references(workload(volumes=["a"]), {"a": cm})
    assert ref.content_hash == cm["metadata"]["annotations"]["cbop.dev/content-hash"]
    assert ref.bundle == "a"


def test_binary_data_counts_in_the_content() -> None:
    cm = configmap("a")
    binary = copy.deepcopy(cm)
    binary["binaryData"] = {"b": "AAE="}
    w = workload(volumes=["a"])
    assert decide(w, {"a": cm}).digest != decide(w, {"a": binary}).digest


def test_first_sight_records_the_baseline_and_does_not_roll() -> None:
    """Case 17: pods that start after the content exists already read it, so a workload
    that opts in (at creation or later) gets the baseline label, not a new template."""
    w = workload(volumes=["a"], env_from=["b"])
    cms = {"a": configmap("a"), "b": configmap("b")}
    first = decide(w, cms)
    assert first.action is Action.RECORD
    assert first.current == ""
    assert first.baseline == ""
    assert [c.name for c in first.configmaps] == ["a", "b"]
    body = apply_body(w, "apps/v1", "Deployment", first.digest, roll=False)
    assert "spec" not in body
    assert body["metadata"]["labels"] == {
        LABEL_CONFIG_BASELINE: first.digest.removeprefix("sha256:")[:40]
    }
    again = decide(with_baseline(w, first.digest), cms)
    assert again.action is Action.NONE
    assert again.digest == first.digest


def _reading(way: str, optional: bool | None, also: tuple[str, ...] = ()) -> dict[str, Any]:
    """A labelled workload reading ConfigMap ``opt`` one ``way`` (``optional`` as given,
    unset when None), and ``also`` as volumes."""
    ref: dict[str, Any] = {"name": "opt"}
    if optional is not None:
        ref["optional"] = optional
    w = workload(volumes=list(also))
    pod = w["spec"]["template"]["spec"]
    init: dict[str, Any] = {"name": "init"}
    if way == "volume":
        pod["volumes"].append({"name": "o", "configMap": ref})
    elif way == "projected":
        pod["volumes"].append({"name": "o", "projected": {"sources": [{"configMap": ref}]}})
    elif way == "env-from":
        pod["containers"][0]["envFrom"] = [{"configMapRef": ref}]
    elif way == "env-value-from":
        key_ref = {**ref, "key": "k"}
        pod["containers"][0]["env"] = [{"name": "K", "valueFrom": {"configMapKeyRef": key_ref}}]
    elif way == "init-env-from":
        pod["initContainers"] = [{**init, "envFrom": [{"configMapRef": ref}]}]
    elif way == "init-env-value-from":
        key_ref = {**ref, "key": "k"}
        env = [{"name": "K", "valueFrom": {"configMapKeyRef": key_ref}}]
        pod["initContainers"] = [{**init, "env": env}]
    else:
        raise AssertionError(way)
    return w


WAYS = ("volume", "projected", "env-from", "env-value-from", "init-env-from", "init-env-value-from")


def test_the_digest_of_nothing_is_no_contents_digest() -> None:
    """The baseline of a workload that reads no managed ConfigMap: sha256 of no bytes,
    which no list of (name, hash) pairs hashes to, an empty pair included."""
    assert EMPTY_DIGEST == config_digest([]) == "sha256:" + hashlib.sha256(b"").hexdigest()
    assert config_digest([ManagedObject("", "", "")]) != EMPTY_DIGEST
    assert baseline_value(EMPTY_DIGEST) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4"


@pytest.mark.parametrize("way", WAYS)
def test_a_configmap_that_appears_later_rolls_the_workload_once(way: str) -> None:
    """Case 32 and its kind: first seen while the optional ``opt`` is absent, the
    workload's pods start without it; the baseline of nothing is recorded (a label:
    nothing rolls) and kept without a write; the ConfigMap a bundle then creates rolls
    the workload once."""
    w = _reading(way, True)
    assert referenced_configmaps(w) == ["opt"]
    first = decide(w, {})
    assert first.action is Action.RECORD
    assert first.digest == EMPTY_DIGEST
    assert first.configmaps == ()
    body = apply_body(w, "apps/v1", "Deployment", first.digest, roll=False)
    assert body["metadata"]["labels"] == {LABEL_CONFIG_BASELINE: baseline_value(EMPTY_DIGEST)}
    assert "spec" not in body
    seen = with_baseline(w, first.digest)
    steady = decide(seen, {})
    assert (steady.action, steady.digest) == (Action.NONE, EMPTY_DIGEST)
    arrived = decide(seen, {"opt": configmap("opt")})
    assert arrived.action is Action.APPLY
    assert arrived.baseline == baseline_value(EMPTY_DIGEST)
    assert [c.name for c in arrived.configmaps] == ["opt"]
    assert decide(rolled(seen, arrived.digest), {"opt": configmap("opt")}).action is Action.NONE


@pytest.mark.parametrize("optional", [False, None], ids=["required", "unset"])
@pytest.mark.parametrize("way", WAYS)
def test_a_required_configmap_that_appears_later_is_the_baseline(
    way: str, optional: bool | None
) -> None:
    """A pod cannot start without a required ConfigMap: first seen while ``opt`` is
    absent (a chart that creates the Deployment before its ConfigBundle), the workload's
    pods wait for it and start with what appears. So nothing is written while it is
    absent, and its arrival is recorded as the baseline: no rollout for pods that have
    just started with that content."""
    w = _reading(way, optional)
    assert required_configmaps(w) == ["opt"]
    waiting = decide(w, {}, absent={"opt"})
    assert (waiting.action, waiting.digest) == (Action.NONE, "")
    assert "waiting for ConfigMap(s) opt" in waiting.message
    arrived = decide(w, {"opt": configmap("opt")})
    assert arrived.action is Action.RECORD
    assert [c.name for c in arrived.configmaps] == ["opt"]
    seen = with_baseline(w, arrived.digest)
    assert decide(seen, {"opt": configmap("opt")}).action is Action.NONE
    assert decide(seen, {"opt": configmap("opt", {"k": "2"})}).action is Action.APPLY


def test_one_required_configmap_absent_holds_the_record_back() -> None:
    """Only ``optional: true`` frees a reference; a required one absent holds the
    baseline back even when another ConfigMap the template reads is managed."""
    w = _reading("env-from", True, also=("a",))
    assert required_configmaps(w) == ["a"]
    assert decide(w, {}, absent={"a", "opt"}).action is Action.NONE
    assert decide(w, {"a": configmap("a")}, absent={"opt"}).action is Action.RECORD


@pytest.mark.parametrize("way", WAYS)
def test_a_required_configmap_of_another_owner_is_read_by_the_pods(way: str) -> None:
    """A required reference that exists but is not cbop's (not in the cache, not absent):
    the pods run with it, so the baseline of nothing is recorded at once, and a bundle
    that later takes its name rolls the workload once."""
    w = _reading(way, None)
    first = decide(w, {}, absent=frozenset())
    assert (first.action, first.digest) == (Action.RECORD, EMPTY_DIGEST)
    seen = with_baseline(w, first.digest)
    assert decide(seen, {"opt": configmap("opt")}).action is Action.APPLY


@pytest.mark.parametrize("way", WAYS)
def test_an_optional_configmap_that_becomes_managed_later_rolls_the_workload_once(
    way: str,
) -> None:
    """A ConfigMap that exists but is not cbop's (another tool's, or one released with
    ``deletionPolicy: Orphan``) counts as nothing; when a bundle takes it, it rolls once."""
    w = _reading(way, True)
    foreign = {"opt": configmap("opt", managed=False)}
    first = decide(w, foreign)
    assert (first.action, first.digest) == (Action.RECORD, EMPTY_DIGEST)
    seen = with_baseline(w, first.digest)
    assert decide(seen, foreign).action is Action.NONE
    assert decide(seen, {"opt": configmap("opt")}).action is Action.APPLY


def test_one_more_configmap_appearing_beside_a_managed_one_rolls_once() -> None:
    w = _reading("env-from", True, also=("a",))
    first = decide(w, {"a": configmap("a")})
    assert first.action is Action.RECORD
    assert [c.name for c in first.configmaps] == ["a"]
    seen = with_baseline(w, first.digest)
    assert decide(seen, {"a": configmap("a")}).action is Action.NONE
    both = decide(seen, {"a": configmap("a"), "opt": configmap("opt")})
    assert both.action is Action.APPLY
    assert [c.name for c in both.configmaps] == ["a", "opt"]


def test_a_workload_that_reads_no_configmap_at_all_gets_the_baseline_of_nothing() -> None:
    w = workload()
    assert referenced_configmaps(w) == []
    first = decide(w, {})
    assert (first.action, first.digest) == (Action.RECORD, EMPTY_DIGEST)
    assert decide(with_baseline(w, EMPTY_DIGEST), {}).action is Action.NONE


def test_a_bundle_deleted_and_created_again_rolls_only_for_other_content() -> None:
    """The pods keep what they read when the ConfigMap goes: no write while it is gone,
    none when the same content comes back, one rollout for other content."""
    w = workload(volumes=["a"])
    x = decide(w, {"a": configmap("a", {"k": "1"})}).digest
    seen = with_baseline(w, x)
    gone = decide(seen, {})
    assert (gone.action, gone.digest, gone.baseline) == (Action.NONE, "", baseline_value(x))
    released = decide(seen, {"a": configmap("a", {"k": "1"}, managed=False)})
    assert released.action is Action.NONE
    assert decide(seen, {"a": configmap("a", {"k": "1"})}).action is Action.NONE
    assert decide(seen, {"a": configmap("a", {"k": "2"})}).action is Action.APPLY


def test_a_bundle_created_again_after_first_sight_without_it_rolls_once() -> None:
    """First seen while the bundle was deleted: its pods read nothing of it (optional)."""
    w = _reading("volume", True)
    seen = with_baseline(w, decide(w, {}).digest)
    assert decide(seen, {"opt": configmap("opt", {"k": "1"})}).action is Action.APPLY


def test_a_paused_deployment_first_seen_reading_nothing_is_recorded_then_skipped() -> None:
    w = _reading("env-from", True)
    w["spec"]["paused"] = True
    assert decide(w, {}).action is Action.RECORD
    later = decide(with_baseline(w, EMPTY_DIGEST), {"opt": configmap("opt")})
    assert later.action is Action.SKIP
    assert "opt" in later.message


@pytest.mark.parametrize(
    ("labelled", "configmaps"),
    [
        (with_baseline, {"a": configmap("a")}),
        (rolled, {"a": configmap("a")}),
        (with_annotation, {"a": configmap("a")}),
        (with_baseline, {}),
        (rolled, {}),
        (with_annotation, {}),
    ],
    ids=["baselined", "rolled", "rolled-by-0.1.0", "baselined-gone", "rolled-gone", "0.1.0-gone"],
)
def test_what_an_earlier_release_left_is_kept_without_a_write(
    labelled: Any, configmaps: Any
) -> None:
    """Upgrades: a workload 0.2.0 baselined or rolled (0.1.0: the annotation alone) is
    in sync, also when what it read is gone since; only a workload 0.2.0 left without a
    baseline is recorded, once, when the ConfigMap it cannot start without exists."""
    w = workload(volumes=["a"])
    digest = config_digest(managed_references(w, {"a": configmap("a")}))
    assert decide(labelled(w, digest), configmaps).action is Action.NONE
    expected = Action.RECORD if configmaps else Action.NONE
    assert decide(w, configmaps, absent=set() if configmaps else {"a"}).action is expected


def test_a_content_change_after_the_baseline_applies_a_new_digest() -> None:
    w = workload(volumes=["a"])
    old = decide(w, {"a": configmap("a", {"k": "1"})}).digest
    new = decide(with_baseline(w, old), {"a": configmap("a", {"k": "2"})})
    assert new.action is Action.APPLY
    assert new.digest != old
    assert new.current == ""
    assert new.baseline == old.removeprefix("sha256:")[:40]


def test_a_workload_rolled_before_the_label_existed_takes_the_annotation_as_baseline() -> None:
    """Upgrades write nothing: the annotation cbop 0.1.0 wrote is the baseline."""
    w = workload(volumes=["a"])
    digest = decide(w, {"a": configmap("a", {"k": "1"})}).digest
    assert baseline(with_annotation(w, digest)) == digest.removeprefix("sha256:")[:40]
    assert decide(with_annotation(w, digest), {"a": configmap("a", {"k": "1"})}).action is (
        Action.NONE
    )
    changed = decide(with_annotation(w, digest), {"a": configmap("a", {"k": "2"})})
    assert changed.action is Action.APPLY
    assert changed.current == digest


def test_an_undone_template_is_judged_by_the_baseline_not_the_annotation() -> None:
    """Case 18: ``kubectl rollout undo`` brings back the annotation h1 while the content
    (and the label) is at h2: nothing to do; the next content change applies."""
    w = workload(volumes=["a"])
    h1 = decide(w, {"a": configmap("a", {"a": "1"})}).digest
    h2 = decide(w, {"a": configmap("a", {"a": "2"})}).digest
    undone = with_annotation(with_baseline(w, h2), h1)
    assert decide(undone, {"a": configmap("a", {"a": "2"})}).action is Action.NONE
    three = decide(undone, {"a": configmap("a", {"a": "3"})})
    assert three.action is Action.APPLY
    assert three.current == h1


def test_unmanaged_references_are_ignored() -> None:
    w = workload(volumes=["a", "mine"])
    digest = decide(w, {"a": configmap("a")}).digest
    with_foreign = {"a": configmap("a"), "mine": configmap("mine", {"z": "9"}, managed=False)}
    assert decide(rolled(w, digest), with_foreign).action is Action.NONE


@pytest.mark.parametrize(
    "configmaps",
    [{}, {"mine": configmap("mine", managed=False)}],
    ids=["none-at-hand", "only-foreign"],
)
def test_no_managed_reference_leaves_the_annotation_as_it_is(
    configmaps: dict[str, Any],
) -> None:
    w = with_annotation(workload(volumes=["mine"]), "sha256:old")
    decision = decide(w, configmaps)
    assert decision.action is Action.NONE
    assert decision.digest == ""


def test_not_opted_in_or_being_deleted_is_none() -> None:
    cms = {"a": configmap("a")}
    assert decide(workload(volumes=["a"], opted_in=False), cms).action is Action.NONE
    w = workload(volumes=["a"])
    w["metadata"]["labels"]["cbop.dev/rollout"] = "yes"
    assert decide(w, cms).action is Action.NONE
    deleting = workload(volumes=["a"])
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert decide(deleting, cms).action is Action.NONE


def test_a_paused_deployment_is_skipped_with_a_message_naming_the_bundles() -> None:
    cms = {"a": configmap("a", bundle="app-conf")}
    paused = with_baseline(workload(volumes=["a"], paused=True), "sha256:" + "0" * 64)
    decision = decide(paused, cms)
    assert decision.action is Action.SKIP
    assert "paused" in decision.message
    assert "app-conf" in decision.message
    # In sync: nothing to report, paused or not.
    synced = rolled(workload(volumes=["a"], paused=True), decision.digest)
    assert decide(synced, cms).action is Action.NONE
    # First seen while paused: the baseline is recorded (a label write rolls nothing).
    assert decide(workload(volumes=["a"], paused=True), cms).action is Action.RECORD


def test_the_apply_body_sets_only_the_annotation_and_the_baseline() -> None:
    w = workload(volumes=["a"])
    digest = "sha256:" + "ab" * 32
    assert apply_body(w, "apps/v1", "StatefulSet", digest) == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "web",
            "namespace": "demo",
            "labels": {LABEL_CONFIG_BASELINE: "ab" * 20},
        },
        "spec": {"template": {"metadata": {"annotations": {ANNOTATION_CONFIG_HASH: digest}}}},
    }


def _entry(manager: str, operation: str, *, label: bool = False, annotation: bool = False) -> Any:
    fields: dict[str, Any] = {"f:metadata": {"f:labels": {"f:app": {}}}}
    if label:
        fields["f:metadata"]["f:labels"]["f:cbop.dev/config-baseline"] = {}
    if annotation:
        fields["f:spec"] = {
            "f:template": {"f:metadata": {"f:annotations": {"f:cbop.dev/config-hash": {}}}}
        }
    return {"manager": manager, "operation": operation, "fieldsV1": fields}


def _owned(*entries: Any, last_applied: str | None = None) -> dict[str, Any]:
    w = workload(volumes=["a"])
    w["metadata"]["managedFields"] = list(entries)
    if last_applied is not None:
        w["metadata"]["annotations"] = {
            "kubectl.kubernetes.io/last-applied-configuration": last_applied
        }
    return w


def test_keys_taken_by_a_plain_update_may_be_taken_back() -> None:
    """Case 18: ``kubectl rollout undo`` (an Update) owns the annotation now."""
    w = _owned(
        _entry("cbop-rollout", "Apply", label=True),
        _entry("kubectl-rollout", "Update", annotation=True),
        _entry("kube-controller-manager", "Update"),
    )
    assert other_owners(w, "cbop-rollout") == (FieldOwner("kubectl-rollout", "Update"),)
    assert may_take_back(w, "cbop-rollout")


@pytest.mark.parametrize(
    "w",
    [
        _owned(
            _entry("cbop-rollout", "Apply", label=True),
            _entry("argocd-controller", "Apply", annotation=True),
        ),
        _owned(
            _entry("kubectl-edit", "Update", annotation=True),
            _entry("flux", "Apply", label=True),
        ),
        _owned(
            _entry("kubectl-client-side-apply", "Update", annotation=True),
            last_applied=json.dumps(
                {"spec": {"template": {"metadata": {"annotations": {ANNOTATION_CONFIG_HASH: "x"}}}}}
            ),
        ),
        _owned(
            _entry("kubectl-client-side-apply", "Update", label=True),
            last_applied=json.dumps({"metadata": {"labels": {LABEL_CONFIG_BASELINE: "x"}}}),
        ),
    ],
    ids=["server-side-apply", "one-applier-among-updaters", "client-side-apply", "cs-label"],
)
def test_keys_a_gitops_tool_applies_are_never_taken(w: dict[str, Any]) -> None:
    assert not may_take_back(w, "cbop-rollout")


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[1]",
        '{"metadata": [1]}',
        json.dumps({"spec": [1]}),
        json.dumps({"spec": {"template": {"metadata": "x"}}}),
    ],
)
def test_a_last_applied_annotation_that_does_not_parse_holds_nothing(raw: str) -> None:
    assert not in_last_applied(_owned(last_applied=raw))


def test_a_last_applied_manifest_without_the_keys_does_not_block_a_take_back() -> None:
    w = _owned(
        _entry("kubectl-rollout", "Update", annotation=True),
        last_applied=json.dumps({"metadata": {"labels": {"app": "web"}}}),
    )
    assert may_take_back(w, "cbop-rollout")


def test_the_decision_never_mutates_its_inputs() -> None:
    w = workload(volumes=["a"], env_from=["b"])
    cms = {"a": configmap("a"), "b": configmap("b", managed=False)}
    before = copy.deepcopy((w, cms))
    decide(w, cms)
    assert (w, cms) == before
