"""Sharded informers: the shard selector they send and the client-side filter decision.

The server side (what kube-apiserver 1.36 does with ``shardSelector``) is covered on the
real control plane by tests/e2e/test_sharded_informers.py; here a scripted list/watch fake
and a FakeClock pin the decisions: which calls carry the selector, when the server is
trusted, which objects enter the cache, what a 400 does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from cbop.informers import SharedInformerFactory
from cbop.informers.shardfilter import ShardFilter
from cbop.kube import CONFIGMAPS, ApiError
from cbop.shardrange import ShardRange, shard_of
from cbop_testing.fakekube import FakeWatch
from cbop_testing.informerharness import Harness, ScriptedListWatch
from cbop_testing.objects import bookmark, cm, ev, page
from cbop_testing.waiting import wait_until

SHARD = ShardRange.of(1, 3)


def _namespaces_of(index: int, count: int = 3, n: int = 2) -> list[str]:
    """``n`` namespace names that hash into shard ``index`` of ``count``."""
    found = [f"team-{i}-x" for i in range(10_000) if shard_of(f"team-{i}-x", count) == index]
    return found[:n]


MINE, MINE2 = _namespaces_of(1)
OTHER, OTHER2 = _namespaces_of(0)[0], _namespaces_of(2)[0]


def echoed(
    *items: dict[str, Any], rv: str, cont: str | None = None, shard: ShardRange = SHARD
) -> dict[str, Any]:
    """A list page as a built-in resource's answer with the gate on: ``shardInfo`` set."""
    answer = page(*items, rv=rv, cont=cont)
    answer["metadata"]["shardInfo"] = {"selector": shard.selector()}
    return answer


@pytest.fixture
def sharded() -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(**kwargs: Any) -> Harness:
        kwargs.setdefault("shard", SHARD)
        h = Harness(**kwargs)
        made.append(h)
        return h

    yield make
    for h in made:
        h.stop()


# ------------------------------------------------------------------ the pure decision


@pytest.mark.parametrize("shard", [None, ShardRange.of(0, 1)])
def test_an_unsharded_filter_sends_nothing_and_keeps_everything(shard: ShardRange | None) -> None:
    f = ShardFilter(shard, name="t")
    assert not f.active
    assert f.argument() == {}
    assert f.keep(cm("a", "1", ns=OTHER))
    f.list_answered({"resourceVersion": "1"}, 1)
    assert f.server_side is None
    assert f.rejected(400) is False


def test_a_list_answer_with_shard_info_means_the_server_filters() -> None:
    f = ShardFilter(SHARD, name="t")
    assert f.argument() == {"shard_selector": SHARD.selector()}
    assert f.server_side is None
    f.list_started()
    with capture_logs() as logs:
        f.list_answered({"shardInfo": {"selector": SHARD.selector()}}, 0)
    assert f.server_side is True
    assert [(e["event"], e["mode"]) for e in logs] == [("shard filtering", "server-side")]


def test_a_list_answer_without_shard_info_switches_to_client_side_and_logs_it_once() -> None:
    f = ShardFilter(SHARD, name="t")
    f.list_started()
    kept = [f.keep(cm("a", "1", ns=ns)) for ns in (MINE, OTHER, OTHER2, MINE2)]
    assert kept == [True, False, False, True]
    with capture_logs() as logs:
        f.list_answered({"resourceVersion": "9"}, 4)
        f.list_started()
        f.keep(cm("b", "2", ns=OTHER))
        f.list_answered({"resourceVersion": "10"}, 1)
    assert f.server_side is False
    assert f.dropped == 3
    assert len(logs) == 1, logs
    assert logs[0]["mode"] == "client-side"
    assert "ignored shardSelector (2 of 4 listed objects" in logs[0]["reason"]
    # The selector is still sent: the server may honour it after a restart.
    assert f.argument() == {"shard_selector": SHARD.selector()}


def test_no_shard_info_and_nothing_foreign_is_still_checked_client_side() -> None:
    # Custom resource lists on 1.36 are filtered without shardInfo: nothing says so.
    f = ShardFilter(SHARD, name="t")
    f.list_started()
    assert f.keep(cm("a", "1", ns=MINE))
    with capture_logs() as logs:
        f.list_answered({"resourceVersion": "3"}, 1)
    assert f.server_side is False
    assert "none of its 1 objects is in another shard" in logs[0]["reason"]


def test_a_400_drops_the_selector_other_errors_do_not() -> None:
    f = ShardFilter(SHARD, name="t")
    for status in (0, 403, 404, 410, 429, 500, 503):
        assert f.rejected(status) is False
    assert f.argument() == {"shard_selector": SHARD.selector()}
    assert f.rejected(400) is True
    assert f.argument() == {}
    assert f.server_side is False
    assert f.rejected(400) is False  # already dropped: an ordinary failure now
    assert f.keep(cm("a", "1", ns=MINE))
    assert not f.keep(cm("a", "1", ns=OTHER))


def test_a_foreign_watch_event_in_server_mode_switches_to_client_side() -> None:
    f = ShardFilter(SHARD, name="t")
    f.list_started()
    f.list_answered({"shardInfo": {"selector": SHARD.selector()}}, 0)
    obj = cm("a", "1", ns=OTHER)
    assert not f.keep(obj)
    with capture_logs() as logs:
        f.watch_dropped(obj)
    assert f.server_side is False
    assert logs[0]["log_level"] == "warning"
    assert OTHER in logs[0]["reason"]


def test_cluster_scoped_objects_hash_the_empty_namespace() -> None:
    home = ShardRange.of(shard_of("", 3), 3)
    away = ShardRange.of((home.index + 1) % 3, 3)
    obj = {"metadata": {"name": "n"}}
    assert ShardFilter(home, name="t").keep(obj)
    assert not ShardFilter(away, name="t").keep(obj)


# ------------------------------------------------------------------ the informer


def test_every_list_page_and_watch_carries_the_selector(
    sharded: Callable[..., Harness],
) -> None:
    h = sharded(page_size=1)
    h.fake.list_answers.put(echoed(cm("a", "1", ns=MINE), rv="30", cont="tok"))
    h.fake.list_answers.put(echoed(cm("b", "2", ns=MINE2), rv="30"))
    h.fake.watch_answers.put(FakeWatch())
    h.informer.start()
    h.fake.wait_watches(1)
    assert [(c["continue_"], c["shard_selector"]) for c in h.fake.lists] == [
        (None, SHARD.selector()),
        ("tok", SHARD.selector()),
    ]
    assert h.fake.watches[0]["shard_selector"] == SHARD.selector()
    assert h.informer.server_side_sharding is True
    wait_until(h.informer.has_synced)
    assert h.informer.object_count() == 2
    assert h.informer.shard_dropped == 0


def test_an_unsharded_informer_sends_no_selector(sharded: Callable[..., Harness]) -> None:
    h = sharded(shard=None)
    h.start(cm("a", "1", ns=OTHER))
    h.rec.wait(1)
    assert "shard_selector" not in h.fake.lists[0]
    assert "shard_selector" not in h.fake.watches[0]
    assert h.informer.server_side_sharding is None


def test_an_ignored_selector_is_filtered_client_side_on_list_and_watch(
    sharded: Callable[..., Harness],
) -> None:
    h = sharded()
    assert h.informer.server_side_sharding is None
    stream = h.start(
        cm("a", "5", ns=MINE), cm("b", "6", ns=OTHER), cm("c", "7", ns=OTHER2), rv="10"
    )
    assert h.rec.wait(1) == [("add", f"{MINE}/a", "5")]
    assert h.informer.server_side_sharding is False
    stream.push(
        ev("ADDED", cm("d", "11", ns=OTHER)),
        ev("ADDED", cm("e", "12", ns=MINE2)),
        ev("MODIFIED", cm("b", "13", ns=OTHER)),
        ev("DELETED", cm("a", "14", ns=MINE)),
        ev("DELETED", cm("c", "15", ns=OTHER2)),
        bookmark("16"),
    )
    assert h.rec.wait(3) == [
        ("add", f"{MINE}/a", "5"),
        ("add", f"{MINE2}/e", "12"),
        ("delete", f"{MINE}/a", "14"),
    ]
    wait_until(lambda: h.informer.last_sync_resource_version() == "16")
    assert sorted(h.informer.lister().list_keys()) == [f"{MINE2}/e"]
    assert h.informer.object_count() == 1
    assert h.informer.shard_dropped == 5
    assert len(h.rec.events) == 3


def test_a_dropped_event_still_advances_the_resource_version(
    sharded: Callable[..., Harness],
) -> None:
    h = sharded()
    stream = h.start(rv="10")
    stream.push(ev("ADDED", cm("d", "11", ns=OTHER)))
    wait_until(lambda: h.informer.last_sync_resource_version() == "11")
    assert h.informer.object_count() == 0


def test_a_400_to_the_list_relists_at_once_without_the_selector(
    sharded: Callable[..., Harness],
) -> None:
    h = sharded()
    h.fake.list_answers.put(ApiError(400, "BadRequest", "unknown parameter shardSelector"))
    h.fake.list_answers.put(page(cm("a", "5", ns=MINE), cm("b", "6", ns=OTHER), rv="10"))
    h.fake.watch_answers.put(FakeWatch())
    h.informer.start()
    h.fake.wait_watches(1)
    # No backoff: the FakeClock never moved, yet the second list and the watch happened.
    assert h.clock.now() == 1000.0
    assert h.fake.lists[0]["shard_selector"] == SHARD.selector()
    assert "shard_selector" not in h.fake.lists[1]
    assert "shard_selector" not in h.fake.watches[0]
    assert h.rec.wait(1) == [("add", f"{MINE}/a", "5")]
    assert h.informer.server_side_sharding is False
    assert h.informer.problem() is None


def test_a_400_to_the_watch_relists_without_the_selector(
    sharded: Callable[..., Harness],
) -> None:
    h = sharded()
    h.fake.list_answers.put(page(cm("a", "5", ns=MINE), rv="10"))
    h.fake.watch_answers.put(ApiError(400, "BadRequest", "unknown parameter shardSelector"))
    h.fake.list_answers.put(page(cm("c", "11", ns=MINE), cm("b", "6", ns=OTHER), rv="12"))
    h.fake.watch_answers.put(FakeWatch())
    h.informer.start()
    h.fake.wait_watches(2)
    assert [("shard_selector" in c) for c in h.fake.lists] == [True, False]
    assert [("shard_selector" in w) for w in h.fake.watches] == [True, False]
    assert h.fake.watches[1]["resource_version"] == "12"
    # The relist replaces the cache on the informer thread: wait until it did; the
    # object of the other shard must not come with it.
    wait_until(lambda: f"{MINE}/c" in h.informer.lister().list_keys())
    assert sorted(h.informer.lister().list_keys()) == [f"{MINE}/c"]


def test_other_list_errors_keep_the_selector(sharded: Callable[..., Harness]) -> None:
    h = sharded()
    h.fake.list_answers.put(ApiError(503, "ServiceUnavailable"))
    h.fake.list_answers.put(echoed(cm("a", "5", ns=MINE), rv="10"))
    h.fake.watch_answers.put(FakeWatch())
    h.informer.start()
    h.fake.wait_lists(1)
    assert h.clock.wait_for_waiter()
    h.clock.step(0.8)
    h.fake.wait_watches(1)
    assert [c["shard_selector"] for c in h.fake.lists] == [SHARD.selector()] * 2
    assert h.informer.server_side_sharding is True


def test_the_factory_shards_every_informer_it_makes() -> None:
    fake = ScriptedListWatch()
    factory = SharedInformerFactory(fake, resync_period=0, shard=ShardRange.of(2, 3))
    informer = factory.informers_for(CONFIGMAPS)[None]
    labelled = factory.informers_for(CONFIGMAPS, label_selector="a=b")[None]
    assert factory.shard == ShardRange.of(2, 3)
    assert informer.name == "configmaps/* shard 2/3"
    assert labelled.name == "configmaps/*[a=b] shard 2/3"
    fake.list_answers.put(echoed(cm("a", "1", ns=OTHER2), rv="5", shard=ShardRange.of(2, 3)))
    fake.watch_answers.put(FakeWatch())
    informer.start()
    try:
        fake.wait_watches(1)
        assert fake.lists[0]["shard_selector"] == ShardRange.of(2, 3).selector()
        assert fake.watches[0]["shard_selector"] == ShardRange.of(2, 3).selector()
        wait_until(informer.has_synced)
        assert informer.server_side_sharding is True
        assert informer.object_count() == 1
        assert factory.object_counts() == {"configmaps": 1}  # the labelled one is not running
    finally:
        informer.stop()
    whole = SharedInformerFactory(fake, resync_period=0, shard=ShardRange.of(0, 1))
    assert whole.shard is None
    assert whole.informers_for(CONFIGMAPS)[None].name == "configmaps/*"


def test_a_range_by_name_sends_no_selector_and_keeps_the_objects_of_its_names() -> None:
    """A shard's slice of the Namespaces: keyed by the object's own name (the server has
    no selector for that), with the same FNV-1a range as the namespace shard key."""
    shard = ShardRange.of(0, 2).by_object_name()
    assert shard.by_name
    assert shard == dataclasses.replace(ShardRange.of(0, 2), by_name=True)
    names = [f"{i}-team" for i in range(20)]
    mine = [n for n in names if ShardRange.of(0, 2).contains(n)]
    assert mine
    assert len(mine) < len(names)
    filt = ShardFilter(shard, name="namespaces")
    assert filt.active
    assert filt.selector is None
    assert filt.argument() == {}
    kept = [n for n in names if filt.keep({"metadata": {"name": n}})]
    assert kept == mine
    assert filt.dropped == len(names) - len(mine)
    with capture_logs() as logs:
        filt.list_answered({}, len(names))
    assert filt.server_side is False
    assert any("by object name" in str(e.get("reason", "")) for e in logs), logs
