from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from cbop.informers import (
    BY_NAMESPACE,
    CONTROLLER_UID_INDEX,
    CacheMutationError,
    DeletedFinalStateUnknown,
    Indexer,
    Lister,
    MultiNamespaceLister,
    index_by_controller_uid,
    index_by_label,
    meta_namespace_key,
    split_key,
)


def obj(
    name: str,
    ns: str | None = "default",
    *,
    labels: dict[str, str] | None = None,
    owner: str | None = None,
    rv: str = "1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv}
    if ns is not None:
        meta["namespace"] = ns
    if labels is not None:
        meta["labels"] = labels
    if owner is not None:
        meta["ownerReferences"] = [
            {"kind": "Other", "name": "x", "uid": "not-controller"},
            {"kind": "ConfigBundle", "name": "b", "uid": owner, "controller": True},
        ]
    return {"metadata": meta, "data": {"k": "v"}}


def test_keys() -> None:
    assert meta_namespace_key(obj("a", "ns")) == "ns/a"
    assert meta_namespace_key(obj("node-1", None)) == "node-1"
    assert meta_namespace_key(DeletedFinalStateUnknown("ns/a", obj("a", "ns"))) == "ns/a"
    assert split_key("ns/a") == ("ns", "a")
    assert split_key("a") == (None, "a")
    with pytest.raises(ValueError, match="name"):
        meta_namespace_key({"metadata": {}})
    with pytest.raises(ValueError, match="metadata"):
        meta_namespace_key({})
    for bad in ("", "a/b/c", "/a", "a/"):
        with pytest.raises(ValueError, match="unexpected"):
            split_key(bad)


def test_add_update_delete_and_namespace_index() -> None:
    idx = Indexer()
    assert idx.update(obj("a", "ns1")) is None
    idx.add(obj("b", "ns1"))
    idx.add(obj("c", "ns2"))
    assert sorted(idx.list_keys()) == ["ns1/a", "ns1/b", "ns2/c"]
    assert [meta_namespace_key(o) for o in idx.by_index(BY_NAMESPACE, "ns1")] == ["ns1/a", "ns1/b"]
    assert idx.list_index_values(BY_NAMESPACE) == ["ns1", "ns2"]

    # Moving an object between index values (here: an update) re-files it.
    first = idx.get("ns1", "a")
    newer = obj("a", "ns1", rv="2")
    assert idx.update(newer) is first
    assert idx.get_by_key("ns1/a") is newer

    assert idx.delete("ns1/b") is not None
    assert idx.delete(DeletedFinalStateUnknown("ns2/c", obj("c", "ns2"))) is not None
    assert idx.delete(obj("zzz", "ns1")) is None
    assert idx.list_keys() == ["ns1/a"]
    assert idx.list_index_values(BY_NAMESPACE) == ["ns1"]
    assert idx.by_index(BY_NAMESPACE, "ns2") == []
    assert len(idx) == 1
    assert "ns1/a" in idx


def test_custom_indexes_follow_updates() -> None:
    idx = Indexer({CONTROLLER_UID_INDEX: index_by_controller_uid, "by-app": index_by_label("app")})
    idx.add(obj("a", owner="uid-1", labels={"app": "x"}))
    idx.add(obj("b", owner="uid-1", labels={"app": "y"}))
    idx.add(obj("c", labels={"app": "x"}))
    assert [o["metadata"]["name"] for o in idx.by_index(CONTROLLER_UID_INDEX, "uid-1")] == [
        "a",
        "b",
    ]
    # Only the controller reference counts.
    assert idx.by_index(CONTROLLER_UID_INDEX, "not-controller") == []
    assert idx.index_keys("by-app", "x") == ["default/a", "default/c"]

    # The owner reference is removed: the object leaves the index value.
    idx.update(obj("a", labels={"app": "y"}))
    assert idx.index_keys(CONTROLLER_UID_INDEX, "uid-1") == ["default/b"]
    assert idx.index_keys("by-app", "y") == ["default/a", "default/b"]
    assert idx.index_keys("by-app", "x") == ["default/c"]
    with pytest.raises(KeyError):
        idx.by_index("nope", "x")
    with pytest.raises(ValueError, match="already defined"):
        Indexer({BY_NAMESPACE: index_by_controller_uid})


def test_add_indexers_indexes_existing_objects() -> None:
    idx = Indexer()
    idx.add(obj("a", owner="u"))
    idx.add_indexers({CONTROLLER_UID_INDEX: index_by_controller_uid})
    assert idx.index_keys(CONTROLLER_UID_INDEX, "u") == ["default/a"]
    idx.delete("default/a")
    assert idx.index_keys(CONTROLLER_UID_INDEX, "u") == []


def test_broken_index_function_does_not_break_the_cache() -> None:
    def broken(o: Mapping[str, Any]) -> list[str]:
        raise RuntimeError("boom")

    idx = Indexer({"broken": broken})
    idx.add(obj("a"))
    assert idx.get("default", "a") is not None
    assert idx.list_index_values("broken") == []


def test_replace_rebuilds_content_and_indexes() -> None:
    idx = Indexer({CONTROLLER_UID_INDEX: index_by_controller_uid})
    idx.add(obj("old", "ns", owner="u"))
    idx.replace([obj("a", "ns1"), obj("b", "ns2", owner="u")], "42")
    assert sorted(idx.list_keys()) == ["ns1/a", "ns2/b"]
    assert idx.resource_version == "42"
    assert idx.index_keys(CONTROLLER_UID_INDEX, "u") == ["ns2/b"]
    assert idx.list_index_values(BY_NAMESPACE) == ["ns1", "ns2"]


def test_lister_views() -> None:
    idx = Indexer({CONTROLLER_UID_INDEX: index_by_controller_uid})
    a = obj("a", "ns1", labels={"app": "x", "tier": "web"}, owner="u")
    idx.add(a)
    idx.add(obj("b", "ns1", labels={"app": "y"}))
    idx.add(obj("c", "ns2", labels={"app": "x"}))
    idx.add(obj("cluster-thing", None))
    lister = Lister(idx)
    assert lister.get("ns1", "a") is a  # shared, not copied
    assert lister.get("ns1", "missing") is None
    assert lister.get(None, "cluster-thing") is not None
    assert len(lister.list()) == 4
    assert sorted(o["metadata"]["name"] for o in lister.list("ns1")) == ["a", "b"]
    assert sorted(o["metadata"]["name"] for o in lister.list(label_selector={"app": "x"})) == [
        "a",
        "c",
    ]
    assert [o["metadata"]["name"] for o in lister.list("ns1", {"app": "x", "tier": "web"})] == ["a"]
    assert lister.list("ns1", {"app": "x", "tier": "db"}) == []
    assert lister.by_index(CONTROLLER_UID_INDEX, "u") == [a]
    assert len(lister) == 4


def test_mutation_detector_names_mutated_objects() -> None:
    idx = Indexer(detect_mutations=True)
    a = obj("a")
    idx.add(a)
    idx.add(obj("b"))
    idx.check_mutations()  # nothing mutated yet

    # The right way: copy, then change.
    changed = copy.deepcopy(idx.get("default", "b"))
    assert changed is not None
    changed["data"]["k"] = "other"
    idx.check_mutations()

    # The wrong way: change the cached object in place.
    cached = idx.get("default", "a")
    assert cached is a
    a["data"]["k"] = "mutated"
    with pytest.raises(CacheMutationError, match="default/a"):
        idx.check_mutations()


def test_mutation_detector_remembers_objects_that_left_the_cache() -> None:
    idx = Indexer(detect_mutations=True)
    a = obj("a")
    idx.add(a)
    a["metadata"]["labels"] = {"sneaky": "yes"}
    idx.delete("default/a")  # the mutated object is gone, but the violation is kept
    with pytest.raises(CacheMutationError, match="default/a"):
        idx.check_mutations()


def test_mutation_detector_is_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CBOP_CACHE_MUTATION_DETECTOR", raising=False)
    idx = Indexer()
    a = obj("a")
    idx.add(a)
    a["data"]["k"] = "mutated"
    idx.check_mutations()
    monkeypatch.setenv("CBOP_CACHE_MUTATION_DETECTOR", "true")
    idx2 = Indexer()
    b = obj("b")
    idx2.add(b)
    b["data"]["k"] = "mutated"
    with pytest.raises(CacheMutationError):
        idx2.check_mutations()


def test_concurrent_writers_and_readers_keep_indexes_consistent() -> None:
    idx = Indexer({CONTROLLER_UID_INDEX: index_by_controller_uid})
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(300):
                idx.update(obj(f"o{i}", f"ns{w}", owner=f"u{i % 3}"))
                if i % 4 == 0:
                    idx.delete(f"ns{w}/o{i}")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(300):
                for o in idx.by_index(CONTROLLER_UID_INDEX, "u1"):
                    assert o["metadata"]["ownerReferences"][1]["uid"] == "u1"
                idx.list()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(idx) == 4 * 225
    total = sum(len(idx.index_keys(CONTROLLER_UID_INDEX, f"u{u}")) for u in range(3))
    assert total == len(idx)
    assert sum(len(idx.index_keys(BY_NAMESPACE, f"ns{w}")) for w in range(4)) == len(idx)


def test_staging_is_swapped_in_at_once() -> None:
    idx = Indexer({CONTROLLER_UID_INDEX: index_by_controller_uid})
    old_a = obj("a", "ns1")
    idx.add(old_a)
    idx.add(obj("gone", "ns1"))
    staging = idx.staging()
    staging.add("ns1/a", obj("a", "ns1", rv="2", owner="u"))
    staging.add("ns2/b", obj("b", "ns2", owner="u"))
    staging.add("ns2/b", obj("b", "ns2", rv="3"))  # a later duplicate wins
    # Nothing is visible before the swap.
    assert sorted(idx.list_keys()) == ["ns1/a", "ns1/gone"]
    previous = idx.swap_in(staging, "99")
    assert previous == {"ns1/a": old_a, "ns1/gone": obj("gone", "ns1")}
    assert sorted(idx.list_keys()) == ["ns1/a", "ns2/b"]
    assert idx.resource_version == "99"
    assert idx.index_keys(CONTROLLER_UID_INDEX, "u") == ["ns1/a"]
    assert idx.list_index_values(BY_NAMESPACE) == ["ns1", "ns2"]
    with pytest.raises(RuntimeError, match="swapped"):
        staging.add("ns3/c", obj("c", "ns3"))


def test_staging_survives_indexes_added_meanwhile() -> None:
    idx = Indexer()
    staging = idx.staging()
    staging.add("ns/a", obj("a", "ns", owner="u"))
    idx.add_indexers({CONTROLLER_UID_INDEX: index_by_controller_uid})
    idx.swap_in(staging, "5")
    assert idx.index_keys(CONTROLLER_UID_INDEX, "u") == ["ns/a"]
    assert idx.index_keys(BY_NAMESPACE, "ns") == ["ns/a"]
    assert idx.resource_version == "5"


def test_index_counts_and_keys_follow_the_index_in_every_view() -> None:
    per_ns = {
        ns: Indexer({"by-app": index_by_label("app")}, detect_mutations=False)
        for ns in ("ns1", "ns2")
    }
    for i in range(3):
        per_ns["ns1"].add(obj(f"a{i}", "ns1", labels={"app": "x"}))
    per_ns["ns2"].add(obj("b", "ns2", labels={"app": "x"}))
    one = Lister(per_ns["ns1"])
    assert one.index_count("by-app", "x") == 3
    assert one.index_keys("by-app", "x") == ["ns1/a0", "ns1/a1", "ns1/a2"]
    assert one.index_count("by-app", "nothing") == 0
    # An update that changes the value and a delete leave the count.
    per_ns["ns1"].update(obj("a0", "ns1", labels={"app": "y"}))
    per_ns["ns1"].delete("ns1/a1")
    assert one.index_count("by-app", "x") == 1
    assert one.index_count("by-app", "y") == 1
    views = MultiNamespaceLister({ns: Lister(idx) for ns, idx in per_ns.items()})
    assert views.index_count("by-app", "x") == 2
    assert sorted(views.index_keys("by-app", "x")) == ["ns1/a2", "ns2/b"]
    with pytest.raises(KeyError):
        one.index_count("nope", "x")
