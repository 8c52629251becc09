"""The revisions' pure model: the mapping, the pin decision, the collection plan, the verdict."""

from __future__ import annotations

from typing import Any

import pytest

from cbop.revisions.caches import OPTED_IN_SELECTOR
from cbop.revisions.legacy import (
    LEGACY_DIGEST_ANNOTATION,
    legacy_in_use,
    legacy_named,
    legacy_pinned,
    owner_pins_key,
    parse_pins,
    pins_key,
)
from cbop.revisions.model import (
    ANNOTATION_REVISIONS,
    LABEL_PINNED,
    Candidate,
    Finding,
    PinnedReason,
    collection_plan,
    configmap_references,
    format_mapping,
    mapping_of,
    parse_mapping,
    pinned_verdict,
    pod_unpinned,
    template_fingerprint,
    template_metadata,
    valid_pair,
    wants_pin,
)
from cbop.rollout import ANNOTATION_CONFIG_HASH, ROLLOUT_SELECTOR

A = "web-conf-0123456789"
B = "other-abcdef0123"


def test_a_mapping_is_sorted_and_read_back() -> None:
    value = format_mapping({"web-conf": A, "other": B})
    assert value == f"other={B},web-conf={A}"
    assert parse_mapping(value) == {"web-conf": A, "other": B}
    assert format_mapping({}) == ""
    assert parse_mapping("") == {}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (f" web-conf={A} , other={B}", {"web-conf": A, "other": B}),
        ("web-conf=elsewhere", {}),
        ("web-conf=web-conf-ABCDEF0123", {}),
        ("web-conf=web-conf-012345678", {}),
        ("web-conf=web-conf-01234567890", {}),
        (f"=x,{A}", {}),
        (f"web-conf=web-conf-0000000000,web-conf={A}", {"web-conf": A}),
        # The last pair of a plain name counts, valid or not, as the policy reads it.
        (f"web-conf={A},web-conf=elsewhere", {}),
        (None, {}),
        (3, {}),
    ],
)
def test_the_parse_keeps_only_revision_names_of_their_plain_name(
    value: object, expected: dict[str, str]
) -> None:
    assert parse_mapping(value) == expected


def test_a_valid_pair_is_the_plain_name_a_dash_and_ten_hex_digits() -> None:
    assert valid_pair("web-conf", A)
    assert not valid_pair("", "-0123456789")
    assert not valid_pair("web", A)  # web-conf-... is not web-<10 hex>


def _workload(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "demo"},
        "spec": {
            "template": {
                "metadata": {"annotations": annotations or {}, "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app"}]},
            }
        },
    }


def test_the_template_of_every_kind_of_holder_is_found() -> None:
    workload = _workload({ANNOTATION_REVISIONS: f"web-conf={A}"})
    revision = {"data": {"spec": {"template": workload["spec"]["template"]}}}
    pod = {
        "metadata": workload["spec"]["template"]["metadata"],
        "spec": {"containers": []},
    }
    for holder in (workload, revision, pod):
        assert mapping_of(holder) == {"web-conf": A}
    assert template_metadata({"spec": {"replicas": 1}}) == {}
    assert template_metadata({"data": "x"}) == {}


def test_references_name_every_place_a_pod_reads_a_configmap() -> None:
    env = [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]
    sources = [{"secret": {"name": "s"}}, {"configMap": {"name": "b"}}]
    spec = {
        "volumes": [
            {"name": "v", "configMap": {"name": "a"}},
            {"name": "p", "projected": {"sources": sources}},
        ],
        "initContainers": [{"name": "i", "env": env}],
        "containers": [
            {
                "name": "app",
                "envFrom": [{"secretRef": {"name": "s"}}, {"configMapRef": {"name": "d"}}],
            }
        ],
    }
    refs = [(r.where, r.name) for r in configmap_references(spec)]
    assert refs == [
        ("volumes[0].configMap", "a"),
        ("volumes[1].projected.sources[1].configMap", "b"),
        ("initContainers[i].env[0]", "c"),
        ("containers[app].envFrom[1]", "d"),
    ]


def test_a_pod_the_policy_did_not_rewrite_is_unpinned() -> None:
    meta = {"annotations": {ANNOTATION_REVISIONS: f"web-conf={A}"}}
    unpinned = {"metadata": meta, "spec": {"volumes": [{"configMap": {"name": "web-conf"}}]}}
    pinned = {"metadata": meta, "spec": {"volumes": [{"configMap": {"name": A}}]}}
    assert [r.name for r in pod_unpinned(unpinned)] == ["web-conf"]
    assert pod_unpinned(pinned) == []
    assert pod_unpinned({"metadata": {}, "spec": unpinned["spec"]}) == []


def test_a_fingerprint_ignores_cbops_keys() -> None:
    bare = _workload()["spec"]["template"]
    pinned = _workload({ANNOTATION_REVISIONS: "x", ANNOTATION_CONFIG_HASH: "sha256:1"})
    pinned["spec"]["template"]["metadata"]["labels"][LABEL_PINNED] = "true"
    assert template_fingerprint(bare) == template_fingerprint(pinned["spec"]["template"])
    other = _workload({"team": "b"})["spec"]["template"]
    assert template_fingerprint(bare) != template_fingerprint(other)


D = "d" * 40
OLD = "0" * 40


def _wants(**kw: Any) -> bool:
    args: dict[str, Any] = {
        "desired": {"web-conf": A},
        "carried": {},
        "baseline": D,
        "digest_baseline": D,
        "template_baseline": D,
        "pinned_baseline": "",
        "legacy_pinned": False,
    }
    args.update(kw)
    return wants_pin(**args)


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({}, True),  # revisions turned on after the last rollout
        ({"baseline": "", "template_baseline": ""}, True),  # first seen, never rolled
        ({"baseline": "", "template_baseline": OLD}, True),  # replaced: labels gone
        ({"template_baseline": ""}, True),  # opted in earlier, never rolled
        ({"template_baseline": OLD}, False),  # kubectl rollout undo to an older template
        ({"pinned_baseline": D}, False),  # cbop pinned this content: an undo, a hand edit
        ({"pinned_baseline": OLD}, True),  # pinned at older content, then turned off/on
        ({"carried": {"web-conf": A}}, False),  # pinned
        ({"carried": {"web-conf": "web-conf-9999999999"}}, True),  # a stale mapping
        ({"desired": {}}, False),  # no revisions
        ({"legacy_pinned": True}, False),  # 0.2.0's pins hold it
    ],
)
def test_a_template_is_pinned_once_unless_it_is_an_undo(kw: dict[str, Any], expected: bool) -> None:
    assert _wants(**kw) is expected


def _c(name: str, created: str, **kw: Any) -> Candidate:
    args: dict[str, Any] = {"held": True, "others": False, "named": False, "idle": 100.0}
    args.update(kw)
    return Candidate(name=name, created=created, **args)


def test_the_plan_keeps_current_newest_named_and_owned_and_waits_out_the_grace() -> None:
    candidates = [
        _c("r1", "2026-01-01T00:00:01Z"),
        _c("r2", "2026-01-01T00:00:02Z", named=True),
        _c("r3", "2026-01-01T00:00:03Z", others=True),
        _c("r4", "2026-01-01T00:00:04Z", idle=10.0),
        _c("r5", "2026-01-01T00:00:05Z"),
        _c("r6", "2026-01-01T00:00:06Z"),
    ]
    plan = collection_plan(candidates, current="r6", keep=2, grace=60.0)
    # r6 current, r5 the newest other; r2 named, r3 owned by another; r4 waits 50 s.
    assert plan.delete == ("r1",)
    assert plan.wait == 50.0
    assert plan.adopt == ()
    assert collection_plan(candidates, current="r6", keep=1, grace=60.0).delete == ("r5", "r1")


def test_an_ownerless_revision_is_adopted_when_kept_and_deleted_when_not() -> None:
    candidates = [
        _c("r1", "2026-01-01T00:00:01Z", held=False),
        _c("r2", "2026-01-01T00:00:02Z", held=False, named=True),
        _c("r3", "2026-01-01T00:00:03Z", held=False),
    ]
    plan = collection_plan(candidates, current="r9", keep=2, grace=60.0)
    assert plan.adopt == ("r2", "r3")
    assert plan.delete == ("r1",)


def test_the_verdict_reports_the_most_pressing_finding_first() -> None:
    findings = [
        Finding(PinnedReason.NOT_PINNED_YET, "Deployment/b", "names no revision yet"),
        Finding(PinnedReason.POD_NOT_PINNED, "Deployment/a", "pod a-1 reads web-conf"),
        Finding(PinnedReason.POD_NOT_PINNED, "Deployment/c", "pod c-1 reads web-conf"),
    ]
    verdict = pinned_verdict("web-conf", readers=["Deployment/a"], findings=findings, policy=None)
    assert (verdict.status, verdict.reason) == ("False", PinnedReason.POD_NOT_PINNED)
    assert verdict.message == "Deployment/a, Deployment/c: pod a-1 reads web-conf (and 1 more)"
    assert len(verdict.findings) == 3
    missing = pinned_verdict("web-conf", readers=[], findings=findings, policy="no policy")
    assert (missing.status, missing.reason) == ("False", PinnedReason.POLICY_MISSING)
    ok = pinned_verdict("web-conf", readers=["Deployment/a"], findings=[], policy=None)
    assert (ok.status, ok.reason) == ("True", PinnedReason.PINNED)
    assert "Deployment/a" in ok.message
    none = pinned_verdict("web-conf", readers=[], findings=[], policy=None)
    assert (none.status, none.reason) == ("True", PinnedReason.NOTHING_TO_PIN)


# -- 0.2.0's pins -------------------------------------------------------------------------


def test_the_names_shared_with_the_rollout_are_the_rollouts() -> None:
    assert LEGACY_DIGEST_ANNOTATION == ANNOTATION_CONFIG_HASH
    assert OPTED_IN_SELECTOR == ROLLOUT_SELECTOR


def test_legacy_pins_pin_a_template_by_digest_or_by_workload() -> None:
    digest = "sha256:" + "ab" * 32
    params = {
        "data": {
            pins_key(digest): f"web-conf={A}\n",
            owner_pins_key("Deployment", "old"): f"web-conf={A}\n#frozen\n",
        }
    }
    rolled = _workload({ANNOTATION_CONFIG_HASH: digest})["spec"]["template"]
    bare = _workload()["spec"]["template"]
    assert legacy_pinned(params, "Deployment", "web", rolled)
    assert not legacy_pinned(params, "Deployment", "web", bare)
    assert legacy_pinned(params, "Deployment", "old", bare)
    assert not legacy_pinned(None, "Deployment", "old", bare)
    other = _workload({ANNOTATION_CONFIG_HASH: "sha256:" + "cd" * 32})["spec"]["template"]
    assert not legacy_pinned(params, "Deployment", "web", other)
    assert legacy_named(params) == {A}
    assert parse_pins("a=b\n#frozen\n=c\nd=\n") == {"a": "b"}
    assert pins_key("sha256:short") == ""
    assert owner_pins_key("Job", "x") == ""


def test_legacy_pins_are_in_use_while_a_history_owner_or_a_template_relies_on_them() -> None:
    digest = "sha256:" + "ab" * 32
    params = {"data": {pins_key(digest): f"web-conf={A}\n"}}
    owned = {"metadata": {"ownerReferences": [{"kind": "ReplicaSet", "name": "web-1"}]}}
    bundle_only = {"metadata": {"ownerReferences": [{"kind": "ConfigBundle", "name": "web"}]}}
    rolled = _workload({ANNOTATION_CONFIG_HASH: digest})
    assert legacy_in_use(params, [owned], [])
    assert not legacy_in_use(params, [bundle_only], [])
    assert legacy_in_use(params, [bundle_only], [("Deployment", rolled)])
    repinned = _workload({ANNOTATION_CONFIG_HASH: digest, ANNOTATION_REVISIONS: f"web-conf={A}"})
    assert not legacy_in_use(params, [bundle_only], [("Deployment", repinned)])
    assert not legacy_in_use(None, [owned], [("Deployment", rolled)])
