"""The pure rollout decision: references, managed ConfigMaps, the digest, the action."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cbop.rollout import (
    ANNOTATION_CONFIG_HASH,
    Action,
    apply_body,
    config_digest,
    decide,
    index_by_configmap,
    referenced_configmaps,
)
from cbop.rollout.decision import ManagedConfigMap, is_managed, managed_references

from .rollout_objects import configmap, with_annotation, workload

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
    a, b = ManagedConfigMap("a", "x", "sha256:1"), ManagedConfigMap("b", "y", "sha256:2")
    assert config_digest([a, b]) == config_digest([b, a])
    assert config_digest([a, b]) != config_digest([a])
    assert config_digest([a]) != config_digest([ManagedConfigMap("a", "x", "sha256:3")])
    # Framing: moving a character between name and hash changes the digest.
    assert config_digest([ManagedConfigMap("ab", "x", "c")]) != config_digest(
        [ManagedConfigMap("a", "x", "bc")]
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


def test_first_visit_applies_then_equal_digest_is_none() -> None:
    w = workload(volumes=["a"], env_from=["b"])
    cms = {"a": configmap("a"), "b": configmap("b")}
    first = decide(w, cms)
    assert first.action is Action.APPLY
    assert first.current == ""
    assert [c.name for c in first.configmaps] == ["a", "b"]
    again = decide(with_annotation(w, first.digest), cms)
    assert again.action is Action.NONE
    assert again.digest == first.digest


def test_a_content_change_applies_a_new_digest() -> None:
    w = workload(volumes=["a"])
    old = decide(w, {"a": configmap("a", {"k": "1"})}).digest
    new = decide(with_annotation(w, old), {"a": configmap("a", {"k": "2"})})
    assert new.action is Action.APPLY
    assert new.digest != old
    assert new.current == old


def test_unmanaged_references_are_ignored() -> None:
    w = workload(volumes=["a", "mine"])
    digest = decide(w, {"a": configmap("a")}).digest
    with_foreign = {"a": configmap("a"), "mine": configmap("mine", {"z": "9"}, managed=False)}
    assert decide(with_annotation(w, digest), with_foreign).action is Action.NONE


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
    decision = decide(workload(volumes=["a"], paused=True), cms)
    assert decision.action is Action.SKIP
    assert "paused" in decision.message
    assert "app-conf" in decision.message
    # In sync: nothing to report, paused or not.
    synced = with_annotation(workload(volumes=["a"], paused=True), decision.digest)
    assert decide(synced, cms).action is Action.NONE


def test_the_apply_body_sets_only_the_annotation() -> None:
    w = workload(volumes=["a"])
    assert apply_body(w, "apps/v1", "StatefulSet", "sha256:d") == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "demo"},
        "spec": {"template": {"metadata": {"annotations": {ANNOTATION_CONFIG_HASH: "sha256:d"}}}},
    }


def test_the_decision_never_mutates_its_inputs() -> None:
    w = workload(volumes=["a"], env_from=["b"])
    cms = {"a": configmap("a"), "b": configmap("b", managed=False)}
    before = copy.deepcopy((w, cms))
    decide(w, cms)
    assert (w, cms) == before
