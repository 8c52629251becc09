"""How evenly the namespace shard key spreads bundles over shards, for skewed namespaces.

Run from the repository root (``PYTHONPATH=src`` unless cbop is installed)::

    python -m bench.sharding_balance [--shards 3] [--bundles 10000] [--namespaces 1000]
                                     [--zipf 1.1] [--seed 1]

Pure computation with :mod:`cbop.shardrange` (the API server's FNV-1a hash): no cluster.
Three distributions of ``--bundles`` bundles over ``--namespaces`` namespaces:

* **even**: the same number in every namespace;
* **zipf**: namespace of rank k gets a share proportional to ``1 / k**s`` (largest
  remainder rounding, so the total is exact);
* **half-in-one**: one namespace holds half the bundles, the rest are spread evenly.

Each under two naming schemes: **random** names (16 hex digits from a seeded RNG, as
varied as real team or app names) and **numbered** names (``team-0000`` ...), and, for
comparison, the **uid** key (a random uid per bundle, what ``object.metadata.uid``
would shard on; it splits a bundle from its ConfigMap). Reported: max/mean and min/mean
objects per shard (1.00 is perfect), the objects per shard, and the **bound**: the best
max/mean any assignment of whole namespaces could reach (``max(mean, largest
namespace) / mean``). A ConfigMap lives with its bundle, so the ratios hold for the pair.
A second table repeats the random names over ``--seeds`` seeds (median and worst max/mean),
since one draw of names may be lucky or not.

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import random
import statistics
import uuid
from collections.abc import Callable, Sequence

from cbop.shardrange import shard_of

Names = Callable[[int, random.Random], list[str]]


def random_names(count: int, rng: random.Random) -> list[str]:
    """``count`` distinct names with a random 16-hex-digit middle, e.g. ``ns-3f0c...-app``."""
    names: set[str] = set()
    while len(names) < count:
        names.add(f"ns-{rng.getrandbits(64):016x}-app")
    return sorted(names)


def numbered_names(count: int, rng: random.Random) -> list[str]:
    """``team-0000``, ``team-0001``, ...: names that differ only in their last characters."""
    return [f"team-{i:04d}" for i in range(count)]


def even(bundles: int, namespaces: int) -> list[int]:
    """Bundles per namespace, as equal as integers allow."""
    base, extra = divmod(bundles, namespaces)
    return [base + (1 if i < extra else 0) for i in range(namespaces)]


def zipf(bundles: int, namespaces: int, s: float) -> list[int]:
    """Bundles per namespace for a Zipf(s) popularity, largest-remainder rounded."""
    weights = [1.0 / (k**s) for k in range(1, namespaces + 1)]
    total = sum(weights)
    exact = [bundles * w / total for w in weights]
    counts = [int(x) for x in exact]
    short = bundles - sum(counts)
    by_remainder = sorted(range(namespaces), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in by_remainder[:short]:
        counts[i] += 1
    return counts


def half_in_one(bundles: int, namespaces: int) -> list[int]:
    """Half of the bundles in the first namespace, the rest even over the others."""
    big = bundles // 2
    return [big, *even(bundles - big, namespaces - 1)]


def per_shard_by_namespace(counts: Sequence[int], names: Sequence[str], shards: int) -> list[int]:
    """Objects per shard when each namespace goes where its name hashes."""
    out = [0] * shards
    for count, name in zip(counts, names, strict=True):
        out[shard_of(name, shards)] += count
    return out


def per_shard_by_uid(total: int, shards: int, rng: random.Random) -> list[int]:
    """Objects per shard when each object goes where a random uid hashes."""
    out = [0] * shards
    for _ in range(total):
        out[shard_of(str(uuid.UUID(int=rng.getrandbits(128), version=4)), shards)] += 1
    return out


def row(scenario: str, key: str, per_shard: Sequence[int], bound: float) -> str:
    mean = sum(per_shard) / len(per_shard)
    return (
        f"| {scenario} | {key} | {max(per_shard) / mean:.2f} | {min(per_shard) / mean:.2f} "
        f"| {bound:.2f} | {' / '.join(f'{n:,}' for n in per_shard)} |"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--bundles", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=1_000)
    parser.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=20, help="seeds for the second table")
    args = parser.parse_args(argv)

    scenarios = {
        "even": even(args.bundles, args.namespaces),
        f"zipf s={args.zipf:g}": zipf(args.bundles, args.namespaces, args.zipf),
        "half-in-one": half_in_one(args.bundles, args.namespaces),
    }
    schemes: dict[str, Names] = {"random": random_names, "numbered": numbered_names}
    print(
        f"{args.bundles:,} bundles over {args.namespaces:,} namespaces, {args.shards} shards "
        f"(seed {args.seed})\n"
    )
    print("| distribution | shard key (names) | max/mean | min/mean | bound | bundles per shard |")
    print("|---|---|---|---|---|---|")
    for scenario, counts in scenarios.items():
        mean = args.bundles / args.shards
        bound = max(mean, *counts) / mean
        for scheme, make in schemes.items():
            names = make(args.namespaces, random.Random(args.seed))
            per_shard = per_shard_by_namespace(counts, names, args.shards)
            print(row(scenario, f"namespace ({scheme})", per_shard, bound))
        uid = per_shard_by_uid(args.bundles, args.shards, random.Random(args.seed))
        print(row(scenario, "uid", uid, 1.0))

    print(f"\nRandom namespace names, seeds 1..{args.seeds}: max/mean objects per shard\n")
    print("| distribution | median | worst |")
    print("|---|---|---|")
    for scenario, counts in scenarios.items():
        ratios = []
        for seed in range(1, args.seeds + 1):
            names = random_names(args.namespaces, random.Random(seed))
            per_shard = per_shard_by_namespace(counts, names, args.shards)
            ratios.append(max(per_shard) * args.shards / args.bundles)
        print(f"| {scenario} | {statistics.median(ratios):.2f} | {max(ratios):.2f} |")


if __name__ == "__main__":
    main()
