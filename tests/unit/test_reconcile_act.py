"""The reconcile act layer against a fake client that records actions.

As sample-controller's tests: call the sync handler directly with listers and a fake
client, then compare the recorded API actions with the expected ones.
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
from cbop.informers import CONTROLLER_UID_INDEX, index_by_controller_uid
from cbop.kube import ApiError, ConnectionFailed, Resource
from cbop.runtime.events import EventLevel, EventRecorder
from cbop_testing.fakekube import CacheLister
from cbop_testing.objects import bundle, synced_status, written

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


class FakeClient:
    """Records (verb, resource, name) of every call; scripted errors per verb."""

    def __init__(self) -> None:
        self.actions: list[tuple[str, str, str]] = []
        self.bodies: list[Any] = []
        self.errors: dict[str, list[ApiError]] = {}
        self.objects: dict[str, dict[str, Any]] = {}

    def _act(self, verb: str, res: Resource, name: str, body: Any = None) -> None:
        self.actions.append((verb, res.plural, name))
        self.bodies.append(body)
        queue = self.errors.get(verb)
        if queue:
            raise queue.pop(0)

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        self._act("get", res, name)
        if name not in self.objects:
            raise ApiError(404, "NotFound", f"{name} not found")
        return copy.deepcopy(self.objects[name])

    def create(
        self, res: Resource, namespace: str | None, body: Mapping[str, Any], **kw: Any
    ) -> dict[str, Any]:
        self._act("create", res, body["metadata"].get("name", ""), body)
        return dict(body)

    def update(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        subresource: str | None = None,
        **kw: Any,
    ) -> dict[str, Any]:
        self._act("update", res, name, body)
        return dict(body)

    def patch(
        self, res: Resource, namespace: str | None, name: str, body: Any, **kw: Any
    ) -> dict[str, Any]:
        sub = kw.get("subresource")
        self._act("patch" + (f"/{sub}" if sub else ""), res, name, body)
        return {
            "metadata": {"name": name, "namespace": namespace, "uid": "u", "resourceVersion": "101"}
        }

    def delete(self, res: Resource, namespace: str | None, name: str, **kw: Any) -> dict[str, Any]:
        self._act("delete", res, name, kw.get("preconditions"))
        return {}

    def writes(self) -> list[tuple[str, str, str]]:
        return [a for a in self.actions if a[0] not in ("get",) and a[1] != "events"]


def lister(*objs: dict[str, Any]) -> CacheLister:
    """A cache holding ``objs``, with the controller-owner index the reconciler reads."""
    return CacheLister(objs, indexers={CONTROLLER_UID_INDEX: index_by_controller_uid})


def reconciler(
    client: FakeClient,
    b: dict[str, Any],
    *cms: dict[str, Any],
    dry_run: bool = False,
    events: EventLevel = "notable",
) -> Reconciler:
    return Reconciler(
        client=client,
        bundles=lister(b),
        configmaps=lister(*cms),
        recorder=EventRecorder(client, clock=lambda: NOW, level=events),
        dry_run=dry_run,
        now=lambda: NOW,
    )


def converged_bundle(spec: dict[str, Any]) -> dict[str, Any]:
    """A bundle whose status already says what reconcile would write."""
    b = bundle(spec, status=synced_status())
    client = FakeClient()
    reconciler(client, b, written(b)).reconcile("demo/app")
    status_patches = [
        body
        for (verb, _, _), body in zip(client.actions, client.bodies, strict=True)
        if verb == "patch/status"
    ]
    if status_patches:
        b["status"] = status_patches[-1]["status"]
    return b


def test_create_then_status_and_no_routine_event_by_default() -> None:
    """A new bundle costs two writes: the Created Event is routine (``--events all`` only)."""
    client = FakeClient()
    r = reconciler(client, bundle())
    result = r.reconcile("demo/app")
    assert result.action is Action.CREATE
    assert result.ready == "True"
    assert isinstance(r._recorder, EventRecorder)
    assert r._recorder.flush()
    assert client.writes() == [
        ("create", "configmaps", "app"),
        ("patch/status", "configbundles", "app"),
    ]
    assert [v for v, res, _ in client.actions if res == "events"] == []


def event_reasons(client: FakeClient) -> list[str]:
    """Reasons of the Events ``client`` was asked to create, in order."""
    return [
        body["reason"]
        for (verb, res, _), body in zip(client.actions, client.bodies, strict=True)
        if res == "events" and verb == "create"
    ]


@pytest.mark.parametrize(
    ("level", "reasons"), [("all", ["Created"]), ("notable", []), ("none", [])]
)
def test_created_event_by_level(level: EventLevel, reasons: list[str]) -> None:
    client = FakeClient()
    r = reconciler(client, bundle(), events=level)
    assert r.reconcile("demo/app").action is Action.CREATE
    assert isinstance(r._recorder, EventRecorder)
    assert r._recorder.flush()
    assert event_reasons(client) == reasons


@pytest.mark.parametrize(
    ("level", "reasons"),
    [("all", ["DriftCorrected"]), ("notable", ["DriftCorrected"]), ("none", [])],
)
def test_drift_corrected_event_by_level(level: EventLevel, reasons: list[str]) -> None:
    """An out-of-band change undone is notable: written unless Events are off."""
    b = converged_bundle({"data": {"a": "1"}})
    cm = written(b)
    cm["data"] = {"a": "tampered"}
    client = FakeClient()
    r = reconciler(client, b, cm, events=level)
    assert r.reconcile("demo/app").action is Action.UPDATE
    assert isinstance(r._recorder, EventRecorder)
    assert r._recorder.flush()
    assert event_reasons(client) == reasons


def test_converged_bundle_makes_no_request_at_all() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    client = FakeClient()
    result = reconciler(client, b, written(b)).reconcile("demo/app")
    assert result.action is Action.NONE
    assert client.actions == []


def test_status_lasttransitiontime_is_kept_when_status_is_unchanged() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    before = b["status"]["conditions"][0]["lastTransitionTime"]
    cm = written(b)
    cm["data"] = {"a": "tampered"}
    client = FakeClient()
    reconciler(client, b, cm).reconcile("demo/app")
    assert client.writes() == [("update", "configmaps", "app")]
    assert before == b["status"]["conditions"][0]["lastTransitionTime"]


def test_already_exists_from_stale_cache_reads_fresh_and_updates() -> None:
    b = bundle({"data": {"a": "2"}}, generation=2)
    client = FakeClient()
    client.errors["create"] = [ApiError(409, "AlreadyExists", "exists")]
    client.objects["app"] = written(bundle({"data": {"a": "1"}}))
    result = reconciler(client, b).reconcile("demo/app")
    assert result.action is Action.UPDATE
    assert [a for a in client.actions if a[1] == "configmaps"] == [
        ("create", "configmaps", "app"),
        ("get", "configmaps", "app"),
        ("update", "configmaps", "app"),
    ]


def test_already_exists_foreign_configmap_becomes_conflict() -> None:
    client = FakeClient()
    client.errors["create"] = [ApiError(409, "AlreadyExists", "exists")]
    client.objects["app"] = {
        "metadata": {"name": "app", "namespace": "demo", "uid": "x", "resourceVersion": "1"},
        "data": {"k": "mine"},
    }
    result = reconciler(client, bundle()).reconcile("demo/app")
    assert result.action is Action.CONFLICT
    assert result.reason is not None
    assert result.reason.value == "ConfigMapConflict"
    assert result.requeue_after == 15.0
    assert ("update", "configmaps", "app") not in client.actions


def test_released_configmap_is_taken_back_with_an_event() -> None:
    """Not in the managed-ConfigMap cache: create, AlreadyExists, fresh read, adopt."""
    spec = {"data": {"a": "1"}, "deletionPolicy": "Orphan"}
    cm = written(bundle(spec))
    cm["metadata"]["ownerReferences"] = []
    cm["metadata"]["labels"] = {}
    cm["metadata"]["annotations"] = {"cbop.dev/released-by": "demo/app"}
    client = FakeClient()
    client.errors["create"] = [ApiError(409, "AlreadyExists", "exists")]
    client.objects["app"] = cm
    again = bundle(spec, finalizers=["cbop.dev/orphan"])
    r = reconciler(client, again)
    result = r.reconcile("demo/app")
    assert result.action is Action.UPDATE
    assert result.ready == "True"
    assert isinstance(r._recorder, EventRecorder)
    assert r._recorder.flush()
    events = [
        b for (v, res, _), b in zip(client.actions, client.bodies, strict=True) if res == "events"
    ]
    assert [e["reason"] for e in events] == ["Adopted"]
    assert "taken back" in events[0]["message"]


def test_conflict_on_update_is_a_quiet_requeue() -> None:
    b = bundle({"data": {"a": "2"}}, generation=2)
    client = FakeClient()
    client.errors["update"] = [ApiError(409, "Conflict", "the object has been modified")]
    with pytest.raises(Requeue):
        reconciler(client, b, written(bundle({"data": {"a": "1"}}))).reconcile("demo/app")
    assert not [a for a in client.actions if a[0] == "patch/status"]


def test_api_rejection_is_reported_as_invalid_spec_without_retry() -> None:
    client = FakeClient()
    client.errors["create"] = [
        ApiError(422, "Invalid", 'ConfigMap "app" is invalid: metadata.labels: Invalid value')
    ]
    result = reconciler(client, bundle()).reconcile("demo/app")
    assert result.action is Action.INVALID
    assert result.reason is not None
    assert result.reason.value == "InvalidSpec"
    status = client.bodies[client.actions.index(("patch/status", "configbundles", "app"))]["status"]
    assert status["conditions"][0]["reason"] == "InvalidSpec"
    assert "metadata.labels" in status["conditions"][0]["message"]


@pytest.mark.parametrize("verb", ["create", "update"])
def test_request_too_large_is_terminal_with_the_numbers(verb: str) -> None:
    """A 413 is no retry loop: ConfigMapTooLarge, with the body size and the limit."""
    b = bundle({"data": {"a": "2"}}, generation=2)
    cms = [written(bundle({"data": {"a": "1"}}))] if verb == "update" else []
    client = FakeClient()
    too_large = ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728")
    too_large.request_bytes = 3_145_812
    client.errors[verb] = [too_large]
    result = reconciler(client, b, *cms).reconcile("demo/app")
    assert result.action is Action.INVALID
    assert result.reason is not None
    assert result.reason.value == "ConfigMapTooLarge"
    status = client.bodies[client.actions.index(("patch/status", "configbundles", "app"))]["status"]
    message = status["conditions"][0]["message"]
    assert status["conditions"][0]["reason"] == "ConfigMapTooLarge"
    assert "3,145,812-byte" in message
    assert "limit is 3145728" in message
    assert [a for a in client.actions if a[1] == "configmaps"] == [(verb, "configmaps", "app")]


def test_bad_request_is_terminal() -> None:
    client = FakeClient()
    client.errors["create"] = [ApiError(400, "BadRequest", "the body is not a ConfigMap")]
    result = reconciler(client, bundle()).reconcile("demo/app")
    assert result.action is Action.INVALID
    assert result.reason is not None
    assert result.reason.value == "InvalidSpec"
    assert "400 the body is not a ConfigMap" in result.message


def test_other_api_errors_are_reported_and_raised() -> None:
    client = FakeClient()
    client.errors["create"] = [ApiError(500, "InternalError", "etcd is down")]
    with pytest.raises(ApiError):
        reconciler(client, bundle()).reconcile("demo/app")
    status = client.bodies[client.actions.index(("patch/status", "configbundles", "app"))]["status"]
    assert status["conditions"][0]["reason"] == "ReconcileError"
    assert "etcd is down" in status["conditions"][0]["message"]


def test_unanswered_write_is_not_reported_as_refused() -> None:
    client = FakeClient()
    client.errors["create"] = [ConnectionFailed("POST /api/v1/...: connection refused")]
    with pytest.raises(ConnectionFailed):
        reconciler(client, bundle()).reconcile("demo/app")
    status = client.bodies[client.actions.index(("patch/status", "configbundles", "app"))]["status"]
    message = status["conditions"][0]["message"]
    assert message == (
        "a write got no answer from the API server: "
        "connection failed: POST /api/v1/...: connection refused"
    )


def test_update_hitting_immutable_configmap_replaces_from_fresh_read() -> None:
    b = bundle({"data": {"a": "2"}}, generation=2)
    stale = written(bundle({"data": {"a": "1"}}))
    fresh = copy.deepcopy(stale)
    fresh["immutable"] = True
    client = FakeClient()
    client.errors["update"] = [
        ApiError(422, "Invalid", "data: Forbidden: field is immutable when `immutable` is set")
    ]
    client.objects["app"] = fresh
    result = reconciler(client, b, stale).reconcile("demo/app")
    assert result.action is Action.REPLACE
    verbs = [a for a in client.actions if a[1] == "configmaps"]
    assert verbs[-2:] == [("delete", "configmaps", "app"), ("create", "configmaps", "app")]
    pre = client.bodies[client.actions.index(("delete", "configmaps", "app"))]
    assert pre == {"uid": "cm-uid", "resourceVersion": "7"}


def test_invalid_spec_reports_once_and_writes_nothing_else() -> None:
    b = bundle({"data": {"bad key": "1"}})
    client = FakeClient()
    result = reconciler(client, b).reconcile("demo/app")
    assert result.action is Action.INVALID
    assert result.requeue_after is None
    assert client.writes() == [("patch/status", "configbundles", "app")]


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
    client = FakeClient()
    result = reconciler(client, bundle(spec)).reconcile("demo/app")
    assert result.action is Action.INVALID
    assert result.config_map == shown
    status = client.bodies[client.actions.index(("patch/status", "configbundles", "app"))]["status"]
    assert status.get("configMapName") == shown


@pytest.mark.parametrize(
    ("data", "count"), [({"a": "1"}, "1 key,"), ({"a": "1", "b": "2"}, "2 keys,")]
)
def test_synced_message_counts_keys_in_english(data: dict[str, str], count: str) -> None:
    client = FakeClient()
    reconciler(client, bundle({"data": data})).reconcile("demo/app")
    status = client.bodies[client.actions.index(("patch/status", "configbundles", "app"))]["status"]
    assert f"matches the spec ({count} sha256:" in status["conditions"][0]["message"]


def test_dry_run_writes_only_with_server_dry_run_and_returns_a_diff() -> None:
    client = FakeClient()
    result = reconciler(client, bundle({"data": {"a": "1"}}), dry_run=True).reconcile("demo/app")
    assert result.action is Action.CREATE
    assert "+data:" in result.diff
    assert client.writes() == [("create", "configmaps", "app")]  # sent with dryRun=All


def test_orphan_release_strips_ownership_then_drops_finalizer() -> None:
    spec = {"data": {"a": "1"}, "deletionPolicy": "Orphan"}
    live = bundle(spec)
    cm = written(live)
    gone = bundle(spec, finalizers=["cbop.dev/orphan"], deleting=True)
    client = FakeClient()
    result = reconciler(client, gone, cm).reconcile("demo/app")
    assert result.action is Action.RELEASE
    assert client.writes() == [("update", "configmaps", "app"), ("patch", "configbundles", "app")]
    released = client.bodies[client.actions.index(("update", "configmaps", "app"))]
    assert released["metadata"]["ownerReferences"] == []
    finalizer_patch = client.bodies[client.actions.index(("patch", "configbundles", "app"))]
    assert finalizer_patch["metadata"]["finalizers"] == []


def test_stale_configmap_after_rename_is_deleted_with_uid_precondition() -> None:
    old = written(bundle({"data": {"a": "1"}}))
    b = bundle({"data": {"a": "1"}, "configMapName": "new"}, generation=2)
    client = FakeClient()
    reconciler(client, b, old).reconcile("demo/app")
    assert ("create", "configmaps", "new") in client.actions
    assert ("delete", "configmaps", "app") in client.actions
    assert client.bodies[client.actions.index(("delete", "configmaps", "app"))] == {"uid": "cm-uid"}


def test_bundle_gone_from_cache_does_nothing() -> None:
    client = FakeClient()
    r = Reconciler(client=client, bundles=lister(), configmaps=lister())
    assert r.reconcile("demo/app").action is None
    assert client.actions == []


def test_decide_matches_written_state() -> None:
    b = bundle({"data": {"a": "1"}})
    assert decide(b, parse_spec(b), written(b)).action is Action.NONE


def test_conflict_recheck_reads_instead_of_failing_a_create_again() -> None:
    client = FakeClient()
    client.errors["create"] = [ApiError(409, "AlreadyExists", "exists")]
    client.objects["app"] = {
        "metadata": {"name": "app", "namespace": "demo", "uid": "x", "resourceVersion": "1"},
        "data": {"k": "mine"},
    }
    r = reconciler(client, bundle())
    assert r.reconcile("demo/app").action is Action.CONFLICT
    client.actions.clear()
    assert r.reconcile("demo/app").action is Action.CONFLICT
    assert [a for a in client.actions if a[1] == "configmaps"] == [("get", "configmaps", "app")]
    # The blocker goes away: the next recheck creates.
    del client.objects["app"]
    client.actions.clear()
    assert r.reconcile("demo/app").action is Action.CREATE
    assert ("create", "configmaps", "app") in client.actions


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
    client = FakeClient()
    result = reconciler(client, b, *cms, dry_run=True).reconcile("demo/app")
    assert result.action is action
    assert result.pending
    assert result.message.startswith(f"would {action.value} ConfigMap app")
    assert "matches" not in result.message
    assert result.message.endswith("the bundle would then be Ready")


def test_dry_run_of_a_bundle_in_sync_has_nothing_pending() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    client = FakeClient()
    result = reconciler(client, b, written(b), dry_run=True).reconcile("demo/app")
    assert result.action is Action.NONE
    assert not result.pending
    assert result.ready == "True"
    assert result.diff == ""
    assert client.writes() == []


def test_dry_run_counts_a_stale_configmap_and_a_finalizer_as_pending() -> None:
    old = written(bundle({"data": {"a": "1"}}))
    renamed = bundle({"data": {"a": "1"}, "configMapName": "new"}, generation=2)
    client = FakeClient()
    result = reconciler(client, renamed, old, written(renamed), dry_run=True).reconcile("demo/app")
    assert result.action is Action.NONE
    assert result.pending
    assert "would delete ConfigMap app" in result.message
    assert client.writes() == []
    orphan = bundle({"data": {"a": "1"}, "deletionPolicy": "Orphan"})
    result = reconciler(client, orphan, written(orphan), dry_run=True).reconcile("demo/app")
    assert result.pending
    assert "would add the cbop.dev/orphan finalizer" in result.message
    assert client.writes() == []


def test_dry_run_log_never_says_reconciled() -> None:
    client = FakeClient()
    with structlog.testing.capture_logs() as logs:
        reconciler(client, bundle({"data": {"a": "1"}}), dry_run=True).reconcile("demo/app")
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
    client = FakeClient()
    r = reconciler(client, b)
    r.reconcile("demo/app")
    first = [a for a in client.writes() if a[0] == "patch/status"]
    assert first == [("patch/status", "configbundles", "app")]
    later = datetime.datetime(2026, 1, 2, 3, 9, 5, tzinfo=datetime.UTC)
    r._now = lambda: later
    configmaps = [
        body
        for (verb, _, _), body in zip(client.actions, client.bodies, strict=True)
        if verb == "create" and body and body.get("kind") == "ConfigMap"
    ]
    if configmaps:
        r._configmaps = lister(configmaps[0])
    r.reconcile("demo/app")  # the same cached bundle, without the status written above
    assert [a for a in client.writes() if a[0] == "patch/status"] == first
    # Once the cache shows a newer version of the bundle, its own status counts again.
    newer = copy.deepcopy(b)
    newer["metadata"]["resourceVersion"] = "2000"
    r._bundles = lister(newer)
    r.reconcile("demo/app")
    assert len([a for a in client.writes() if a[0] == "patch/status"]) == 2


def _with_rv(obj: dict[str, Any], rv: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = rv
    return obj


def test_a_resync_of_a_converged_bundle_repeats_the_outcome_without_deciding_again() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    client = FakeClient()
    r = reconciler(client, b, written(b))
    first = r.reconcile("demo/app")
    decided = r._memo.hits + r._memo.misses
    for _ in range(3):
        assert r.reconcile("demo/app") == first
    # Nothing is looked up again: the ConfigMap's name is stored with the outcome.
    assert r._memo.hits + r._memo.misses == decided
    assert first.action is Action.NONE
    assert client.actions == []


def test_a_first_look_at_a_converged_bundle_keeps_only_its_outcome() -> None:
    # The first reconcile of a listed, converged bundle (every bundle after a restart)
    # writes nothing and is followed by no watch event: its parsed spec, desired
    # ConfigMap and verdict would only push others out of the working set.
    b = converged_bundle({"data": {"a": "1"}})
    client = FakeClient()
    r = reconciler(client, b, written(b))
    assert r.reconcile("demo/app").action is Action.NONE
    assert client.actions == []
    assert (len(r._memo._specs), len(r._memo._desired), len(r._memo._synced)) == (0, 0, 0)
    assert len(r._memo._noops) == 1


def test_a_first_look_that_writes_only_the_status_keeps_its_spec_for_the_status_event() -> None:
    b = bundle({"data": {"a": "1"}})  # in sync, but its status says nothing yet
    client = FakeClient()
    r = reconciler(client, b, written(b))
    assert r.reconcile("demo/app").action is Action.NONE
    assert [a[0] for a in client.writes()] == ["patch/status"]
    assert (len(r._memo._specs), len(r._memo._desired)) == (1, 1)


def test_a_writing_reconcile_keeps_its_spec_for_the_reconciles_its_watch_events_bring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = converged_bundle({"data": {"a": "1"}})
    cm = written(b)
    tampered = _with_rv(cm, "777")
    tampered["data"] = {"a": "edited"}
    client = FakeClient()
    r = reconciler(client, b, tampered)
    assert r.reconcile("demo/app").action is Action.UPDATE
    assert (len(r._memo._specs), len(r._memo._desired)) == (1, 1)
    # The update's watch event: the healed ConfigMap, a new resourceVersion. Its
    # reconcile parses and renders nothing, and keeps its verdict for the next one.
    parsed: list[object] = []
    monkeypatch.setattr("cbop.configbundle.memo.parse_spec", parsed.append)
    r._configmaps = lister(_with_rv(cm, "778"))
    assert r.reconcile("demo/app").action is Action.NONE
    assert parsed == []
    assert len(r._memo._synced) == 1


def test_a_resync_repeats_the_outcome_after_the_spec_and_desired_entries_were_evicted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = converged_bundle({"data": {"a": "1"}})
    client = FakeClient()
    r = reconciler(client, b, written(b))
    first = r.reconcile("demo/app")
    assert first.action is Action.NONE
    # A full reconcile of other bundles pushes this one's parsed spec and desired
    # ConfigMap out of the working set; its stored outcome stays.
    r._memo._specs.clear()
    r._memo._desired.clear()
    r._memo._synced.clear()
    parsed: list[object] = []
    monkeypatch.setattr("cbop.configbundle.memo.parse_spec", parsed.append)
    for _ in range(3):
        assert r.reconcile("demo/app") == first
    assert parsed == []
    assert client.actions == []


def test_a_configmap_deleted_after_a_no_op_reconcile_is_created_again() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    client = FakeClient()
    r = reconciler(client, b, written(b))
    assert r.reconcile("demo/app").action is Action.NONE
    r._configmaps = lister()
    assert r.reconcile("demo/app").action is Action.CREATE
    assert client.writes() == [("create", "configmaps", "app")]


def test_a_configmap_changed_after_a_no_op_reconcile_is_healed() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    client = FakeClient()
    r = reconciler(client, b, written(b))
    assert r.reconcile("demo/app").action is Action.NONE
    tampered = _with_rv(written(b), "8")
    tampered["data"] = {"a": "tampered"}
    r._configmaps = lister(tampered)
    assert r.reconcile("demo/app").action is Action.UPDATE
    assert client.writes() == [("update", "configmaps", "app")]


def test_a_changed_bundle_after_a_no_op_reconcile_is_decided_again() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    client = FakeClient()
    r = reconciler(client, b, written(b))
    assert r.reconcile("demo/app").action is Action.NONE
    changed = _with_rv(b, "200")
    changed["metadata"]["generation"] = 2
    changed["spec"] = {"data": {"a": "2"}}
    r._bundles = lister(changed)
    assert r.reconcile("demo/app").action is Action.UPDATE
    assert ("update", "configmaps", "app") in client.writes()


def test_a_stale_configmap_appearing_after_a_no_op_reconcile_is_deleted() -> None:
    """Neither the bundle nor its ConfigMap changed, but another ConfigMap it controls
    appeared in the cache (e.g. from a relist): it is deleted, as by a full reconcile."""
    b = converged_bundle({"data": {"a": "1"}})
    client = FakeClient()
    current = written(b)
    r = reconciler(client, b, current)
    assert r.reconcile("demo/app").action is Action.NONE
    stale = copy.deepcopy(current)
    stale["metadata"].update(name="old", uid="old-uid")
    r._configmaps = lister(current, stale)
    assert r.reconcile("demo/app").action is Action.NONE
    assert client.writes() == [("delete", "configmaps", "old")]


def test_a_dry_run_never_repeats_a_stored_outcome() -> None:
    b = converged_bundle({"data": {"a": "1"}})
    client = FakeClient()
    r = reconciler(client, b, written(b), dry_run=True)
    with structlog.testing.capture_logs() as logs:
        first = r.reconcile("demo/app")
        assert r.reconcile("demo/app") == first
    assert [e["event"] for e in logs] == ["dry run: nothing to write"] * 2
