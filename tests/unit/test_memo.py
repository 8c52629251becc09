"""DecisionMemo: the same decisions as decide(), with nothing stale after a change."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cbop.api import BundleSpec, SpecError, parse_spec
from cbop.configbundle.decision import Action, decide
from cbop.configbundle.memo import DecisionMemo
from cbop_testing.objects import bundle, synced_status, written


def with_rv(cm: dict[str, Any], rv: str) -> dict[str, Any]:
    cm = copy.deepcopy(cm)
    cm["metadata"]["resourceVersion"] = rv
    return cm


def test_a_resync_of_an_unchanged_bundle_is_answered_from_the_caches() -> None:
    memo = DecisionMemo()
    b = bundle({"data": {"a": "1"}}, status=synced_status())
    cm = written(b)
    for _ in range(3):
        spec = memo.spec(b)
        assert memo.decide(b, spec, cm).action is Action.NONE
    # First round: spec, desired and verdict computed; then three hits per round.
    assert (memo.misses, memo.hits) == (3, 6)


def test_a_new_generation_is_parsed_again_and_never_gets_the_old_spec() -> None:
    memo = DecisionMemo()
    old = bundle({"data": {"a": "1"}}, generation=1, status=synced_status(1))
    cm = written(old)
    assert memo.decide(old, memo.spec(old), cm).action is Action.NONE
    new = bundle({"data": {"a": "2"}}, generation=2, status=synced_status(1))
    spec = memo.spec(new)
    assert isinstance(spec, BundleSpec)
    assert spec.data == {"a": "2"}
    decision = memo.decide(new, spec, cm)
    assert decision.action is Action.UPDATE
    assert decision.body is not None
    assert decision.body["data"] == {"a": "2"}


def test_a_changed_configmap_gets_a_fresh_verdict() -> None:
    memo = DecisionMemo()
    b = bundle({"data": {"a": "1"}}, status=synced_status())
    cm = written(b)
    assert memo.decide(b, memo.spec(b), cm).action is Action.NONE
    tampered = with_rv(cm, "8")
    tampered["data"] = {"a": "tampered"}
    decision = memo.decide(b, memo.spec(b), tampered)
    assert decision.action is Action.UPDATE
    assert decision.drift
    # The old version's verdict still stands for the old version.
    assert memo.decide(b, memo.spec(b), cm).action is Action.NONE


def test_another_bundle_with_the_same_generation_has_its_own_entry() -> None:
    memo = DecisionMemo()
    a = bundle({"data": {"a": "1"}}, name="a")
    b = bundle({"data": {"b": "2"}}, name="b")
    b["metadata"]["uid"] = "other-uid"
    spec_a, spec_b = memo.spec(a), memo.spec(b)
    assert isinstance(spec_a, BundleSpec)
    assert isinstance(spec_b, BundleSpec)
    assert (spec_a.config_map_name, spec_b.config_map_name) == ("a", "b")
    assert memo.desired(b, spec_b).owner_reference["uid"] == "other-uid"


def test_an_invalid_spec_is_remembered_without_its_traceback() -> None:
    memo = DecisionMemo()
    b = bundle({"data": {"a b": "1"}})
    first = memo.spec(b)
    assert isinstance(first, SpecError)
    assert first.__traceback__ is None
    assert memo.spec(b) is first
    assert memo.decide(b, first, None).action is Action.INVALID


def test_objects_without_uid_or_generation_are_not_memoised() -> None:
    memo = DecisionMemo()
    b = bundle({"data": {"a": "1"}})
    del b["metadata"]["generation"]
    memo.spec(b)
    b["spec"] = {"data": {"a": "2"}}
    spec = memo.spec(b)
    assert isinstance(spec, BundleSpec)
    assert spec.data == {"a": "2"}
    assert (memo.hits, memo.misses) == (0, 0)


def test_the_caches_are_bounded() -> None:
    memo = DecisionMemo(maxsize=2)
    for i in range(5):
        b = bundle({"data": {"a": str(i)}}, name=f"b{i}")
        b["metadata"]["uid"] = f"uid-{i}"
        cm = with_rv(written(b), str(i))
        memo.decide(b, memo.spec(b), cm)
        memo.remember_noop(b, cm, f"outcome-{i}")
    assert len(memo._specs) == len(memo._desired) == len(memo._synced) == 2
    assert len(memo._noops) == 2


def test_specs_and_renders_keep_a_working_set_while_every_outcome_is_kept() -> None:
    memo = DecisionMemo(maxsize=10, working_set=2)
    bundles = []
    for i in range(5):
        b = bundle({"data": {"a": str(i)}}, name=f"b{i}")
        b["metadata"]["uid"] = f"uid-{i}"
        cm = with_rv(written(b), str(i))
        assert memo.decide(b, memo.spec(b), cm).action is Action.NONE
        memo.remember_noop(b, cm, f"outcome-{i}")
        bundles.append((b, cm))
    assert len(memo._specs) == len(memo._desired) == len(memo._synced) == 2
    for i, (b, cm) in enumerate(bundles):
        assert memo.noop(b, cm) == f"outcome-{i}"


def test_the_stored_outcome_holds_only_for_the_same_bundle_and_configmap_versions() -> None:
    memo = DecisionMemo()
    b = bundle({"data": {"a": "1"}, "configMapName": "custom"})
    cm = written(b)
    assert cm["metadata"]["name"] == "custom"
    assert memo.noop(b, cm) is None
    memo.remember_noop(b, cm, "outcome")
    assert memo.noop(b, cm) == "outcome"
    newer = copy.deepcopy(b)
    newer["metadata"]["resourceVersion"] = "999"
    assert memo.noop(newer, cm) is None
    assert memo.noop(b, with_rv(cm, "8")) is None
    assert memo.noop(b, None) is None  # the ConfigMap is gone from the cache
    other = copy.deepcopy(cm)
    other["metadata"]["uid"] = "another-uid"  # deleted and created again
    assert memo.noop(b, other) is None
    memo.forget_noop(b)
    assert memo.noop(b, cm) is None


@pytest.mark.parametrize(
    "spec",
    [
        {"data": {"a": "1"}},
        {"data": {"a": "1"}, "labels": {"x": "y"}, "annotations": {"p": "q"}},
        {"binaryData": {"b": "aGk="}, "immutable": True},
        {"data": {"a": "1"}, "suspend": True},
    ],
)
def test_memoised_decisions_equal_plain_ones(spec: dict[str, Any]) -> None:
    memo = DecisionMemo()
    b = bundle(spec, status=synced_status())
    cm = written(bundle({"data": {"a": "1"}}))
    foreign = copy.deepcopy(cm)
    foreign["metadata"]["ownerReferences"] = []
    for current in (None, cm, foreign):
        for _ in range(2):
            assert memo.decide(b, memo.spec(b), current) == decide(b, parse_spec(b), current)
