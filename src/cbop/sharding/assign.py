"""The balancing decision: which shards this replica goes for and which one it lets go.

This module owns :func:`decide`, a pure function of what one replica observed in one
tick of :class:`cbop.sharding.ShardCoordinator` (no client, no threads, no clock: an
import-linter contract), which performs it. The rules are docs/sharding.md's: members
sorted by identity share the ``N`` shards as evenly as integers allow; below target a
replica takes free shards, lowest index first; above it, it releases its highest, one
per tick. A shard whose Lease is valid is never free, whoever holds it, because writes
are fenced by the shard's Lease, not by membership; and what this replica holds is
what its own electors say, not what the listed Leases said.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Decision", "ShardState", "decide", "target"]


@dataclass(frozen=True)
class ShardState:
    """One shard's Lease as last listed.

    Attributes:
        holder: its ``holderIdentity``; ``""`` when none (released, or no Lease yet).
        valid: the record changed less than its ``leaseDurationSeconds`` ago by the
            observer's clock (client-go's ``isLeaseValid``).
    """

    holder: str = ""
    valid: bool = False

    @property
    def free(self) -> bool:
        """Whether anybody may take the shard now: no holder, or an expired record."""
        return not self.holder or not self.valid


@dataclass(frozen=True)
class Decision:
    """What one replica does this tick.

    Attributes:
        target: how many shards this replica should hold.
        acquire: the shards to hold or go for, ascending: every shard held (but the
            one released) plus, below target, the lowest free ones. An elector
            still trying for a shard not listed here is stopped.
        release: the shard to hand back gracefully this tick, or ``None``.
    """

    target: int
    acquire: tuple[int, ...]
    release: int | None = None


def target(shards: int, identity: str, members: Iterable[str]) -> int:
    """Return how many of ``shards`` the member ``identity`` should hold.

    ``members`` are the live identities; ``identity`` counts as live whether listed or
    not. Rank-based: ``shards // M`` each, one more for the first ``shards % M`` in
    identity order.

    Raises:
        ValueError: ``shards < 1`` or ``identity`` is empty.
    """
    if shards < 1:
        raise ValueError(f"shard count must be at least 1, got {shards}")
    if not identity:
        raise ValueError("the identity must not be empty")
    live = sorted(set(members) | {identity})
    rank = live.index(identity)
    return shards // len(live) + (1 if rank < shards % len(live) else 0)


def decide(
    *,
    shards: int,
    identity: str,
    members: Iterable[str],
    observed: Sequence[ShardState],
    held: Iterable[int],
) -> Decision:
    """Decide which shards to go for and which one to release (see the module rules).

    Args:
        shards: the shard count ``N`` (>= 1).
        identity: this replica's identity.
        members: identities whose membership Lease is live (this one may be missing).
        observed: ``N`` states, index ``i`` for shard ``i`` (``ShardState()`` when
            shard ``i`` has no Lease).
        held: indices of the shards this replica's electors lead now.

    Returns:
        The :class:`Decision`; ``acquire`` never holds more than ``target`` shards
        beyond those already held, and ``release`` is set only above target.

    Raises:
        ValueError: ``observed`` does not have ``shards`` entries, a held index is out
            of range, ``shards < 1`` or ``identity`` is empty.
    """
    goal = target(shards, identity, members)
    if len(observed) != shards:
        raise ValueError(f"expected {shards} shard states, got {len(observed)}")
    mine = sorted(set(held))
    for index in mine:
        if not 0 <= index < shards:
            raise ValueError(f"held shard {index} is outside [0, {shards})")
    if len(mine) > goal:
        return Decision(goal, tuple(mine[:-1]), mine[-1])
    taken = set(mine)
    free = [i for i in range(shards) if i not in taken and observed[i].free]
    return Decision(goal, tuple(sorted(mine + free[: goal - len(mine)])))
