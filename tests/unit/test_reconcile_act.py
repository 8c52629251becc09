"""The reconcile act layer against the fake API server, which records actions.

As sample-controller's tests: call the sync handler directly with listers and a fake
client, then compare the recorded API actions with the expected ones. The listers are
CacheListers synced from the server's tracker; a test that wants a stale cache changes
the server afterwards.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Mapping
from typing import Any

import pytest
import structlog

from cbop.api import parse_spec
from cbop.configbundle import Action, Reconciler, Requeue
from cbop.configbundle.decision import decide
from cbop.configbundle.memo import DecisionMemo
from cbop.informers import CONTROLLER_UID_INDEX, index_by_controller_uid
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, ConnectionFailed
from cbop.runtime.events import EventLevel, EventRecorder
from cbop_testing.fakekube import CacheLister, FakeKube, errors, fail
from cbop_testing.objects import bundle, synced_status, written

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)

Call = tuple[str, str, str]


def calls(kube: FakeKube) -> list[Call]:
    """Every call made: (verb[/subresource], resource, name)."""
    return [
        (f"{a.verb}/{a.subresource}" if a.subresource else a.verb, a.resource, a.name or "")
        for a in kube.actions
    ]


def writes(kube: FakeKube) -> list[Call]:
    """The writes made, Events left out."""
    return [c for c in calls(kube) if c[0] not in ("get", "list") and c[1] != "events"]


def body_of(kube: FakeKube, call: Call) -> Any:
    """The body of the first ``call`` made."""
    return kube.actions[calls(kube).index(call)].body


def status_of(kube: FakeKube) -> dict[str, Any]:
    """The status of the first status patch of the bundle ``app``."""
    return dict(body_of(kube, ("patch/status", "configbundles", "app"))["status"])


def preconditions_of(kube: FakeKube, name: str) -> Any:
    """The preconditions of the first delete of ConfigMap ``name``."""
    return kube.actions[calls(kube).index(("delete", "configmaps", name))].options["preconditions"]


def stored_configmap(kube: FakeKube, name: str = "app") -> dict[str, Any]:
    """The ConfigMap as the server stores it."""
    return kube.tracker.get(CONFIGMAPS, "demo", name)


def lister(*objs: dict[str, Any]) -> CacheLister:
    """A cache holding ``objs``, with the controller-owner index the reconciler reads."""
    return CacheLister(objs, indexers={CONTROLLER_UID_INDEX: index_by_controller_uid})


def cached(kube: FakeKube, res: Any) -> CacheLister:
    """A cache holding what the server stores of ``res`` (its watch caught up)."""
    return lister().sync(kube.tracker, res)


class World:
    """``b`` and ``cms`` stored on the server, and a reconciler whose caches show them.

    The test keeps the caches (``bundles``, ``configmaps``: it syncs them when their
    watch events would have arrived), the Event recorder, the decision memo and the
    wall clock (``now``) it handed the reconciler.
    """

    def __init__(
        self,
        kube: FakeKube,
        b: dict[str, Any],
        *cms: dict[str, Any],
        dry_run: bool = False,
        events: EventLevel = "notable",
    ) -> None:
        kube.tracker.add(CONFIGBUNDLES, b)
        for cm in cms:
            kube.tracker.add(CONFIGMAPS, cm)
        self.kube = kube
        self.bundles = cached(kube, CONFIGBUNDLES)
        self.configmaps = cached(kube, CONFIGMAPS)
        self.recorder = EventRecorder(kube, clock=lambda: NOW, level=events)
        self.memo = DecisionMemo()
        self.now = NOW
        self.reconciler = Reconciler(
            client=kube,
            bundles=self.bundles,
            configmaps=self.configmaps,
            recorder=self.recorder,
            dry_run=dry_run,
            now=lambda: self.now,
            memo=self.memo,
        )


def reconciler(
    kube: FakeKube,
    b: dict[str, Any],
    *cms: dict[str, Any],
    dry_run: bool = False,
    events: EventLevel = "notable",
) -> Reconciler:
    """Store ``b`` and ``cms`` on the server; a reconciler whose caches show them."""
    return World(kube, b, *cms, dry_run=dry_run, events=events).reconciler


def converged_bundle(spec: dict[str, Any]) -> dict[str, Any]:
    """A bundle whose status already says what reconcile would write."""
    kube = FakeKube()
    reconciler(kube, bundle(spec, status=synced_status()), written(bundle(spec))).reconcile(
        "demo/app"
    )
    return kube.tracker.get(CONFIGBUNDLES, "demo", "app")


def event_reasons(kube: FakeKube) -> list[str]:
    """Reasons of the Events ``kube`` was asked to create, in order."""
    return [a.body["reason"] for a in kube.actions if a.matches("create", "events")]


def test_create_then_status_and_no_routine_event_by_default() -> None:
    """A new bundle costs two writes: the Created Event is routine (``--events all`` only)."""
    kube = FakeKube()
    w = World(kube, bundle())
    result = w.reconciler.reconcile("demo/app")
    assert result.action is Action.CREATE
    assert result.ready == "True"
    assert w.recorder.flush()
    assert writes(kube) == [
        ("create", "configmaps", "app"),
        ("patch/status", "configbundles", "app"),
    ]
    assert [v for v, res, _ in calls(kube) if res == "events"] == []
    assert stored_configmap(kube)["metadata"]["ownerReferences"][0]["name"] == "app"


@pytest.mark.parametrize(
    ("level", "reasons"), [("all", ["Created"]), ("notable", []), ("none", [])]
)
def test_created_event_by_level(level: EventLevel, reasons: list[str]) -> None:
    kube = FakeKube()
    w = World(kube, bundle(), events=level)
    assert w.reconciler.reconcile("demo/app").action is Action.CREATE
    assert w.recorder.flush()
    assert event_reasons(kube) == reasons


@pytest.mark.parametrize(
    ("level", "reasons"),
    [("all", ["DriftCorrected"]), ("notable", ["DriftCorrected"]), ("none", [])],
)
def test_drift_corrected_event_by_level(level: EventLevel, reasons: list[str]) -> None:
    """An out-of-band change undone is notable: written unless Events are off."""
    b = converged_bundle({"data": {"a": "1"}})
    cm = written(b)
    cm["data"] = {"a": "tampered"}
    kube = FakeKube()
    w = World(kube, b, cm, events=level)
    assert w.reconciler.reconcile("demo/app").action is Action.UPDATE
    assert w.recorder.flush()
    assert event_reasons(kube) == reasons


def test_converged_bundle_makes_no_request_at_all() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    kube = FakeKube()
    result = reconciler(kube, b, written(b)).reconcile("demo/app")
    assert result.action is Action.NONE
    assert kube.actions == []


def test_status_lasttransitiontime_is_kept_when_status_is_unchanged() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    before = b["status"]["conditions"][0]["lastTransitionTime"]
    cm = written(b)
    cm["data"] = {"a": "tampered"}
    kube = FakeKube()
    reconciler(kube, b, cm).reconcile("demo/app")
    assert writes(kube) == [("update", "configmaps", "app")]
    stored = kube.tracker.get(CONFIGBUNDLES, "demo", "app")
    assert before == stored["status"]["conditions"][0]["lastTransitionTime"]


def test_already_exists_from_stale_cache_reads_fresh_and_updates() -> None:
    b = bundle({"data": {"a": "2"}}, generation=2)
    kube = FakeKube()
    r = reconciler(kube, b)
    kube.tracker.add(CONFIGMAPS, written(bundle({"data": {"a": "1"}})))  # not cached yet
    result = r.reconcile("demo/app")
    assert result.action is Action.UPDATE
    assert [c for c in calls(kube) if c[1] == "configmaps"] == [
        ("create", "configmaps", "app"),
        ("get", "configmaps", "app"),
        ("update", "configmaps", "app"),
    ]
    assert stored_configmap(kube)["data"] == {"a": "2"}


def foreign_configmap() -> dict[str, Any]:
    """A ConfigMap ``demo/app`` someone else made."""
    return {"metadata": {"name": "app", "namespace": "demo", "uid": "x"}, "data": {"k": "mine"}}


def test_already_exists_foreign_configmap_becomes_conflict() -> None:
    kube = FakeKube()
    r = reconciler(kube, bundle())
    kube.tracker.add(CONFIGMAPS, foreign_configmap())  # not cached yet
    result = r.reconcile("demo/app")
    assert result.action is Action.CONFLICT
    assert result.reason is not None
    assert result.reason.value == "ConfigMapConflict"
    assert result.requeue_after == 15.0
    assert ("update", "configmaps", "app") not in calls(kube)
    assert stored_configmap(kube)["data"] == {"k": "mine"}


def test_released_configmap_is_taken_back_with_an_event() -> None:
    """Not in the managed-ConfigMap cache: create, AlreadyExists, fresh read, adopt."""
    spec = {"data": {"a": "1"}, "deletionPolicy": "Orphan"}
    cm = written(bundle(spec))
    cm["metadata"]["ownerReferences"] = []
    cm["metadata"]["labels"] = {}
    cm["metadata"]["annotations"] = {"cbop.dev/released-by": "demo/app"}
    kube = FakeKube()
    again = bundle(spec, finalizers=["cbop.dev/orphan"])
    w = World(kube, again)
    kube.tracker.add(CONFIGMAPS, cm)  # not in the managed-ConfigMap cache
    result = w.reconciler.reconcile("demo/app")
    assert result.action is Action.UPDATE
    assert result.ready == "True"
    assert w.recorder.flush()
    events = [a.body for a in kube.actions if a.resource == "events"]
    assert [e["reason"] for e in events] == ["Adopted"]
    assert "taken back" in events[0]["message"]
    assert stored_configmap(kube)["metadata"]["ownerReferences"][0]["name"] == "app"


def test_conflict_on_update_is_a_quiet_requeue() -> None:
    b = bundle({"data": {"a": "2"}}, generation=2)
    kube = FakeKube()
    r = reconciler(kube, b, written(bundle({"data": {"a": "1"}})))
    # Someone changes the ConfigMap after the cache saw it: the update is stale.
    edited = stored_configmap(kube)
    edited["metadata"].setdefault("annotations", {})["note"] = "edited"
    kube.tracker.put(CONFIGMAPS, edited)
    with pytest.raises(Requeue):
        r.reconcile("demo/app")
    assert ("update", "configmaps", "app") in calls(kube)
    assert not [c for c in calls(kube) if c[0] == "patch/status"]
    assert stored_configmap(kube)["data"] == {"a": "1"}


def test_api_rejection_is_reported_as_invalid_spec_without_retry() -> None:
    kube = FakeKube()
    kube.prepend_reactor(
        "create",
        "configmaps",
        fail(
            ApiError(422, "Invalid", 'ConfigMap "app" is invalid: metadata.labels: Invalid value'),
            times=1,
        ),
    )
    result = reconciler(kube, bundle()).reconcile("demo/app")
    assert result.action is Action.INVALID
    assert result.reason is not None
    assert result.reason.value == "InvalidSpec"
    status = status_of(kube)
    assert status["conditions"][0]["reason"] == "InvalidSpec"
    assert "metadata.labels" in status["conditions"][0]["message"]


@pytest.mark.parametrize("verb", ["create", "update"])
def test_request_too_large_is_terminal_with_the_numbers(verb: str) -> None:
    """A 413 is no retry loop: ConfigMapTooLarge, with the body size and the limit."""
    b = bundle({"data": {"a": "2"}}, generation=2)
    cms = [written(bundle({"data": {"a": "1"}}))] if verb == "update" else []
    kube = FakeKube()
    too_large = ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728")
    too_large.request_bytes = 3_145_812
    kube.prepend_reactor(verb, "configmaps", fail(too_large, times=1))
    result = reconciler(kube, b, *cms).reconcile("demo/app")
    assert result.action is Action.INVALID
    assert result.reason is not None
    assert result.reason.value == "ConfigMapTooLarge"
    status = status_of(kube)
    message = status["conditions"][0]["message"]
    assert status["conditions"][0]["reason"] == "ConfigMapTooLarge"
    assert "3,145,812-byte" in message
    assert "limit is 3145728" in message
    assert [c for c in calls(kube) if c[1] == "configmaps"] == [(verb, "configmaps", "app")]


def test_bad_request_is_terminal() -> None:
    kube = FakeKube()
    kube.prepend_reactor(
        "create", "configmaps", fail(errors.bad_request("the body is not a ConfigMap"), times=1)
    )
    result = reconciler(kube, bundle()).reconcile("demo/app")
    assert result.action is Action.INVALID
    assert result.reason is not None
    assert result.reason.value == "InvalidSpec"
    assert "400 the body is not a ConfigMap" in result.message


def test_other_api_errors_are_reported_and_raised() -> None:
    kube = FakeKube()
    kube.prepend_reactor(
        "create", "configmaps", fail(errors.internal_error("etcd is down"), times=1)
    )
    with pytest.raises(ApiError):
        reconciler(kube, bundle()).reconcile("demo/app")
    status = status_of(kube)
    assert status["conditions"][0]["reason"] == "ReconcileError"
    assert "etcd is down" in status["conditions"][0]["message"]


def test_unanswered_write_is_not_reported_as_refused() -> None:
    kube = FakeKube()
    kube.prepend_reactor(
        "create",
        "configmaps",
        fail(ConnectionFailed("POST /api/v1/...: connection refused"), times=1),
    )
    with pytest.raises(ConnectionFailed):
        reconciler(kube, bundle()).reconcile("demo/app")
    message = status_of(kube)["conditions"][0]["message"]
    assert message == (
        "a write got no answer from the API server: "
        "connection failed: POST /api/v1/...: connection refused"
    )


def test_update_hitting_immutable_configmap_replaces_from_fresh_read() -> None:
    b = bundle({"data": {"a": "2"}}, generation=2)
    kube = FakeKube()
    r = reconciler(kube, b, written(bundle({"data": {"a": "1"}})))
    # Someone makes the ConfigMap immutable after the cache saw it. The update's 422
    # is scripted: validation is not modelled by the fake (and a real server would
    # refuse the update's stale resourceVersion first).
    fresh = stored_configmap(kube)
    fresh["immutable"] = True
    fresh = kube.tracker.put(CONFIGMAPS, fresh)
    kube.prepend_reactor(
        "update",
        "configmaps",
        fail(
            ApiError(422, "Invalid", "data: Forbidden: field is immutable when `immutable` is set"),
            times=1,
        ),
    )
    result = r.reconcile("demo/app")
    assert result.action is Action.REPLACE
    verbs = [c for c in calls(kube) if c[1] == "configmaps"]
    assert verbs[-2:] == [("delete", "configmaps", "app"), ("create", "configmaps", "app")]
    assert preconditions_of(kube, "app") == {
        "uid": "cm-uid",
        "resourceVersion": fresh["metadata"]["resourceVersion"],
    }
    replaced = stored_configmap(kube)
    assert replaced["data"] == {"a": "2"}
    assert replaced["metadata"]["uid"] != "cm-uid"


def test_invalid_spec_reports_once_and_writes_nothing_else() -> None:
    b = bundle({"data": {"bad key": "1"}})
    kube = FakeKube()
    result = reconciler(kube, b).reconcile("demo/app")
    assert result.action is Action.INVALID
    assert result.requeue_after is None
    assert writes(kube) == [("patch/status", "configbundles", "app")]


@pytest.mark.parametrize(
    ("spec", "shown"),
    [
        pytest.param({"data": {"bad key": "1"}}, "app", id="default-name"),
        pytest.param({"configMapName": "conf", "data": {"bad key": "1"}}, "conf", id="named"),
        pytest.param({"configMapName": "Not_Valid", "data": {"a": "1"}}, None, id="bad-name"),
    ],
)
def test_invalid_bundle_still_names_its_configmap(spec: dict[str, Any], shown: str | None) -> None:
    # The CONFIGMAP printer column (status.configMapName) and --once's CONFIGMAP column
    # show the name cbop would use while the rest of the spec is invalid.
    kube = FakeKube()
    result = reconciler(kube, bundle(spec)).reconcile("demo/app")
    assert result.action is Action.INVALID
    assert result.config_map == shown
    assert status_of(kube).get("configMapName") == shown


@pytest.mark.parametrize(
    ("data", "count"), [({"a": "1"}, "1 key,"), ({"a": "1", "b": "2"}, "2 keys,")]
)
def test_synced_message_counts_keys_in_english(data: dict[str, str], count: str) -> None:
    kube = FakeKube()
    reconciler(kube, bundle({"data": data})).reconcile("demo/app")
    status = status_of(kube)
    assert f"matches the spec ({count} sha256:" in status["conditions"][0]["message"]


def test_dry_run_writes_only_with_server_dry_run_and_returns_a_diff() -> None:
    kube = FakeKube()
    result = reconciler(kube, bundle({"data": {"a": "1"}}), dry_run=True).reconcile("demo/app")
    assert result.action is Action.CREATE
    assert "+data:" in result.diff
    assert writes(kube) == [("create", "configmaps", "app")]  # sent with dryRun=All
    assert kube.write_actions()[0].options["dry_run"] is True
    assert kube.tracker.objects(CONFIGMAPS) == []


def test_orphan_release_strips_ownership_then_drops_finalizer() -> None:
    spec = {"data": {"a": "1"}, "deletionPolicy": "Orphan"}
    live = bundle(spec)
    cm = written(live)
    gone = bundle(spec, finalizers=["cbop.dev/orphan"], deleting=True)
    kube = FakeKube()
    result = reconciler(kube, gone, cm).reconcile("demo/app")
    assert result.action is Action.RELEASE
    assert writes(kube) == [("update", "configmaps", "app"), ("patch", "configbundles", "app")]
    released = body_of(kube, ("update", "configmaps", "app"))
    assert released["metadata"]["ownerReferences"] == []
    finalizer_patch = body_of(kube, ("patch", "configbundles", "app"))
    assert finalizer_patch["metadata"]["finalizers"] == []
    # The last finalizer gone, the bundle goes; its ConfigMap stays, owned by nobody.
    assert kube.tracker.objects(CONFIGBUNDLES) == []
    assert stored_configmap(kube)["metadata"]["ownerReferences"] == []


def test_stale_configmap_after_rename_is_deleted_with_uid_precondition() -> None:
    old = written(bundle({"data": {"a": "1"}}))
    b = bundle({"data": {"a": "1"}, "configMapName": "new"}, generation=2)
    kube = FakeKube()
    reconciler(kube, b, old).reconcile("demo/app")
    assert ("create", "configmaps", "new") in calls(kube)
    assert ("delete", "configmaps", "app") in calls(kube)
    assert preconditions_of(kube, "app") == {"uid": "cm-uid"}
    assert [c["metadata"]["name"] for c in kube.tracker.objects(CONFIGMAPS)] == ["new"]


def test_bundle_gone_from_cache_does_nothing() -> None:
    kube = FakeKube()
    r = Reconciler(client=kube, bundles=lister(), configmaps=lister())
    assert r.reconcile("demo/app").action is None
    assert kube.actions == []


def test_decide_matches_written_state() -> None:
    b = bundle({"data": {"a": "1"}})
    assert decide(b, parse_spec(b), written(b)).action is Action.NONE


def test_conflict_recheck_reads_instead_of_failing_a_create_again() -> None:
    kube = FakeKube()
    r = reconciler(kube, bundle())
    kube.tracker.add(CONFIGMAPS, foreign_configmap())  # not cached
    assert r.reconcile("demo/app").action is Action.CONFLICT
    kube.clear_actions()
    assert r.reconcile("demo/app").action is Action.CONFLICT
    assert [c for c in calls(kube) if c[1] == "configmaps"] == [("get", "configmaps", "app")]
    # The blocker goes away: the next recheck creates.
    kube.tracker.remove(CONFIGMAPS, "demo", "app")
    kube.clear_actions()
    assert r.reconcile("demo/app").action is Action.CREATE
    assert ("create", "configmaps", "app") in calls(kube)


# -- dry runs never claim a pending change is in sync (issue 11, item 1) -----------------


@pytest.mark.parametrize(
    ("spec", "live_spec", "action"),
    [
        ({"data": {"a": "1"}}, None, Action.CREATE),
        ({"data": {"a": "2"}}, {"data": {"a": "1"}}, Action.UPDATE),
        (
            {"data": {"a": "2"}, "immutable": True},
            {"data": {"a": "1"}, "immutable": True},
            Action.REPLACE,
        ),
    ],
    ids=["create", "update", "replace"],
)
def test_dry_run_result_says_the_change_is_pending(
    spec: dict[str, Any], live_spec: dict[str, Any] | None, action: Action
) -> None:
    cms = [written(bundle(live_spec))] if live_spec is not None else []
    b = bundle(spec, status=synced_status(), generation=2)
    kube = FakeKube()
    result = reconciler(kube, b, *cms, dry_run=True).reconcile("demo/app")
    assert result.action is action
    assert result.pending
    assert result.message.startswith(f"would {action.value} ConfigMap app")
    assert "matches" not in result.message
    assert result.message.endswith("the bundle would then be Ready")


def test_dry_run_of_a_bundle_in_sync_has_nothing_pending() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    kube = FakeKube()
    result = reconciler(kube, b, written(b), dry_run=True).reconcile("demo/app")
    assert result.action is Action.NONE
    assert not result.pending
    assert result.ready == "True"
    assert result.diff == ""
    assert writes(kube) == []


def test_dry_run_counts_a_stale_configmap_and_a_finalizer_as_pending() -> None:
    old = written(bundle({"data": {"a": "1"}}))
    renamed = bundle({"data": {"a": "1"}, "configMapName": "new"}, generation=2)
    kube = FakeKube()
    result = reconciler(kube, renamed, old, written(renamed), dry_run=True).reconcile("demo/app")
    assert result.action is Action.NONE
    assert result.pending
    assert "would delete ConfigMap app" in result.message
    assert writes(kube) == []
    orphan = bundle({"data": {"a": "1"}, "deletionPolicy": "Orphan"})
    kube = FakeKube()
    result = reconciler(kube, orphan, written(orphan), dry_run=True).reconcile("demo/app")
    assert result.pending
    assert "would add the cbop.dev/orphan finalizer" in result.message
    assert writes(kube) == []
    assert "finalizers" not in kube.tracker.get(CONFIGBUNDLES, "demo", "app")["metadata"]


def test_dry_run_log_never_says_reconciled() -> None:
    kube = FakeKube()
    with structlog.testing.capture_logs() as logs:
        reconciler(kube, bundle({"data": {"a": "1"}}), dry_run=True).reconcile("demo/app")
    assert [e["event"] for e in logs] == ["dry run: change pending"]
    assert logs[0]["action"] == "create"
    assert logs[0]["ready_after"] == "True"


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"data": {"a": "1"}}, id="created"),
        pytest.param({"data": {"bad key": "1"}}, id="invalid"),
        pytest.param({"data": {"a": "x" * 1_048_577}}, id="too-large"),
    ],
)
def test_a_stale_cache_read_after_a_status_write_writes_no_status_again(
    spec: dict[str, Any],
) -> None:
    """The cached bundle has not caught up with the status just written (its watch
    event is on the way) and a resync or another event reconciles it again: no second
    status write (it would differ only in lastTransitionTime)."""
    b = bundle(spec)
    kube = FakeKube()
    w = World(kube, b)
    r = w.reconciler
    r.reconcile("demo/app")
    first = [a for a in writes(kube) if a[0] == "patch/status"]
    assert first == [("patch/status", "configbundles", "app")]
    w.now = datetime.datetime(2026, 1, 2, 3, 9, 5, tzinfo=datetime.UTC)
    w.configmaps.sync(kube.tracker, CONFIGMAPS)  # the ConfigMap's event came first
    r.reconcile("demo/app")  # the same cached bundle, without the status written above
    assert [a for a in writes(kube) if a[0] == "patch/status"] == first
    # Once the cache shows a newer version of the bundle, its own status counts again:
    # here one whose status someone cleared.
    cleared = kube.tracker.get(CONFIGBUNDLES, "demo", "app")
    del cleared["status"]
    kube.tracker.update(CONFIGBUNDLES, "demo", "app", cleared, "status")
    w.bundles.sync(kube.tracker, CONFIGBUNDLES)
    r.reconcile("demo/app")
    assert len([a for a in writes(kube) if a[0] == "patch/status"]) == 2


def test_a_resync_of_a_converged_bundle_repeats_the_outcome_without_deciding_again() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    kube = FakeKube()
    w = World(kube, b, written(b))
    r = w.reconciler
    first = r.reconcile("demo/app")
    decided = w.memo.hits + w.memo.misses
    for _ in range(3):
        assert r.reconcile("demo/app") == first
    # Nothing is looked up again: the outcome is stored with the versions it came from.
    assert w.memo.hits + w.memo.misses == decided
    assert first.action is Action.NONE
    assert kube.actions == []


def test_a_first_look_at_a_converged_bundle_keeps_only_its_outcome() -> None:
    # The first reconcile of a listed, converged bundle (every bundle after a restart)
    # writes nothing and is followed by no watch event: its parsed spec, desired
    # ConfigMap and verdict would only push others out of the working set.
    b = converged_bundle({"data": {"a": "1"}})
    kube = FakeKube()
    w = World(kube, b, written(b))
    assert w.reconciler.reconcile("demo/app").action is Action.NONE
    assert kube.actions == []
    assert (len(w.memo._specs), len(w.memo._desired), len(w.memo._synced)) == (0, 0, 0)
    assert len(w.memo._noops) == 1


def test_a_first_look_that_writes_only_the_status_keeps_its_spec_for_the_status_event() -> None:
    b = bundle({"data": {"a": "1"}})  # in sync, but its status says nothing yet
    kube = FakeKube()
    w = World(kube, b, written(b))
    assert w.reconciler.reconcile("demo/app").action is Action.NONE
    assert [a[0] for a in writes(kube)] == ["patch/status"]
    assert (len(w.memo._specs), len(w.memo._desired)) == (1, 1)


def test_a_writing_reconcile_keeps_its_spec_for_the_reconciles_its_watch_events_bring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = converged_bundle({"data": {"a": "1"}})
    tampered = written(b)
    tampered["data"] = {"a": "edited"}
    kube = FakeKube()
    w = World(kube, b, tampered)
    r = w.reconciler
    assert r.reconcile("demo/app").action is Action.UPDATE
    healed = stored_configmap(kube)
    assert healed["data"] == {"a": "1"}
    assert (len(w.memo._specs), len(w.memo._desired)) == (1, 1)
    # The update's watch event: the healed ConfigMap, a new resourceVersion. Its
    # reconcile parses and renders nothing, and keeps its verdict for the next one.
    parsed: list[object] = []
    monkeypatch.setattr("cbop.configbundle.memo.parse_spec", parsed.append)
    w.configmaps.sync(kube.tracker, CONFIGMAPS)
    assert r.reconcile("demo/app").action is Action.NONE
    assert parsed == []
    assert len(w.memo._synced) == 1


def test_a_resync_repeats_the_outcome_after_the_spec_and_desired_entries_were_evicted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = converged_bundle({"data": {"a": "1"}})
    kube = FakeKube()
    w = World(kube, b, written(b))
    r = w.reconciler
    first = r.reconcile("demo/app")
    assert first.action is Action.NONE
    # A full reconcile of other bundles pushes this one's parsed spec and desired
    # ConfigMap out of the working set; its stored outcome stays.
    w.memo._specs.clear()
    w.memo._desired.clear()
    w.memo._synced.clear()
    parsed: list[object] = []
    monkeypatch.setattr("cbop.configbundle.memo.parse_spec", parsed.append)
    for _ in range(3):
        assert r.reconcile("demo/app") == first
    assert parsed == []
    assert kube.actions == []


def test_a_configmap_deleted_after_a_no_op_reconcile_is_created_again() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    kube = FakeKube()
    w = World(kube, b, written(b))
    r = w.reconciler
    assert r.reconcile("demo/app").action is Action.NONE
    kube.tracker.delete(CONFIGMAPS, "demo", "app")  # by someone else
    w.configmaps.sync(kube.tracker, CONFIGMAPS)
    assert r.reconcile("demo/app").action is Action.CREATE
    assert writes(kube) == [("create", "configmaps", "app")]


def test_a_configmap_changed_after_a_no_op_reconcile_is_healed() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    kube = FakeKube()
    w = World(kube, b, written(b))
    r = w.reconciler
    assert r.reconcile("demo/app").action is Action.NONE
    tampered = stored_configmap(kube)
    tampered["data"] = {"a": "tampered"}
    kube.tracker.put(CONFIGMAPS, tampered)
    w.configmaps.sync(kube.tracker, CONFIGMAPS)
    assert r.reconcile("demo/app").action is Action.UPDATE
    assert writes(kube) == [("update", "configmaps", "app")]


def test_a_changed_bundle_after_a_no_op_reconcile_is_decided_again() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    kube = FakeKube()
    w = World(kube, b, written(b))
    r = w.reconciler
    assert r.reconcile("demo/app").action is Action.NONE
    changed = kube.tracker.get(CONFIGBUNDLES, "demo", "app")
    changed["spec"] = {"data": {"a": "2"}}
    assert kube.tracker.put(CONFIGBUNDLES, changed)["metadata"]["generation"] == 2
    w.bundles.sync(kube.tracker, CONFIGBUNDLES)
    assert r.reconcile("demo/app").action is Action.UPDATE
    assert ("update", "configmaps", "app") in writes(kube)


def test_a_stale_configmap_appearing_after_a_no_op_reconcile_is_deleted() -> None:
    """Neither the bundle nor its ConfigMap changed, but another ConfigMap it controls
    appeared in the cache (e.g. from a relist): it is deleted, as by a full reconcile."""
    b = converged_bundle({"data": {"a": "1"}})
    kube = FakeKube()
    current = written(b)
    w = World(kube, b, current)
    r = w.reconciler
    assert r.reconcile("demo/app").action is Action.NONE
    stale = copy.deepcopy(current)
    stale["metadata"].update(name="old", uid="old-uid")
    kube.tracker.add(CONFIGMAPS, stale)
    w.configmaps.sync(kube.tracker, CONFIGMAPS)
    assert r.reconcile("demo/app").action is Action.NONE
    assert writes(kube) == [("delete", "configmaps", "old")]
    assert preconditions_of(kube, "old") == {"uid": "old-uid"}
    assert [c["metadata"]["name"] for c in kube.tracker.objects(CONFIGMAPS)] == ["app"]


def test_a_dry_run_never_repeats_a_stored_outcome() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    kube = FakeKube()
    r = reconciler(kube, b, written(b), dry_run=True)
    with structlog.testing.capture_logs() as logs:
        first = r.reconcile("demo/app")
        assert r.reconcile("demo/app") == first
    assert [e["event"] for e in logs] == ["dry run: nothing to write"] * 2


class CountingLister(CacheLister):
    """A cache that notes each ``get`` (namespace, name) asked of it."""

    def __init__(self) -> None:
        super().__init__(indexers={CONTROLLER_UID_INDEX: index_by_controller_uid})
        self.gets: list[tuple[str | None, str]] = []

    def get(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        self.gets.append((namespace, name))
        return super().get(namespace, name)


@pytest.mark.parametrize(
    ("case", "action"),
    [("create", Action.CREATE), ("drift", Action.UPDATE), ("resync", Action.NONE)],
)
def test_a_reconcile_reads_the_cached_configmap_once(case: str, action: Action) -> None:
    b = converged_bundle({"data": {"a": "1"}})
    cm = written(b)
    cm["data"] = {"a": "tampered" if case == "drift" else "1"}
    kube = FakeKube()
    kube.tracker.add(CONFIGBUNDLES, b)
    if case != "create":
        kube.tracker.add(CONFIGMAPS, cm)
    configmaps = CountingLister()
    configmaps.sync(kube.tracker, CONFIGMAPS)
    r = Reconciler(
        client=kube, bundles=cached(kube, CONFIGBUNDLES), configmaps=configmaps, now=lambda: NOW
    )
    if case == "resync":
        assert r.reconcile("demo/app").action is Action.NONE  # the full look; then a resync
        configmaps.gets.clear()
    assert r.reconcile("demo/app").action is action
    assert configmaps.gets == [("demo", "app")]
