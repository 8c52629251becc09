"""The ConfigMap writer alone: its reads, writes, recovery, stale deletions and release.

:class:`cbop.configbundle.writes.ConfigMapWriter` against the fake API server and a
CacheLister, reporting to a fake that notes Events and counts; no reconciler.
"""

from __future__ import annotations

from typing import Any

import pytest

from cbop.api import Reason, parse_spec
from cbop.configbundle.decision import Action, release_body
from cbop.configbundle.interfaces import RejectedError, Requeue, TargetWriter
from cbop.configbundle.writes import ConfigMapWriter
from cbop.informers import CONTROLLER_UID_INDEX, index_by_controller_uid
from cbop.kube import CONFIGMAPS, ApiError
from cbop_testing.fakekube import CacheLister, FakeKube, errors, fail
from cbop_testing.objects import bundle, decide_for, written


class Reports:
    """A fake of :class:`cbop.configbundle.interfaces.Reporting`: notes what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.counts: list[str] = []

    def event(
        self, bundle: Any, type_: str, reason: str, message: str, *, routine: bool = False
    ) -> None:
        self.events.append((type_, reason, message))

    def count(self, operation: str) -> None:
        self.counts.append(operation)


class Setup:
    """A fake server holding ``cms``, a cache showing them, and a writer over both."""

    def __init__(self, *cms: dict[str, Any], dry_run: bool = False) -> None:
        self.kube = FakeKube()
        for cm in cms:
            self.kube.tracker.add(CONFIGMAPS, cm)
        self.cache = CacheLister(indexers={CONTROLLER_UID_INDEX: index_by_controller_uid})
        self.cache.sync(self.kube.tracker, CONFIGMAPS)
        self.reports = Reports()
        self.writer = ConfigMapWriter(
            client=self.kube, configmaps=self.cache, reports=self.reports, dry_run=dry_run
        )

    def verbs(self) -> list[tuple[str, str]]:
        """Every ConfigMap call made: (verb, name)."""
        return [(a.verb, a.name or "") for a in self.kube.actions if a.resource == "configmaps"]

    def stored(self, name: str = "app") -> dict[str, Any]:
        return self.kube.tracker.get(CONFIGMAPS, "demo", name)


def _protocol(writer: ConfigMapWriter) -> TargetWriter:
    """Never called: mypy checks that the writer is a TargetWriter."""
    return writer


def test_cached_finds_the_configmap_of_a_spec_that_does_not_parse() -> None:
    b = bundle({"configMapName": "conf", "data": {"a": "1"}})
    s = Setup(written(b))
    invalid = bundle({"configMapName": "conf", "data": {"bad key": "1"}}, generation=2)
    found = s.writer.cached(invalid)
    assert found is not None
    assert found["metadata"]["name"] == "conf"
    assert s.writer.cached(bundle({"configMapName": "Not_Valid"})) is None
    assert s.kube.actions == []


@pytest.mark.parametrize(
    ("live", "action", "verbs", "counts"),
    [
        (None, Action.CREATE, [("create", "app")], ["create"]),
        ({"data": {"a": "0"}}, Action.UPDATE, [("update", "app")], ["update"]),
        (
            {"data": {"a": "0"}, "immutable": True},
            Action.REPLACE,
            [("delete", "app"), ("create", "app")],
            ["delete", "create"],
        ),
    ],
    ids=["create", "update", "replace"],
)
def test_apply_writes_the_decision_and_counts_each_write(
    live: dict[str, Any] | None, action: Action, verbs: list[tuple[str, str]], counts: list[str]
) -> None:
    b = bundle(
        {"data": {"a": "1"}, **({"immutable": True} if live and "immutable" in live else {})}
    )
    s = Setup(*([written(bundle(live))] if live is not None else []))
    current = s.stored() if live is not None else None  # as the server stored it
    decision = decide_for(b, current)
    assert decision.action is action
    carried, against = s.writer.apply(b, parse_spec(b), decision, current)
    assert (carried, against) == (decision, current)
    assert s.verbs() == verbs
    assert s.reports.counts == counts
    assert s.stored()["data"] == {"a": "1"}


def test_a_dry_run_replace_sends_only_its_delete_with_dry_run() -> None:
    b = bundle({"data": {"a": "1"}, "immutable": True})
    s = Setup(written(bundle({"data": {"a": "0"}, "immutable": True})), dry_run=True)
    current = s.stored()
    decision = decide_for(b, current)
    s.writer.apply(b, parse_spec(b), decision, current)
    assert s.verbs() == [("delete", "app")]
    assert s.kube.write_actions()[0].options["dry_run"] is True
    assert s.stored()["data"] == {"a": "0"}


def test_a_create_on_a_stale_cache_is_decided_again_from_a_fresh_read() -> None:
    b = bundle({"data": {"a": "2"}}, generation=2)
    s = Setup()
    s.kube.tracker.add(CONFIGMAPS, written(bundle({"data": {"a": "1"}})))  # not cached
    carried, against = s.writer.apply(b, parse_spec(b), decide_for(b, None), None)
    assert carried.action is Action.UPDATE
    assert against is not None
    assert against["data"] == {"a": "1"}
    assert s.verbs() == [("create", "app"), ("get", "app"), ("update", "app")]
    assert s.reports.counts == ["update"]


def test_a_write_that_keeps_failing_on_a_stale_cache_gives_up_after_two_fresh_reads() -> None:
    b = bundle({"data": {"a": "2"}}, generation=2)
    s = Setup()
    s.kube.prepend_reactor("create", "configmaps", fail(errors.already_exists(CONFIGMAPS, "app")))
    with pytest.raises(ApiError) as raised:
        s.writer.apply(b, parse_spec(b), decide_for(b, None), None)
    assert raised.value.is_already_exists
    assert s.verbs() == [("create", "app"), ("get", "app")] * 2 + [("create", "app")]


def test_a_conflict_is_a_requeue() -> None:
    b = bundle({"data": {"a": "2"}}, generation=2)
    current = written(bundle({"data": {"a": "1"}}))
    s = Setup(current)
    s.kube.prepend_reactor(
        "update", "configmaps", fail(errors.conflict(CONFIGMAPS, "app"), times=1)
    )
    with pytest.raises(Requeue):
        s.writer.apply(b, parse_spec(b), decide_for(b, current), current)
    assert s.reports.counts == []


@pytest.mark.parametrize(
    ("error", "reason", "words"),
    [
        (ApiError(422, "Invalid", "metadata.labels: Invalid value"), Reason.INVALID_SPEC, "labels"),
        (ApiError(413, "RequestEntityTooLarge", "limit"), Reason.CONFIGMAP_TOO_LARGE, "too large"),
        (errors.bad_request("not a ConfigMap"), Reason.INVALID_SPEC, "400 not a ConfigMap"),
    ],
    ids=["422", "413", "400"],
)
def test_a_refusal_no_retry_can_fix_is_rejected(
    error: ApiError, reason: Reason, words: str
) -> None:
    b = bundle()
    s = Setup()
    s.kube.prepend_reactor("create", "configmaps", fail(error, times=1))
    with pytest.raises(RejectedError) as raised:
        s.writer.apply(b, parse_spec(b), decide_for(b, None), None)
    assert raised.value.condition_reason is reason
    assert words in raised.value.message
    assert s.verbs() == [("create", "app")]


def test_another_failure_is_raised_without_a_fresh_read() -> None:
    b = bundle()
    s = Setup()
    s.kube.prepend_reactor("create", "configmaps", fail(errors.internal_error("down"), times=1))
    with pytest.raises(ApiError) as raised:
        s.writer.apply(b, parse_spec(b), decide_for(b, None), None)
    assert raised.value.status == 500
    assert s.verbs() == [("create", "app")]


def test_a_name_taken_is_read_fresh_only_while_remembered() -> None:
    foreign = {"metadata": {"name": "app", "namespace": "demo", "uid": "x"}, "data": {}}
    s = Setup()
    s.kube.tracker.add(CONFIGMAPS, foreign)  # not cbop's: never cached
    assert s.writer.recheck("demo/app", "demo", "app") is None
    assert s.kube.actions == []
    s.writer.remember("demo/app", taken=True)
    fresh = s.writer.recheck("demo/app", "demo", "app")
    assert fresh is not None
    assert fresh["metadata"]["uid"] == "x"
    s.writer.remember("demo/app", taken=False)
    assert s.writer.recheck("demo/app", "demo", "app") is None
    assert s.verbs() == [("get", "app")]


def test_the_cache_tells_whether_a_bundle_controls_configmaps_under_other_names() -> None:
    old = written(bundle({"data": {"a": "1"}}))
    renamed = bundle({"data": {"a": "1"}, "configMapName": "new"}, generation=2)
    s = Setup(old)
    assert s.writer.controls_others(renamed, "new")
    assert not s.writer.controls_others(renamed, "app")
    assert not Setup().writer.controls_others(renamed, "new")
    assert s.kube.actions == []


def test_stale_configmaps_are_deleted_on_their_uid_with_an_event() -> None:
    old = written(bundle({"data": {"a": "1"}}))
    renamed = bundle({"data": {"a": "1"}, "configMapName": "new"}, generation=2)
    s = Setup(old)
    decision = decide_for(renamed, None)
    assert s.writer.delete_stale(renamed, decision) == ["app"]
    (delete,) = s.kube.write_actions()
    assert (delete.verb, delete.name, delete.options["preconditions"]) == (
        "delete",
        "app",
        {"uid": "cm-uid"},
    )
    assert s.reports.counts == ["delete"]
    assert [(t, r) for t, r, _ in s.reports.events] == [("Normal", "Deleted")]


def test_a_dry_run_names_stale_configmaps_without_deleting_them() -> None:
    old = written(bundle({"data": {"a": "1"}}))
    renamed = bundle({"data": {"a": "1"}, "configMapName": "new"}, generation=2)
    s = Setup(old, dry_run=True)
    assert s.writer.delete_stale(renamed, decide_for(renamed, None)) == ["app"]
    assert s.kube.actions == []
    assert s.reports.events == []


def test_a_stale_configmap_gone_meanwhile_is_no_error() -> None:
    old = written(bundle({"data": {"a": "1"}}))
    renamed = bundle({"data": {"a": "1"}, "configMapName": "new"}, generation=2)
    s = Setup(old)
    s.kube.tracker.delete(CONFIGMAPS, "demo", "app")  # the cache still shows it
    assert s.writer.delete_stale(renamed, decide_for(renamed, None)) == ["app"]
    assert s.reports.counts == []


def test_release_writes_the_body_and_a_conflict_is_a_requeue() -> None:
    b = bundle({"data": {"a": "1"}, "deletionPolicy": "Orphan"})
    s = Setup(written(b))
    current = s.stored()
    s.writer.release(b, release_body(current, b))
    assert s.stored()["metadata"]["ownerReferences"] == []
    assert s.reports.counts == ["update"]
    with pytest.raises(Requeue):  # its resourceVersion is not the one read any more
        s.writer.release(b, release_body(current, b))


def test_release_of_a_configmap_gone_meanwhile_is_no_error() -> None:
    b = bundle({"data": {"a": "1"}, "deletionPolicy": "Orphan"})
    current = written(b)
    s = Setup()
    s.writer.release(b, release_body(current, b))
    assert s.verbs() == [("update", "app")]
    assert s.reports.counts == []
