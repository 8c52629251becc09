"""The shared informer factory: one informer per resource, scope and selector.

Real informers against a fake API (one collection per resource and namespace) and a
fake clock; no server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from cbop.informers import SharedInformerFactory, index_by_controller_uid, index_by_label
from cbop.keys import CONTROLLER_UID_INDEX
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, NAMESPACES, ApiError, ConnectionFailed
from cbop.shardrange import ShardRange
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import FakeKube, fail
from cbop_testing.objects import cm
from cbop_testing.waiting import wait_until


@pytest.fixture
def api() -> FakeKube:
    return FakeKube()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
def factory(api: FakeKube, clock: FakeClock) -> Iterator[SharedInformerFactory]:
    made = SharedInformerFactory(api, namespaces=["a", "b"], resync_period=0, clock=clock)
    yield made
    made.shutdown()


def _owned(name: str, ns: str, owner_uid: str) -> dict[str, Any]:
    obj = cm(name, "1", ns)
    obj["metadata"]["ownerReferences"] = [{"uid": owner_uid, "controller": True}]
    return obj


def test_the_same_resource_scope_and_selector_share_one_informer(
    factory: SharedInformerFactory, api: FakeKube
) -> None:
    first = factory.informers_for(CONFIGMAPS, label_selector="app=x")
    again = factory.informers_for(CONFIGMAPS, label_selector="app=x")
    other = factory.informers_for(CONFIGMAPS)
    assert list(first) == ["a", "b"]
    assert all(first[ns] is again[ns] for ns in ("a", "b"))
    assert all(first[ns] is not other[ns] for ns in ("a", "b"))
    assert [i.name for i in factory.informers] == [
        "configmaps/a",
        "configmaps/b",
        "configmaps/a[]",
        "configmaps/b[]",
    ]
    factory.start()
    assert factory.wait_for_cache_sync(5.0)
    # One list per informer, not per caller.
    lists = [
        (a.resource, a.namespace, a.options["label_selector"])
        for a in api.actions
        if a.verb == "list"
    ]
    assert sorted(lists, key=str) == [
        ("configmaps", "a", "app=x"),
        ("configmaps", "a", None),
        ("configmaps", "b", "app=x"),
        ("configmaps", "b", None),
    ]


def test_an_unscoped_factory_has_one_cluster_wide_informer(api: FakeKube) -> None:
    factory = SharedInformerFactory(api, resync_period=0)
    assert list(factory.informers_for(CONFIGBUNDLES)) == [None]
    assert factory.informers[0].name == "configbundles/*"


def test_indexes_are_added_once_and_a_clash_is_refused(
    factory: SharedInformerFactory, api: FakeKube
) -> None:
    for obj in (_owned("x", "a", "u1"), _owned("y", "a", "u2"), _owned("z", "b", "u1")):
        api.tracker.add(CONFIGMAPS, obj)
    lister = factory.lister(CONFIGMAPS, indexers={CONTROLLER_UID_INDEX: index_by_controller_uid})
    same = factory.lister(CONFIGMAPS, indexers={CONTROLLER_UID_INDEX: index_by_controller_uid})
    with pytest.raises(ValueError, match="already defined with another function"):
        factory.lister(CONFIGMAPS, indexers={CONTROLLER_UID_INDEX: index_by_label("app")})
    factory.start()
    assert factory.wait_for_cache_sync(5.0)
    names = sorted(o["metadata"]["name"] for o in lister.by_index(CONTROLLER_UID_INDEX, "u1"))
    assert names == ["x", "z"]
    assert len(same.list()) == 3
    assert lister.get("b", "z") is same.get("b", "z")
    assert lister.get("c", "z") is None


def test_an_informer_requested_after_start_is_started_by_the_next_start(
    factory: SharedInformerFactory, api: FakeKube
) -> None:
    factory.informers_for(CONFIGBUNDLES)
    factory.start()
    assert factory.wait_for_cache_sync(5.0)
    configmaps = factory.informers_for(CONFIGMAPS)
    assert not any(informer.has_synced() for informer in configmaps.values())
    factory.start()  # starts only the new ones (a second start of one would raise)
    assert factory.wait_for_cache_sync(5.0)
    assert sum(a.verb == "list" for a in api.actions) == 4


def _forbidden(ns: str) -> ApiError:
    return ApiError(403, "Forbidden", f'configmaps is forbidden in "{ns}"')


def test_a_refused_list_ends_the_cache_sync_wait_at_once_unless_waited_out(
    factory: SharedInformerFactory, api: FakeKube, clock: FakeClock
) -> None:
    refusal_in_a = api.prepend_reactor(
        "list", "configmaps", fail(_forbidden("a"), when=lambda a: a.namespace == "a")
    )
    factory.informers_for(CONFIGBUNDLES)
    factory.informers_for(CONFIGMAPS)
    factory.start()
    wait_until(lambda: bool(factory.refusals()))
    (refusal,) = factory.refusals()
    assert refusal.message == (
        'forbidden to list configmaps in namespace "a" (403): configmaps is forbidden in "a"'
    )
    assert factory.wait_for_cache_sync(3600.0, poll=0.001) is False
    assert not factory.wait_for_cache_sync(0.0, poll=0.001), "no refusal wait-out: a timeout"
    checks = factory.readiness_checks()
    assert checks["informer configmaps/a"]() == refusal.message
    # The others are not held back by the refusal (the wait above ended before they
    # had necessarily synced).
    wait_until(lambda: checks["informer configbundles/b"]() is None)
    # Waited out (the long-running operator): a refusal restarts the timeout, so the
    # wait outlives its 0 s until stopped.
    stop = threading.Event()
    waited: list[bool] = []
    waiter = threading.Thread(
        target=lambda: waited.append(
            factory.wait_for_cache_sync(0.0, stop=stop, wait_out_refusals=True, poll=0.001)
        )
    )
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()
    stop.set()
    waiter.join(5)
    assert waited == [False]
    # The RBAC is applied; the informer's next attempt (after its backoff) lists.
    api.remove_reactor(refusal_in_a)
    assert clock.wait_for_waiter()
    clock.step(60.0)
    # The refusal stands until that list has been answered (the informer's thread, woken
    # by the step, may not have sent it yet); a wait begun before would end at once.
    wait_until(lambda: not factory.refusals())
    assert factory.wait_for_cache_sync(5.0, poll=0.001) is True
    assert factory.refusals() == []
    assert checks["informer configmaps/a"]() is None


def test_readiness_names_the_first_list_in_progress(api: FakeKube) -> None:
    factory = SharedInformerFactory(api, namespaces=["a"], resync_period=0)
    factory.informers_for(CONFIGMAPS)
    checks = factory.readiness_checks()
    assert list(checks) == ["informer configmaps/a"]
    assert checks["informer configmaps/a"]() == "the first list is in progress"


def test_readiness_ignores_a_brief_watch_failure_but_not_a_long_one(
    factory: SharedInformerFactory, api: FakeKube, clock: FakeClock
) -> None:
    """A watch that failed and is being re-established does not fail readiness; one that
    has been down longer than the informer's ``unhealthy_after`` does, naming the failure."""
    factory.informers_for(CONFIGMAPS)
    factory.start()
    assert factory.wait_for_cache_sync(5.0)
    wait_until(lambda: api.watching("configmaps", "a"))
    check = factory.readiness_checks()["informer configmaps/a"]
    api.prepend_reactor("watch", "configmaps", fail(ConnectionFailed("connection refused")))
    api.stream("configmaps", "a").push(ConnectionFailed("connection reset"))
    informer = factory.informers[0]
    wait_until(lambda: informer.problem() is not None)
    assert check() is None
    assert factory.connected()
    for _ in range(4):  # backoffs of 0.8, 1.6, 3.2, 6.4 s, and beyond the 60 s allowed
        assert clock.wait_for_waiter()
        clock.step(30.0)
    wait_until(lambda: not informer.healthy())
    message = check()
    assert message is not None
    assert "connection refused" in message
    assert not factory.connected()
    assert factory.connection_states()["configmaps/a"] is False


def test_a_sharded_factory_hands_out_whole_informers_apart(api: FakeKube, clock: FakeClock) -> None:
    """``whole=True``: the whole collection beside the shard's own informer, no shard in
    its name, left out of nothing but the shard's object counts (is_whole)."""
    shard = ShardRange.of(0, 2)
    names = [f"{i}-ns" for i in range(50)]  # names that differ early spread over shards
    mine = next(ns for ns in names if shard.contains(ns))
    other = next(ns for ns in names if not shard.contains(ns))
    api.tracker.add(CONFIGMAPS, cm("a", "1", ns=mine))
    api.tracker.add(CONFIGMAPS, cm("b", "1", ns=other))
    factory = SharedInformerFactory(api, resync_period=0, clock=clock, shard=shard)
    try:
        (sharded,) = factory.informers_for(CONFIGMAPS).values()
        (whole,) = factory.informers_for(CONFIGMAPS, whole=True).values()
        assert whole is not sharded
        assert factory.informers_for(CONFIGMAPS, whole=True)[None] is whole
        assert whole.name == "configmaps/*[]"
        assert sharded.name == "configmaps/* shard 0/2"
        assert (factory.is_whole(whole), factory.is_whole(sharded)) == (True, False)
        factory.start()
        assert factory.wait_for_cache_sync(5)
        everything = factory.lister(CONFIGMAPS, whole=True).list()
        assert sorted(o["metadata"]["namespace"] for o in everything) == sorted([mine, other])
        own = factory.lister(CONFIGMAPS).list()
        assert [o["metadata"]["namespace"] for o in own] == [mine]
    finally:
        factory.shutdown()
    # Unsharded, whole is the one informer.
    plain = SharedInformerFactory(api, resync_period=0, clock=clock)
    assert plain.informers_for(CONFIGMAPS, whole=True) == plain.informers_for(CONFIGMAPS)


def test_a_sharded_factory_hands_out_the_namespaces_of_its_names(
    api: FakeKube, clock: FakeClock
) -> None:
    shard = ShardRange.of(1, 2)
    names = [f"{i}-team" for i in range(20)]
    for name in names:
        api.tracker.add(NAMESPACES, {"metadata": {"name": name, "resourceVersion": "1"}})
    factory = SharedInformerFactory(api, resync_period=0, clock=clock, shard=shard)
    try:
        (own,) = factory.informers_for(NAMESPACES, by_name=True).values()
        assert own.name == "namespaces/* shard 1/2 by name"
        assert not factory.is_whole(own)
        factory.start()
        assert factory.wait_for_cache_sync(5)
        kept = sorted(
            n["metadata"]["name"] for n in factory.lister(NAMESPACES, by_name=True).list()
        )
        assert kept == sorted(n for n in names if shard.contains(n))
        assert 0 < len(kept) < len(names)
    finally:
        factory.shutdown()


def test_a_by_name_informer_is_the_whole_one_when_that_exists_already(
    api: FakeKube, clock: FakeClock
) -> None:
    """The status writer's shard reads every Namespace; its stamp work, asking for its
    own by name afterwards, gets that informer: one list and watch, not two."""
    shard = ShardRange.of(0, 2)
    factory = SharedInformerFactory(api, resync_period=0, clock=clock, shard=shard)
    (whole,) = factory.informers_for(NAMESPACES, whole=True).values()
    (own,) = factory.informers_for(NAMESPACES, by_name=True).values()
    assert own is whole
    assert [i.name for i in factory.informers] == ["namespaces/*"]
    # Asked for first, the by-name informer is one of its own.
    other = SharedInformerFactory(api, resync_period=0, clock=clock, shard=shard)
    (first,) = other.informers_for(NAMESPACES, by_name=True).values()
    (then,) = other.informers_for(NAMESPACES, whole=True).values()
    assert first is not then
