"""The pure shard balancing decision (cbop.sharding.assign), table-driven."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cbop.sharding.assign import Decision, ShardState, decide, target

FREE = ShardState()
RELEASED = ShardState("", False)


def held_by(holder: str) -> ShardState:
    return ShardState(holder, valid=True)


def expired(holder: str) -> ShardState:
    return ShardState(holder, valid=False)


@dataclass(frozen=True)
class Case:
    id: str
    identity: str
    members: tuple[str, ...]
    observed: tuple[ShardState, ...]
    held: tuple[int, ...]
    want: Decision


CASES = [
    Case("alone takes every free shard", "a", ("a",), (FREE,) * 3, (), Decision(3, (0, 1, 2))),
    Case("first of three takes the lowest free", "a", ("a", "b", "c"), (FREE,) * 3, (),
         Decision(1, (0,))),
    Case("last of three also goes for the lowest free (the Lease decides the race)",
         "c", ("a", "b", "c"), (FREE,) * 3, (), Decision(1, (0,))),
    Case("race lost: the shard now held by another live member is dropped for the next",
         "b", ("a", "b"), (held_by("a"), FREE, FREE), (), Decision(1, (1,))),
    Case("two members over three shards: rank 0 targets 2", "a", ("a", "b"),
         (FREE,) * 3, (), Decision(2, (0, 1))),
    Case("two members over three shards: rank 1 targets 1", "b", ("a", "b"),
         (held_by("a"), held_by("a"), FREE), (), Decision(1, (2,))),
    Case("at target: keep, nothing more", "b", ("a", "b", "c"),
         (held_by("a"), held_by("b"), FREE), (1,), Decision(1, (1,))),
    Case("above target: release the highest held, keep the rest", "a", ("a", "b", "c"),
         (held_by("a"),) * 3, (0, 1, 2), Decision(1, (0, 1), 2)),
    Case("far above target: still one release per tick", "a", ("a", "b", "c", "d"),
         (held_by("a"),) * 4, (0, 1, 2, 3), Decision(1, (0, 1, 2), 3)),
    Case("a fourth joiner ranked first makes the last one release", "c",
         ("0-new", "a", "b", "c"), (held_by("a"), held_by("b"), held_by("c")), (2,),
         Decision(0, (), 2)),
    Case("more replicas than shards: the extra targets 0 and waits", "d",
         ("a", "b", "c", "d"), (held_by("a"), held_by("b"), held_by("c")), (),
         Decision(0, ())),
    Case("more replicas than shards: an extra holding one releases it", "d",
         ("a", "b", "c", "d"), (held_by("a"), held_by("b"), held_by("d")), (2,),
         Decision(0, (), 2)),
    Case("a member with 0 shards and none free waits", "c", ("a", "b", "c"),
         (held_by("a"), held_by("a"), held_by("b")), (), Decision(1, ())),
    Case("a lost shard still naming me is not mine and not free until it expires", "a",
         ("a", "b"), (held_by("a"), held_by("b"), FREE), (), Decision(2, (2,))),
    Case("a lost shard whose record expired is free again", "a", ("a", "b"),
         (expired("a"), held_by("b"), FREE), (), Decision(2, (0, 2))),
    Case("a stale member's valid shard is not free (fenced by the shard Lease)", "a",
         ("a", "b"), (held_by("a"), held_by("b"), held_by("dead")), (0,),
         Decision(2, (0,))),
    Case("a stale member's expired shard is free", "a", ("a", "b"),
         (held_by("a"), held_by("b"), expired("dead")), (0,), Decision(2, (0, 2))),
    Case("a released shard (empty holder) is free", "b", ("a", "b"),
         (held_by("a"), RELEASED, held_by("a")), (), Decision(1, (1,))),
    Case("my own identity counts even when my membership is not listed", "b", ("a",),
         (held_by("a"), held_by("a"), held_by("a")), (), Decision(1, ())),
    Case("held is what my electors say, even when the listing lags", "b", ("a", "b"),
         (held_by("a"), held_by("a"), FREE), (1,), Decision(1, (1,))),
    Case("below target, lowest free first, skipping held ones", "a", ("a",),
         (held_by("b"), FREE, expired("b"), FREE), (3,), Decision(4, (1, 2, 3))),
    Case("one shard, two members: the second waits", "b", ("a", "b"), (held_by("a"),), (),
         Decision(0, ())),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decide(case: Case) -> None:
    got = decide(
        shards=len(case.observed),
        identity=case.identity,
        members=case.members,
        observed=case.observed,
        held=case.held,
    )
    assert got == case.want


@pytest.mark.parametrize("shards", [1, 2, 3, 5, 8, 16])
@pytest.mark.parametrize("members", [1, 2, 3, 4, 7, 20])
def test_targets_cover_every_shard_and_differ_by_at_most_one(shards: int, members: int) -> None:
    names = [f"replica-{i:02d}" for i in range(members)]
    targets = [target(shards, name, names) for name in names]
    assert sum(targets) == shards
    assert max(targets) - min(targets) <= 1
    assert targets == sorted(targets, reverse=True)  # the extra ones go to the first ranks


def test_members_balance_from_scratch_one_tick_at_a_time() -> None:
    """Replaying every member's decision, with the Lease race won by the first, converges."""
    names = ["c", "a", "d", "b"]
    shards = 6
    holders: dict[int, str] = {}
    for _ in range(10):
        for name in names:
            observed = [held_by(holders[i]) if i in holders else FREE for i in range(shards)]
            mine = [i for i, h in holders.items() if h == name]
            got = decide(shards=shards, identity=name, members=names, observed=observed, held=mine)
            if got.release is not None:
                del holders[got.release]
            for i in got.acquire:
                holders.setdefault(i, name)
    counts = {name: sum(1 for h in holders.values() if h == name) for name in sorted(names)}
    assert counts == {"a": 2, "b": 2, "c": 1, "d": 1}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shards": 0}, "at least 1"),
        ({"identity": ""}, "identity"),
        ({"observed": (FREE,) * 2}, "expected 3 shard states"),
        ({"held": (3,)}, "outside"),
        ({"held": (-1,)}, "outside"),
    ],
)
def test_bad_input_is_refused(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "shards": 3,
        "identity": "a",
        "members": ("a",),
        "observed": (FREE,) * 3,
        "held": (),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        decide(**args)  # type: ignore[arg-type]
