"""``cbop --shards 2``: two processes share the shards and every bundle converges.

Two cbop processes with ``--leader-elect --shards 2`` on the session's control plane,
scoped to ten namespaces of their own holding two bundles each. Both become ready, the
shards end up one per process, all 20 bundles converge, and each process's
``cbop_shard_objects`` counts exactly the bundles and managed ConfigMaps of the
namespaces its shard holds (namespace hash, ``cbop.shardrange.shard_of``), summing to
20 of each over the two processes. A third replica becomes a ready standby.

And the lost path for real: a replica paused with SIGSTOP loses its shard to the other
(which reconciles a change made there), and once resumed carries on without exiting.
"""

from __future__ import annotations

import secrets
import signal
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from cbop.kube import CONFIGBUNDLES, LEASES, KubeClient, Resource
from cbop.shardrange import shard_of

from .harness import Operator, bundle, ready, wait_for

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SHARDS = 2
TIMINGS = (
    "--shutdown-timeout=10s",
    "--leader-election-lease-duration=6s",
    "--leader-election-renew-deadline=4s",
    "--leader-election-retry-period=1s",
)


@pytest.fixture
def namespaces(kube: KubeClient) -> Iterator[list[str]]:
    """Ten new namespaces, five in each shard (the first also holds the Leases).

    Random names, kept until each shard has five: names that differ in their last
    characters only tend to hash into one shard of two (FNV-1a mixes the last bytes into
    the low bits; docs/sharding.md).
    """
    chosen: dict[int, list[str]] = {0: [], 1: []}
    while min(len(names) for names in chosen.values()) < 5:
        name = f"e2e-shards-{secrets.token_hex(4)}"
        shard = chosen[shard_of(name, SHARDS)]
        if len(shard) < 5:
            shard.append(name)
    names = chosen[0] + chosen[1]
    for name in names:
        kube.create(
            NAMESPACES, None, {"metadata": {"name": name, "labels": {"cbop.dev/e2e": "true"}}}
        )
    yield names
    for name in names:
        kube.delete(NAMESPACES, None, name)


def _shard_objects(op: Operator) -> dict[tuple[int, str], float]:
    """Return (shard, resource) -> ``cbop_shard_objects`` of one process."""
    out = {}
    for key, value in op.metrics().items():
        if key.startswith("cbop_shard_objects{"):
            labels = dict(
                part.split("=", 1) for part in key[len("cbop_shard_objects{") : -1].split(",")
            )
            out[(int(labels["shard"].strip('"')), labels["resource"].strip('"'))] = value
    return out


def test_two_processes_share_two_shards_and_every_bundle_converges(
    kube: KubeClient, namespaces: list[str], cbop: Callable[..., Operator]
) -> None:
    group = f"cbop-{secrets.token_hex(3)}"
    args = (
        "--leader-elect",
        f"--leader-election-namespace={namespaces[0]}",
        f"--leader-election-id={group}",
        f"--shards={SHARDS}",
        *TIMINGS,
    )
    first = cbop(*args, namespaces=namespaces)
    second = cbop(*args, namespaces=namespaces)
    for ns in namespaces:
        for name in ("alpha", "beta"):
            kube.create(CONFIGBUNDLES, ns, bundle(name, {"data": {"ns": ns, "name": name}}))

    def not_ready() -> list[tuple[str, str]]:
        keys = [(ns, name) for ns in namespaces for name in ("alpha", "beta")]
        return [(ns, name) for ns, name in keys if not ready(kube, ns, name)]

    wait_for(lambda: not not_ready(), 120, message="every bundle Ready")

    # One shard each once the second process has joined (a release per retry period).
    def held(op: Operator) -> float:
        return op.metrics().get("cbop_shards_held{}", -1.0)

    wait_for(lambda: held(first) == 1 and held(second) == 1, 60, message="one shard each")
    leases = {
        lease["metadata"]["name"]: lease["spec"].get("holderIdentity")
        for lease in kube.list(LEASES, namespaces[0])["items"]
        if lease["metadata"]["name"].startswith(f"{group}-shard-")
    }
    assert sorted(leases) == [f"{group}-shard-0", f"{group}-shard-1"]
    assert len(set(leases.values())) == 2, f"one holder per shard: {leases}"

    bundles_per_shard = Counter(shard_of(ns, SHARDS) for ns in namespaces for _ in range(2))
    # The rollout (on by default) caches opted-in workloads per shard too, and the
    # bundles the pinned history and pods: none here.
    expected = {
        (shard, resource): float(count if resource in ("configbundles", "configmaps") else 0)
        for shard, count in bundles_per_shard.items()
        for resource in (
            "configbundles",
            "configmaps",
            "controllerrevisions",
            "daemonsets",
            "deployments",
            "pods",
            "replicasets",
            "statefulsets",
        )
    }

    ops = [first, second]

    def counted() -> dict[tuple[int, str], float] | None:
        """Sum the processes' counts; None when two count one shard (the scrapes are
        one after the other, so a hand-over between them shows a shard twice)."""
        found: dict[tuple[int, str], float] = {}
        for op in ops:
            for key, value in _shard_objects(op).items():
                if key in found:
                    return None
                found[key] = value
        return found

    seen: list[dict[tuple[int, str], float] | None] = []

    def as_expected() -> bool:
        seen.append(counted())
        return seen[-1] == expected

    def wait_counted() -> None:
        try:
            wait_for(as_expected, 60, message=f"cbop_shard_objects == {expected}")
        except AssertionError as err:
            raise AssertionError(f"{err}; last counted: {seen[-1:]}") from None

    wait_counted()
    totals = Counter[str]()
    for (_, resource), value in expected.items():
        totals[resource] += int(value)
    assert +totals == {"configbundles": 20, "configmaps": 20}
    # Each process reports the Ready bundles of its own shard only.
    ready_total = sum(
        op.metrics().get('cbop_configbundles{ready="True"}', 0.0) for op in (first, second)
    )
    assert ready_total == 20

    # A third replica: members are ranked by identity, and the last one targets no
    # shard; once that one holds none and the others one each, the group is balanced.
    # The standby is ready, caches nothing, and the counts still add up.
    ops.append(cbop(*args, namespaces=namespaces))

    def identity(op: Operator) -> str:
        def joined() -> list[str]:
            return [
                str(r["identity"])
                for r in op.log_records()
                if r.get("event") == "joining the shard group"
            ]

        return str(wait_for(joined, 30, message="the joining log line")[0])

    last = max(ops, key=identity)
    wait_for(
        lambda: [held(op) for op in ops] == [0.0 if op is last else 1.0 for op in ops],
        60,
        message="one shard each but for the last-ranked member",
    )
    standby = last
    code, body = standby.get("/readyz?verbose")
    assert code == 200, body
    assert "[+]shards ok" in body
    assert _shard_objects(standby) == {}
    wait_counted()
    assert not_ready() == []
    for op in ops:
        # A replica bounds its own stop to a drain plus a lease duration per shard
        # ((10 + 6) s x 2), then stops its caches and servers; give it that and room
        # for a loaded machine before the harness would SIGKILL it.
        code = op.stop(timeout=80.0)
        assert code == 0, f"cbop exited with {code}; its last log lines:\n{op.logs()[-6000:]}"
        # 20 watches per shard held: the connection pool is sized for them.
        dropped = [r for r in op.log_records() if "pool is full" in str(r.get("event"))]
        assert dropped == [], dropped[:1]


def test_a_paused_replica_loses_its_shard_and_carries_on(
    kube: KubeClient, namespaces: list[str], cbop: Callable[..., Operator]
) -> None:
    """SIGSTOP one of two replicas: the other takes its shard over once the Lease
    expires and reconciles a change there; SIGCONT: the paused one finds the shard lost
    (its workers stop at once, no drain, no exit), then takes a shard back as the group
    rebalances, and both stop cleanly."""
    group = f"cbop-{secrets.token_hex(3)}"
    args = (
        "--leader-elect",
        f"--leader-election-namespace={namespaces[0]}",
        f"--leader-election-id={group}",
        f"--shards={SHARDS}",
        *TIMINGS,
    )
    first = cbop(*args, namespaces=namespaces)
    second = cbop(*args, namespaces=namespaces)

    def held(op: Operator) -> float:
        return op.metrics().get("cbop_shards_held{}", -1.0)

    wait_for(lambda: held(first) == 1 and held(second) == 1, 60, message="one shard each")
    (paused_shard,) = [
        shard
        for shard in range(SHARDS)
        if _shard_objects(first).get((shard, "configbundles")) is not None
    ]
    ns = next(n for n in namespaces if shard_of(n, SHARDS) == paused_shard)
    first.send(signal.SIGSTOP)
    try:
        wait_for(lambda: held(second) == 2, 60, message="the other replica holds both shards")
        kube.create(CONFIGBUNDLES, ns, bundle("after-pause", {"data": {"a": "1"}}))
        wait_for(lambda: ready(kube, ns, "after-pause"), 60, message="the bundle converged")
    finally:
        first.send(signal.SIGCONT)
    wait_for(
        lambda: any(r.get("event") == "lost shard" for r in first.log_records()),
        60,
        message="the resumed replica reports the shard lost",
    )
    assert first.proc.poll() is None, "a lost shard ended the process"
    wait_for(lambda: held(first) == 1 and held(second) == 1, 90, message="rebalanced")
    code, body = first.get("/readyz?verbose")
    assert code == 200, body
    assert first.stop() == 0
    assert second.stop() == 0
