"""The fake API server of the unit tests behaves as a real one where cbop depends on it.

Tracker semantics (resourceVersion, generation, status subresource, finalizers,
preconditions, selectors, paging, watch replay, bookmarks, compaction), reactions,
recorded actions, the write fence, and real informers running against it.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from cbop.informers import FuncHandler, SharedInformerFactory
from cbop.kube import (
    CLUSTERCONFIGBUNDLES,
    CONFIGBUNDLES,
    CONFIGMAPS,
    NAMESPACES,
    ApiError,
    ConnectionFailed,
    LeaseNotHeld,
)
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import (
    Action,
    CacheLister,
    FakeKube,
    FakeRecorder,
    FakeWatch,
    ObjectTracker,
    Script,
    Stall,
    conflict_on,
    delay,
    errors,
    fail,
)
from cbop_testing.fakekube.patch import json_patch, merge_patch
from cbop_testing.fakekube.selectors import FieldSelector, LabelSelector


def cm(
    name: str, ns: str = "demo", labels: dict[str, str] | None = None, **data: str
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if labels:
        meta["labels"] = labels
    return {"metadata": meta, "data": dict(data)}


def bundle(name: str, ns: str = "demo", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": dict(spec)}


def names(obj_list: dict[str, Any]) -> list[str]:
    return [o["metadata"]["name"] for o in obj_list["items"]]


# ---------------------------------------------------------------- tracker: writes


def test_one_resource_version_counter_and_no_version_for_a_write_that_changes_nothing() -> None:
    kube = FakeKube()
    a = kube.create(CONFIGMAPS, "demo", cm("a", k="1"))
    b = kube.create(CONFIGBUNDLES, "demo", bundle("b"))
    assert (a["metadata"]["resourceVersion"], b["metadata"]["resourceVersion"]) == ("1", "2")
    assert a["kind"] == "ConfigMap"
    assert a["apiVersion"] == "v1"
    same = kube.update(CONFIGMAPS, "demo", "a", a)
    assert same["metadata"]["resourceVersion"] == "1"
    changed = kube.patch(CONFIGMAPS, "demo", "a", {"data": {"k": "2"}})
    assert changed["metadata"]["resourceVersion"] == "3"
    assert kube.tracker.resource_version == "3"


def test_a_stale_resource_version_is_a_conflict_worded_as_the_server() -> None:
    kube = FakeKube()
    first = kube.create(CONFIGMAPS, "demo", cm("a", k="1"))
    kube.tracker.put(CONFIGMAPS, cm("a", k="other"))
    with pytest.raises(ApiError) as caught:
        kube.update(CONFIGMAPS, "demo", "a", {**first, "data": {"k": "2"}})
    assert caught.value.is_conflict
    assert caught.value.status == 409
    assert caught.value.message == (
        'Operation cannot be fulfilled on configmaps "a": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    with pytest.raises(ApiError) as exists:
        kube.create(CONFIGMAPS, "demo", cm("a"))
    assert exists.value.is_already_exists
    assert exists.value.message == 'configmaps "a" already exists'
    with pytest.raises(ApiError) as missing:
        kube.get(CONFIGBUNDLES, "demo", "nope")
    assert missing.value.is_not_found
    assert missing.value.message == 'configbundles.cbop.dev "nope" not found'


def test_generation_follows_the_spec_and_status_goes_through_its_subresource() -> None:
    kube = FakeKube()
    created = kube.create(CONFIGBUNDLES, "demo", {**bundle("b", x=1), "status": {"s": "dropped"}})
    assert created["metadata"]["generation"] == 1
    assert "status" not in created
    # The main resource ignores status.
    same = kube.update(CONFIGBUNDLES, "demo", "b", {**created, "status": {"s": "no"}})
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    # The status subresource writes only status, and leaves the generation.
    status = kube.update(
        CONFIGBUNDLES, "demo", "b", {**created, "spec": {"x": 9}, "status": {"s": "ok"}}, "status"
    )
    assert status["status"] == {"s": "ok"}
    assert status["spec"] == {"x": 1}
    assert status["metadata"]["generation"] == 1
    labelled = kube.patch(CONFIGBUNDLES, "demo", "b", {"metadata": {"labels": {"l": "v"}}})
    assert labelled["metadata"]["generation"] == 1
    spec = kube.patch(CONFIGBUNDLES, "demo", "b", {"spec": {"x": 2}})
    assert spec["metadata"]["generation"] == 2
    assert spec["status"] == {"s": "ok"}
    # A ConfigMap has no status subresource, and no generation.
    assert "generation" not in kube.create(CONFIGMAPS, "demo", cm("c"))["metadata"]


def test_a_cluster_config_bundle_has_a_status_subresource() -> None:
    kube = FakeKube()
    created = kube.create(CLUSTERCONFIGBUNDLES, None, {"metadata": {"name": "ca"}, "spec": {}})
    assert created["metadata"]["generation"] == 1
    written = kube.update(CLUSTERCONFIGBUNDLES, None, "ca", {**created, "status": {"s": 1}})
    assert "status" not in written
    status = kube.update(
        CLUSTERCONFIGBUNDLES, None, "ca", {**created, "status": {"s": 1}}, "status"
    )
    assert status["status"] == {"s": 1}


def test_namespace_lifecycle_refuses_creates_where_no_namespace_lives() -> None:
    kube = FakeKube(ObjectTracker(namespace_lifecycle=True))
    with pytest.raises(ApiError) as gone:
        kube.create(CONFIGMAPS, "demo", cm("c"))
    assert (gone.value.status, gone.value.reason) == (404, "NotFound")
    assert gone.value.message == 'namespaces "demo" not found'
    assert (gone.value.body or {})["details"]["kind"] == "namespaces"
    kube.tracker.add(NAMESPACES, {"metadata": {"name": "demo", "finalizers": ["kubernetes"]}})
    assert kube.create(CONFIGMAPS, "demo", cm("c"))["metadata"]["namespace"] == "demo"
    kube.delete(NAMESPACES, None, "demo")  # its finalizer holds it: terminating
    with pytest.raises(ApiError) as terminating:
        kube.create(CONFIGMAPS, "demo", cm("d"))
    assert (terminating.value.status, terminating.value.reason) == (403, "Forbidden")
    assert "being terminated" in terminating.value.message
    causes = (terminating.value.body or {})["details"]["causes"]
    assert [c["reason"] for c in causes] == ["NamespaceTerminating"]
    # Cluster-scoped objects need no namespace; without the option nothing is checked.
    kube.create(CLUSTERCONFIGBUNDLES, None, {"metadata": {"name": "ca"}})
    FakeKube().create(CONFIGMAPS, "nowhere", cm("c", ns="nowhere"))


def test_finalizers_hold_a_deletion_until_the_last_one_goes() -> None:
    kube = FakeKube()
    obj = cm("a")
    obj["metadata"]["finalizers"] = ["cbop.dev/release"]
    kube.create(CONFIGMAPS, "demo", obj)
    deleting = kube.delete(CONFIGMAPS, "demo", "a")
    assert deleting["metadata"]["deletionTimestamp"]
    assert kube.get(CONFIGMAPS, "demo", "a")["metadata"]["deletionTimestamp"]
    # A second delete changes nothing.
    again = kube.delete(CONFIGMAPS, "demo", "a")
    assert again["metadata"]["resourceVersion"] == deleting["metadata"]["resourceVersion"]
    kube.patch(
        CONFIGMAPS,
        "demo",
        "a",
        [{"op": "remove", "path": "/metadata/finalizers"}],
        patch_type="json",
    )
    with pytest.raises(ApiError) as gone:
        kube.get(CONFIGMAPS, "demo", "a")
    assert gone.value.is_not_found


def test_delete_preconditions_are_checked() -> None:
    kube = FakeKube()
    created = kube.create(CONFIGMAPS, "demo", cm("a"))
    with pytest.raises(ApiError) as caught:
        kube.delete(CONFIGMAPS, "demo", "a", preconditions={"uid": "someone-else"})
    assert caught.value.is_conflict
    assert "Precondition failed: UID in precondition: someone-else" in caught.value.message
    with pytest.raises(ApiError):
        kube.delete(CONFIGMAPS, "demo", "a", preconditions={"resourceVersion": "0"})
    status = kube.delete(CONFIGMAPS, "demo", "a", preconditions={"uid": created["metadata"]["uid"]})
    assert status["status"] == "Success"
    assert kube.tracker.objects(CONFIGMAPS) == []


def test_dry_runs_answer_and_store_nothing() -> None:
    kube = FakeKube()
    made = kube.create(CONFIGMAPS, "demo", cm("a", k="1"), dry_run=True)
    assert made["data"] == {"k": "1"}
    assert kube.tracker.objects(CONFIGMAPS) == []
    kube.create(CONFIGMAPS, "demo", cm("a", k="1"))
    patched = kube.patch(CONFIGMAPS, "demo", "a", {"data": {"k": "2"}}, dry_run=True)
    assert patched["data"] == {"k": "2"}
    kube.delete(CONFIGMAPS, "demo", "a", dry_run=True)
    stored = kube.get(CONFIGMAPS, "demo", "a")
    assert stored["data"] == {"k": "1"}
    assert stored["metadata"]["resourceVersion"] == "1"


def test_patches_merge_json_and_strategic() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {
        "a": {"c": 2, "d": 3}
    }
    doc = {"m": {"finalizers": ["x", "y"]}}
    assert json_patch(doc, [{"op": "add", "path": "/m/finalizers/-", "value": "z"}]) == {
        "m": {"finalizers": ["x", "y", "z"]}
    }
    assert doc == {"m": {"finalizers": ["x", "y"]}}
    kube = FakeKube()
    kube.create(CONFIGMAPS, "demo", cm("a", k="1"))
    strategic = kube.patch(
        CONFIGMAPS, "demo", "a", {"metadata": {"labels": {"x": "y"}}}, patch_type="strategic"
    )
    assert strategic["metadata"]["labels"] == {"x": "y"}
    with pytest.raises(ApiError) as failed:
        kube.patch(
            CONFIGMAPS,
            "demo",
            "a",
            [{"op": "test", "path": "/data/k", "value": "9"}],
            patch_type="json",
        )
    assert failed.value.is_invalid
    # A resourceVersion in a patch is a precondition.
    with pytest.raises(ApiError) as stale:
        kube.patch(CONFIGMAPS, "demo", "a", {"metadata": {"resourceVersion": "1"}, "data": {}})
    assert stale.value.is_conflict


def test_apply_conflicts_with_other_owners_unless_forced() -> None:
    kube = FakeKube(ObjectTracker(write_managed_fields=True))
    kube.create(CONFIGMAPS, "demo", cm("a", k="1"), field_manager="kubectl")
    with pytest.raises(ApiError) as caught:
        kube.patch(
            CONFIGMAPS, "demo", "a", cm("a", k="2"), patch_type="apply", field_manager="cbop"
        )
    assert caught.value.is_conflict
    assert caught.value.message == 'Apply failed with 1 conflict: conflict with "kubectl": .data.k'
    # The same value is no conflict: both own it.
    kube.patch(CONFIGMAPS, "demo", "a", cm("a", k="1"), patch_type="apply", field_manager="cbop")
    forced = kube.patch(
        CONFIGMAPS,
        "demo",
        "a",
        cm("a", k="2", j="x"),
        patch_type="apply",
        field_manager="cbop",
        force=True,
    )
    assert forced["data"] == {"k": "2", "j": "x"}
    managers = {(m["manager"], m["operation"]) for m in forced["metadata"]["managedFields"]}
    assert ("cbop", "Apply") in managers
    # Fields the applier stops sending, and nobody else owns, go.
    dropped = kube.patch(
        CONFIGMAPS, "demo", "a", cm("a", k="2"), patch_type="apply", field_manager="cbop"
    )
    assert dropped["data"] == {"k": "2"}
    # Applying creates a missing object.
    made = kube.patch(CONFIGMAPS, "demo", "new", cm("new", k="1"), patch_type="apply")
    assert made["metadata"]["resourceVersion"]


def test_an_apply_of_the_values_already_there_still_takes_their_ownership() -> None:
    kube = FakeKube(ObjectTracker(write_managed_fields=True))
    seeded = kube.tracker.add(CONFIGMAPS, cm("a", k="1"))  # owned by nobody
    owned = kube.patch(
        CONFIGMAPS, "demo", "a", cm("a", k="1"), patch_type="apply", field_manager="argocd"
    )
    assert owned["data"] == {"k": "1"}
    assert int(owned["metadata"]["resourceVersion"]) > int(seeded["metadata"]["resourceVersion"])
    assert [m["manager"] for m in owned["metadata"]["managedFields"]] == ["argocd"]
    with pytest.raises(ApiError) as caught:
        kube.patch(
            CONFIGMAPS, "demo", "a", cm("a", k="2"), patch_type="apply", field_manager="cbop"
        )
    assert 'conflict with "argocd"' in caught.value.message
    # Applied again, nothing changes: no new resourceVersion.
    again = kube.patch(
        CONFIGMAPS, "demo", "a", cm("a", k="1"), patch_type="apply", field_manager="argocd"
    )
    assert again["metadata"]["resourceVersion"] == owned["metadata"]["resourceVersion"]


# ---------------------------------------------------------------- list


def test_label_and_field_selectors() -> None:
    sel = LabelSelector.parse("app=web,tier!=db,env in (a, b),x notin (1),has,!gone")
    assert sel.matches({"metadata": {"labels": {"app": "web", "env": "a", "has": ""}}})
    assert not sel.matches({"metadata": {"labels": {"app": "web", "env": "c", "has": ""}}})
    assert not sel.matches({"metadata": {"labels": {"app": "web", "env": "a"}}})
    assert not sel.matches(
        {"metadata": {"labels": {"app": "web", "env": "a", "has": "", "gone": ""}}}
    )
    fields = FieldSelector.parse("metadata.name=a,metadata.namespace!=kube-system")
    assert fields.matches({"metadata": {"name": "a", "namespace": "demo"}})
    assert not fields.matches({"metadata": {"name": "a", "namespace": "kube-system"}})
    kube = FakeKube()
    kube.tracker.add(CONFIGMAPS, cm("a", labels={"app": "web"}))
    kube.tracker.add(CONFIGMAPS, cm("b", labels={"app": "db"}))
    kube.tracker.add(CONFIGMAPS, cm("c", "other", labels={"app": "web"}))
    assert names(kube.list(CONFIGMAPS, label_selector="app=web")) == ["a", "c"]
    assert names(kube.list(CONFIGMAPS, "demo", label_selector="app in (web,db)")) == ["a", "b"]
    assert names(kube.list(CONFIGMAPS, field_selector="metadata.name=b")) == ["b"]
    with pytest.raises(ApiError) as bad:
        kube.list(CONFIGMAPS, field_selector="data.k=1")
    assert bad.value.status == 400


def test_paging_with_continue_and_an_expired_token() -> None:
    kube = FakeKube()
    for i in range(5):
        kube.tracker.add(CONFIGMAPS, cm(f"c{i}"))
    first = kube.list(CONFIGMAPS, limit=2)
    assert names(first) == ["c0", "c1"]
    assert first["metadata"]["remainingItemCount"] == 3
    second = kube.list(CONFIGMAPS, limit=2, continue_=first["metadata"]["continue"])
    assert names(second) == ["c2", "c3"]
    last = kube.list(CONFIGMAPS, limit=2, continue_=second["metadata"]["continue"])
    assert names(last) == ["c4"]
    assert "continue" not in last["metadata"]
    kube.tracker.add(CONFIGMAPS, cm("late"))
    kube.tracker.compact()
    with pytest.raises(ApiError) as gone:
        kube.list(CONFIGMAPS, limit=2, continue_=first["metadata"]["continue"])
    assert gone.value.is_gone


def test_the_item_hook_shapes_each_listed_item() -> None:
    kube = FakeKube()
    kube.tracker.add(CONFIGMAPS, cm("a", k="1"))
    listed = kube.list(CONFIGMAPS, item_hook=lambda o: {**o, "data": {}})
    assert listed["items"][0]["data"] == {}


# ---------------------------------------------------------------- watch


def drain(stream: FakeWatch, n: int) -> list[tuple[str, str]]:
    out = []
    for _ in range(n):
        event = next(stream)
        out.append((event["type"], event["object"]["metadata"].get("name", "")))
    return out


def test_watch_replays_from_a_resource_version_then_follows() -> None:
    kube = FakeKube()
    kube.tracker.add(CONFIGMAPS, cm("a"))
    rv = kube.tracker.resource_version
    kube.tracker.add(CONFIGMAPS, cm("b"))
    kube.tracker.put(CONFIGMAPS, cm("a", k="2"))
    stream = kube.watch(
        CONFIGMAPS, "demo", resource_version=rv, timeout_seconds=60, read_timeout=90
    )
    assert drain(stream, 2) == [("ADDED", "b"), ("MODIFIED", "a")]
    kube.delete(CONFIGMAPS, "demo", "b")
    assert drain(stream, 1) == [("DELETED", "b")]
    # From "0": the current state first.
    fresh = kube.watch(CONFIGMAPS, resource_version="0", timeout_seconds=60, read_timeout=90)
    assert drain(fresh, 1) == [("ADDED", "a")]
    assert kube.stream("configmaps", None) is fresh
    fresh.close()
    stream.close()
    assert kube.tracker.watch_count() == 0


def test_a_label_selector_watch_sees_objects_enter_and_leave() -> None:
    kube = FakeKube()
    kube.tracker.add(CONFIGMAPS, cm("a"))
    stream = kube.watch(
        CONFIGMAPS,
        resource_version=kube.tracker.resource_version,
        label_selector="app=web",
        timeout_seconds=60,
        read_timeout=90,
    )
    kube.tracker.put(CONFIGMAPS, cm("a", labels={"app": "web"}))
    kube.tracker.put(CONFIGMAPS, cm("a", labels={"app": "web"}, k="1"))
    kube.tracker.put(CONFIGMAPS, cm("a", labels={"app": "db"}))
    kube.tracker.put(CONFIGMAPS, cm("b"))
    assert drain(stream, 3) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    stream.close()


def test_bookmarks_and_410_after_compaction() -> None:
    kube = FakeKube()
    kube.tracker.add(CONFIGMAPS, cm("a"))
    old = kube.tracker.resource_version
    stream = kube.watch(CONFIGMAPS, resource_version=old, timeout_seconds=60, read_timeout=90)
    no_marks = kube.watch(
        CONFIGMAPS, resource_version=old, allow_bookmarks=False, timeout_seconds=60, read_timeout=90
    )
    kube.tracker.add(CONFIGMAPS, cm("b"))
    assert kube.tracker.bookmark() == "2"
    assert next(stream)["type"] == "ADDED"
    assert next(stream) == {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "2"}}}
    assert [e["type"] for e in no_marks.sent] == ["ADDED"]
    kube.tracker.compact()
    with pytest.raises(ApiError) as expired:
        next(stream)
    assert expired.value.is_gone
    assert expired.value.reason == "Expired"
    with pytest.raises(StopIteration):
        next(stream)
    late = kube.watch(CONFIGMAPS, resource_version=old, timeout_seconds=60, read_timeout=90)
    with pytest.raises(ApiError) as too_old:
        next(late)
    assert too_old.value.message == "too old resource version: 1 (2)"


def test_a_test_fed_watch_raises_what_it_is_given() -> None:
    kube = FakeKube()
    fed = FakeWatch()
    kube.prepend_reactor("watch", "configmaps", Script(fed))
    stream = kube.watch(CONFIGMAPS, resource_version="5", timeout_seconds=60, read_timeout=90)
    assert stream is fed
    fed.push({"type": "ADDED", "object": cm("x")}, errors.connection_refused())
    assert next(stream)["type"] == "ADDED"
    with pytest.raises(ConnectionFailed):
        next(stream)
    fed.end()
    with pytest.raises(StopIteration):
        next(stream)


# ---------------------------------------------------------------- reactions and actions


def test_actions_are_recorded_and_counted() -> None:
    kube = FakeKube()
    kube.create(CONFIGMAPS, "demo", cm("a"), field_manager="cbop")
    kube.get(CONFIGMAPS, "demo", "a")
    kube.list(CONFIGMAPS, "demo")
    assert [a.key for a in kube.actions] == [
        ("create", "configmaps", "demo", "a"),
        ("get", "configmaps", "demo", "a"),
        ("list", "configmaps", "demo", None),
    ]
    assert kube.actions[0].options["field_manager"] == "cbop"
    assert kube.request_counts() == {
        ("create", "configmaps"): 1,
        ("get", "configmaps"): 1,
        ("list", "configmaps"): 1,
    }
    assert [a.verb for a in kube.write_actions()] == ["create"]


def test_reactions_fail_conflict_and_script_newest_first() -> None:
    kube = FakeKube()
    kube.create(CONFIGMAPS, "demo", cm("a"))
    kube.prepend_reactor("patch", "configmaps", fail(errors.internal_error(), times=1, after=1))
    kube.patch(CONFIGMAPS, "demo", "a", {"data": {"k": "1"}})
    with pytest.raises(ApiError) as caught:
        kube.patch(CONFIGMAPS, "demo", "a", {"data": {"k": "2"}})
    assert caught.value.is_server_error
    kube.patch(CONFIGMAPS, "demo", "a", {"data": {"k": "3"}})
    kube.prepend_reactor("*", "*", conflict_on(2))
    kube.get(CONFIGMAPS, "demo", "a")  # reads are not counted
    kube.patch(CONFIGMAPS, "demo", "a", {"data": {"k": "4"}})
    with pytest.raises(ApiError) as conflict:
        kube.patch(CONFIGMAPS, "demo", "a", {"data": {"k": "5"}})
    assert conflict.value.is_conflict
    script = kube.prepend_reactor(
        "get", "configmaps", Script({"answer": 1}, errors.not_found(CONFIGMAPS, "a"), Script.PASS)
    )
    assert kube.get(CONFIGMAPS, "demo", "a") == {"answer": 1}
    with pytest.raises(ApiError):
        kube.get(CONFIGMAPS, "demo", "a")
    assert kube.get(CONFIGMAPS, "demo", "a")["data"] == {"k": "4"}
    assert isinstance(script, Script)
    assert script.left == 0
    only_b = fail(
        lambda a: errors.invalid("ConfigMap", a.name or "", [("data", "bad")]),
        when=lambda a: a.name == "b",
    )
    kube.prepend_reactor("create", "configmaps", only_b)
    with pytest.raises(ApiError) as invalid:
        kube.create(CONFIGMAPS, "demo", cm("b"))
    assert invalid.value.message == 'ConfigMap "b" is invalid: data: bad'
    kube.create(CONFIGMAPS, "demo", cm("c"))


def test_delay_and_stall_wait_on_the_fake_clock() -> None:
    clock = FakeClock(0.0)
    kube = FakeKube()
    kube.tracker.add(CONFIGMAPS, cm("a"))
    kube.prepend_reactor("get", "configmaps", delay(clock, 5.0))
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.append(kube.get(CONFIGMAPS, "demo", "a")))
    reader.start()
    assert clock.wait_for_waiter()
    assert not got
    clock.step(5.0)
    reader.join(5)
    assert got
    assert got[0]["metadata"]["name"] == "a"

    stall = Stall(clock, timeout=30.0)
    kube.prepend_reactor("list", "configmaps", stall)
    failures: list[BaseException] = []

    def lister() -> None:
        try:
            kube.list(CONFIGMAPS)
        except ConnectionFailed as exc:
            failures.append(exc)

    t = threading.Thread(target=lister)
    t.start()
    assert stall.wait_stalled(1)
    clock.step(30.0)
    t.join(5)
    assert failures
    assert isinstance(failures[0], ConnectionFailed)
    assert failures[0].timed_out
    stall.release()
    assert names(kube.list(CONFIGMAPS)) == ["a"]


def test_a_fenced_view_refuses_writes_but_reads() -> None:
    kube = FakeKube()
    held = [True]
    fenced = kube.with_fence(lambda: held[0])
    fenced.create(CONFIGMAPS, "demo", cm("a"))
    held[0] = False
    with pytest.raises(LeaseNotHeld):
        fenced.patch(CONFIGMAPS, "demo", "a", {"data": {"k": "1"}})
    assert fenced.get(CONFIGMAPS, "demo", "a")["data"] == {}
    assert [a.verb for a in kube.actions] == ["create", "get"]
    assert [a.verb for a in kube.refused] == ["patch"]


def test_wait_for_actions_and_raw_requests() -> None:
    kube = FakeKube()
    threading.Thread(
        target=lambda: kube.tracker.add(CONFIGMAPS, cm("a")) and kube.get(CONFIGMAPS, "demo", "a")
    ).start()
    kube.wait_for_actions(lambda actions: any(a.verb == "get" for a in actions))
    with pytest.raises(TimeoutError):
        kube.wait_for_actions(5, timeout=0.01)
    kube.prepend_reactor("create", "tokenreviews", lambda a: {"status": {"authenticated": True}})
    answer = kube.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body={})
    assert answer == {"status": {"authenticated": True}}
    assert kube.actions[-1] == Action(
        "create",
        "tokenreviews",
        body={},
        options={
            "method": "POST",
            "path": "/apis/authentication.k8s.io/v1/tokenreviews",
            "query": {},
        },
    )
    with pytest.raises(ApiError) as missing:
        kube.request("GET", "/version")
    assert missing.value.is_not_found


def test_cache_lister_and_fake_recorder() -> None:
    tracker = ObjectTracker()
    tracker.add(CONFIGMAPS, cm("a"))
    lister = CacheLister().sync(tracker, CONFIGMAPS)
    assert lister.get("demo", "a") is not None
    tracker.add(CONFIGMAPS, cm("b"))
    assert lister.get("demo", "b") is None  # the cache lags until synced
    lister.add(cm("c"))
    assert sorted(o["metadata"]["name"] for o in lister.list("demo")) == ["a", "c"]
    recorder = FakeRecorder()
    recorder.event({"kind": "ConfigBundle", "metadata": {"name": "b"}}, "Warning", "Bad", "why")
    assert recorder.events == ["Warning Bad why"]
    assert recorder.reasons == ["Bad"]


# ---------------------------------------------------------------- real informers


def test_real_informers_sync_follow_and_survive_a_410() -> None:
    clock = FakeClock(1000.0)
    kube = FakeKube()
    kube.tracker.add(CONFIGMAPS, cm("a", k="1"))
    factory = SharedInformerFactory(kube, namespaces=["demo"], resync_period=0, clock=clock)
    seen: list[tuple[str, str]] = []
    lock = threading.Condition()

    def note(kind: str) -> Any:
        def handler(*objs: Any) -> None:
            last = objs[-1]
            name = last["metadata"]["name"] if isinstance(last, dict) else last.key.split("/")[-1]
            with lock:
                seen.append((kind, name))
                lock.notify_all()

        return handler

    informer = factory.informers_for(CONFIGMAPS)["demo"]
    informer.add_event_handler(
        FuncHandler(on_add=note("add"), on_update=note("update"), on_delete=note("delete"))
    )
    try:
        factory.start()
        assert factory.wait_for_cache_sync(5.0)
        kube.wait_watching("configmaps", "demo")
        kube.tracker.put(CONFIGMAPS, cm("a", k="2"))
        with lock:
            assert lock.wait_for(lambda: ("update", "a") in seen, 5)
        # The watch breaks with 410; meanwhile b comes and a goes: the informer relists
        # and delivers both, the deletion it missed included.
        kube.tracker.compact()
        kube.tracker.add(CONFIGMAPS, cm("b"))
        kube.tracker.remove(CONFIGMAPS, "demo", "a")
        assert clock.wait_for_waiter()  # the relist backoff, on the fake clock
        clock.step(31.0)
        kube.wait_for_actions(lambda acts: sum(a.verb == "list" for a in acts) >= 2)
        with lock:
            assert lock.wait_for(lambda: {("add", "b"), ("delete", "a")} <= set(seen), 5), seen
        lister = factory.lister(CONFIGMAPS)
        assert lister.get("demo", "b") is not None
        assert lister.get("demo", "a") is None
        kube.wait_watching("configmaps", "demo", count=2)
    finally:
        factory.shutdown()
