"""Sharding (issue 17): several ``cbop --leader-elect --shards 3`` processes, judged by
the API server's audit log.

One control plane for the module, with the ``ShardedListAndWatch`` feature gate on and an
audit policy that records every write to ConfigBundles and ConfigMaps and every Lease
write with the holder it leaves. Each cbop process authenticates as a user of its own
(a client certificate per process), so the audit log tells which replica made each write
and when the API server received it. The fleet is 3,000 bundles, 10 in each of 300
namespaces (the shard key is the namespace), created once for the module.

**Overlapping writes**, precisely: shard ``s`` of a write is ``shard_of(namespace, 3)``
of the bundle's namespace; the holder of shard ``s`` at time ``t`` is the user whose
write of the Lease ``<id>-shard-<s>`` was the last to commit (``stageTimestamp``) at or
before ``t``, or nobody after a release. A write to a ConfigMap or a ConfigBundle (its
status, its finalizers) by replica B, received (``requestReceivedTimestamp``) at ``t``,
*overlaps* when shard ``s``'s holder at ``t`` is not B: another replica A held the
shard's Lease then, or nobody did. Every test asserts there is no such write; with the
single writer per shard at any time that gives, no bundle is written by two replicas at
overlapping times.

Figures (convergence, per-replica objects and RSS, takeover after SIGKILL) are written
to ``sharding.json`` under pytest's base temporary directory; docs/sharding.md reports
them. Lease timings are short (6 s lease, 4 s renew deadline, 1 s retry).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import signal
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cbop.api import LABEL_MANAGED_BY, MANAGED_BY_VALUE
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, LEASES, NAMESPACES, ApiError, KubeClient
from cbop.shardrange import ShardRange, shard_of
from cbop_testing.envtest import WRITES_AUDIT_POLICY, ControlPlane

from . import audit
from .control_plane import START_TIMEOUT, _binaries
from .fixtures import install_crd
from .harness import Operator, bundle, raw_get, set_spec, wait_for

SHARDS = 3
LEASE_SECONDS = 6.0
TIMINGS = (
    "--leader-election-lease-duration=6s",
    "--leader-election-renew-deadline=4s",
    "--leader-election-retry-period=1s",
)
FLEET_NAMESPACES = 300
PER_NAMESPACE = 10
MANAGED = f"{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"
#: Resources whose writes must come from the shard's holder (ConfigMaps, bundles and
#: their status and finalizers; Events are the recorder's, not the bundle's state).
FENCED = ("configmaps", "configbundles")
FIGURES: dict[str, Any] = {}


@pytest.fixture(scope="module")
def audited(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """A control plane of this module's own: sharded list and watch on, writes audited."""
    control = ControlPlane(
        binaries=_binaries(request.config),
        workdir=tmp_path_factory.mktemp("sharded-control-plane"),
        audit_policy=WRITES_AUDIT_POLICY,
        sharded_list_and_watch=True,
    )
    control.start(timeout=START_TIMEOUT)
    try:
        install_crd(control)
        yield control
    finally:
        control.stop()
        path = tmp_path_factory.getbasetemp() / "sharding.json"
        path.write_text(json.dumps(FIGURES, indent=2, sort_keys=True) + "\n")


# ------------------------------------------------------------------------ the fleet


def spec(namespace: str, name: str, value: str) -> dict[str, Any]:
    return {"data": {"bundle": f"{namespace}/{name}", "value": value}}


def fleet_namespaces(count: int) -> list[str]:
    """``count`` namespace names that spread over the shards.

    The shard hash (64-bit FNV-1a, ranges cut from its top bits) barely moves when only
    the last characters of a name change: ``fleet-000`` .. ``fleet-299`` fall in two of
    three shards, 100 and 200. Names that differ from their first character spread.
    """
    return [f"{hashlib.sha256(str(i).encode()).hexdigest()[:8]}-fleet" for i in range(count)]


@dataclass
class Fleet:
    """300 namespaces of 10 bundles each, created on first use, shared by the module."""

    kube: KubeClient
    namespaces: list[str] = field(default_factory=lambda: fleet_namespaces(FLEET_NAMESPACES))
    created: bool = False

    @property
    def keys(self) -> list[tuple[str, str]]:
        return [(ns, f"cb-{j}") for ns in self.namespaces for j in range(PER_NAMESPACE)]

    def expected_per_shard(self) -> dict[int, int]:
        out = dict.fromkeys(range(SHARDS), 0)
        for ns in self.namespaces:
            out[shard_of(ns, SHARDS)] += PER_NAMESPACE
        return out

    def ensure(self) -> float:
        """Create what is missing (8 client threads); return the time the first create
        was sent (``time.time()``)."""
        began = time.time()
        if self.created:
            return began

        def namespace(ns: str) -> None:
            with contextlib.suppress(ApiError):
                self.kube.create(NAMESPACES, None, {"metadata": {"name": ns}})

        def one(key: tuple[str, str]) -> None:
            ns, name = key
            with contextlib.suppress(ApiError):
                self.kube.create(CONFIGBUNDLES, ns, bundle(name, spec(ns, name, "0")))

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(namespace, self.namespaces))
            list(pool.map(one, self.keys))
        self.created = True
        return began

    def pending(self, values: dict[tuple[str, str], str] | None = None) -> list[str]:
        """Bundles not yet converged: Ready (Synced) for their generation, with their
        ConfigMap's data equal to their spec (and to ``values[key]`` where given)."""
        fleet = set(self.namespaces)
        bundles = {
            (b["metadata"]["namespace"], b["metadata"]["name"]): b
            for b in self.kube.list(CONFIGBUNDLES, None, timeout=120)["items"]
            if b["metadata"]["namespace"] in fleet
        }
        configmaps = {
            (c["metadata"]["namespace"], c["metadata"]["name"]): c
            for c in self.kube.list(CONFIGMAPS, None, label_selector=MANAGED, timeout=120)["items"]
            if c["metadata"]["namespace"] in fleet
        }
        out = []
        for key in self.keys:
            b = bundles.get(key)
            cm = configmaps.get(key)
            if b is None or cm is None:
                out.append(f"{key}: missing")
                continue
            status = b.get("status") or {}
            ready = [c for c in status.get("conditions") or () if c["type"] == "Ready"]
            if status.get("observedGeneration") != b["metadata"]["generation"] or not ready:
                out.append(f"{key}: not observed")
            elif (ready[0]["status"], ready[0]["reason"]) != ("True", "Synced"):
                out.append(f"{key}: {ready[0]['reason']}")
            elif cm.get("data") != b["spec"]["data"]:
                out.append(f"{key}: ConfigMap differs from spec")
            elif values is not None and key in values and cm["data"]["value"] != values[key]:
                out.append(f"{key}: ConfigMap has {cm['data']['value']}, not {values[key]}")
        return out

    def wait_converged(
        self, timeout: float, values: dict[tuple[str, str], str] | None = None
    ) -> float:
        """Wait until :meth:`pending` is empty; return ``time.time()`` then.

        Raises:
            AssertionError: not converged in ``timeout`` seconds (with what is pending).
        """
        try:
            wait_for(lambda: not self.pending(values), timeout, interval=2.0, message="fleet")
        except AssertionError:
            left = self.pending(values)
            raise AssertionError(f"{len(left)} bundles not converged, e.g. {left[:5]}") from None
        return time.time()

    def assert_one_configmap_each(self) -> None:
        """Every fleet bundle has exactly one managed ConfigMap, controlled by it."""
        fleet = set(self.namespaces)
        uids = {
            b["metadata"]["uid"]
            for b in self.kube.list(CONFIGBUNDLES, None, timeout=120)["items"]
            if b["metadata"]["namespace"] in fleet
        }
        owners = []
        for cm in self.kube.list(CONFIGMAPS, None, label_selector=MANAGED, timeout=120)["items"]:
            if cm["metadata"]["namespace"] not in fleet:
                continue
            refs = [r for r in cm["metadata"].get("ownerReferences") or () if r.get("controller")]
            assert len(refs) == 1, f"{cm['metadata']['name']} has no single controller"
            owners.append(refs[0]["uid"])
        assert sorted(owners) == sorted(uids), "a bundle without exactly one ConfigMap"


@pytest.fixture(scope="module")
def fleet(audited: ControlPlane) -> Iterator[Fleet]:
    kube = KubeClient.from_config(kubeconfig=str(audited.kubeconfig_path), qps=0, pool_size=16)
    yield Fleet(kube)
    kube.close()


# --------------------------------------------------------------------- audit feed


class AuditFeed:
    """The audit log's events from a starting offset on, read incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        self.events: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return self.events
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        for line in chunk[:end].splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("stage") == "ResponseComplete":
                    self.events.append(event)
        return self.events


def overlapping(
    writes: Sequence[audit.Write], changes: dict[int, list[audit.LeaseChange]]
) -> list[audit.Write]:
    """Writes whose shard's Lease named another replica, or nobody, when they arrived
    (the module docstring's definition)."""
    return [
        w
        for w in writes
        if w.resource.partition("/")[0] in FENCED
        and audit.holder_at(changes[shard_of(w.namespace, SHARDS)], w.received) != w.user
    ]


# ------------------------------------------------------------------------- replicas


def shard_index(label: str) -> int:
    """The shard number of a ``shard`` label (``"1"`` or ``"1/3"``)."""
    return int(label.partition("/")[0])


@dataclass
class ShardStats:
    """A replica's own view, from its /metrics."""

    held: float | None
    bundles: dict[int, float]
    configmaps: dict[int, float]


@dataclass
class Replica:
    """One ``cbop --shards 3`` process, as a user of its own."""

    user: str
    op: Operator

    def alive(self) -> bool:
        return self.op.proc.poll() is None

    def stats(self) -> ShardStats:
        held: float | None = None
        bundles: dict[int, float] = {}
        configmaps: dict[int, float] = {}
        for family in text_string_to_metric_families(self.op.metrics_text()):
            for s in family.samples:
                if s.name == "cbop_shards_held":
                    held = s.value
                elif s.name == "cbop_shard_objects" and s.labels["resource"] in FENCED:
                    into = bundles if s.labels["resource"] == "configbundles" else configmaps
                    into[shard_index(s.labels["shard"])] = s.value
        return ShardStats(held, bundles, configmaps)

    def memory_mib(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) in MiB, from /proc/<pid>/status."""
        found = {}
        with open(f"/proc/{self.op.proc.pid}/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    found[key] = int(value.split()[0]) / 1024
        return found["VmRSS"], found["VmHWM"]


@dataclass
class ShardGroup:
    """Replicas of ``cbop --shards 3`` sharing one ``--leader-election-id``."""

    control: ControlPlane
    kube: KubeClient
    namespace: str
    group: str
    tmp: Path
    feed: AuditFeed
    replicas: list[Replica] = field(default_factory=list)

    def start(self, count: int) -> list[Replica]:
        """Start ``count`` replicas at once; wait until each is ready."""
        new = []
        for _ in range(count):
            user = f"cbop-shard-replica-{len(self.replicas)}-{uuid.uuid4().hex[:4]}"
            kubeconfig = self.control.kubeconfig_for_user(user, ("system:masters",))
            op = Operator(
                kubeconfig,
                [],
                args=[
                    "--leader-elect",
                    f"--leader-election-namespace={self.namespace}",
                    f"--leader-election-id={self.group}",
                    f"--shards={SHARDS}",
                    "--resync-period=0",
                    "--kube-api-qps=200",
                    "--kube-api-burst=400",
                    "--log-level=info",
                    # ClusterConfigBundles are not what this measures (and their CRD is
                    # not installed here): test_cluster_bundles_sharded.py covers them.
                    "--no-cluster-bundles",
                    *TIMINGS,
                ],
                log_path=self.tmp / f"{user}.log",
            )
            replica = Replica(user, op)
            self.replicas.append(replica)
            new.append(replica)
        for replica in new:
            replica.op.wait_ready(120)
        return new

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive()]

    def lease(self, shard: int) -> str:
        return f"{self.group}-shard-{shard}"

    def identities(self, events: Sequence[dict[str, Any]]) -> dict[str, str]:
        """holderIdentity -> user, from each replica's writes of its membership Lease."""
        out = {}
        for event in events:
            ref = event.get("objectRef") or {}
            if ref.get("resource") != "leases" or ref.get("namespace") != self.namespace:
                continue
            if not str(ref.get("name", "")).startswith(f"{self.group}-member-"):
                continue
            spec = (event.get("responseObject") or {}).get("spec") or {}
            if event.get("verb") in ("create", "update") and spec.get("holderIdentity"):
                out[spec["holderIdentity"]] = (event.get("user") or {}).get("username", "")
        return out

    def changes(self) -> dict[int, list[audit.LeaseChange]]:
        """Each shard Lease's history: the user its holderIdentity names, from when."""
        events = self.feed.poll()
        who = self.identities(events)
        return {
            s: audit.lease_changes(events, self.namespace, self.lease(s), who)
            for s in range(SHARDS)
        }

    def writes(self) -> list[audit.Write]:
        return audit.writes(self.feed.poll(), [r.user for r in self.replicas])

    def holders(self) -> dict[int, Replica | None]:
        """Each shard's holder per the audited Lease writes (None: nobody, or not ours)."""
        by_user = {r.user: r for r in self.replicas}
        out: dict[int, Replica | None] = {}
        for s, changes in self.changes().items():
            holder = changes[-1].holder if changes else None
            out[s] = by_user.get(holder) if holder else None
        return out

    def wait_balanced(self, timeout: float = 120.0) -> dict[str, list[int]]:
        """Wait until the live replicas hold every shard, as many each as the design's
        targets (``3 // M``, plus one for the first ``3 % M``), with each replica's
        ``cbop_shards_held`` agreeing; return user -> held shards."""

        def balanced() -> dict[str, list[int]] | None:
            live = self.live()
            holders = self.holders()
            if any(h is None or not h.alive() for h in holders.values()):
                return None
            held: dict[str, list[int]] = {r.user: [] for r in live}
            for s, h in holders.items():
                assert h is not None
                held[h.user].append(s)
            targets = sorted(
                (
                    SHARDS // len(live) + (1 if r < SHARDS % len(live) else 0)
                    for r in range(len(live))
                ),
                reverse=True,
            )
            if sorted((len(v) for v in held.values()), reverse=True) != targets:
                return None
            for r in live:
                if r.stats().held != len(held[r.user]):
                    return None
            return held

        found: dict[str, list[int]] = wait_for(
            balanced, timeout, interval=0.5, message="balanced shards"
        )
        return found

    def wait_caches(self, fleet: Fleet, timeout: float = 120.0) -> None:
        """Wait until each live replica caches exactly its shards' fleet bundles and
        ConfigMaps (``cbop_shard_objects``)."""
        expected = fleet.expected_per_shard()
        holders = self.holders()

        def synced() -> bool:
            for r in self.live():
                mine = [s for s, h in holders.items() if h is r]
                stats = r.stats()
                if {s: stats.bundles.get(s) for s in mine} != {s: expected[s] for s in mine}:
                    return False
                if {s: stats.configmaps.get(s) for s in mine} != {s: expected[s] for s in mine}:
                    return False
            return True

        wait_for(synced, timeout, interval=1.0, message="shard caches synced")

    def assert_no_overlapping_writes(self) -> list[audit.Write]:
        """No fenced write outside its shard's holder's tenure; returns the writes."""
        writes = self.writes()
        bad = overlapping(writes, self.changes())
        assert bad == [], f"{len(bad)} overlapping writes, e.g. {bad[:5]}"
        return writes

    def stop(self) -> None:
        for replica in self.replicas:
            replica.op.stop(signal.SIGKILL)


@pytest.fixture
def shard_group(audited: ControlPlane, tmp_path: Path) -> Iterator[Callable[[], ShardGroup]]:
    kube = KubeClient.from_config(kubeconfig=str(audited.kubeconfig_path), qps=0)
    made: list[ShardGroup] = []

    def make() -> ShardGroup:
        namespace = f"shards-{uuid.uuid4().hex[:8]}"
        kube.create(NAMESPACES, None, {"metadata": {"name": namespace}})
        group = ShardGroup(
            audited, kube, namespace, "cbop", tmp_path, AuditFeed(audited.audit_log_path)
        )
        made.append(group)
        return group

    yield make
    for group in made:
        group.stop()
        with contextlib.suppress(ApiError):
            kube.delete(NAMESPACES, None, group.namespace)
    kube.close()


def _some_bundle(fleet: Fleet, shard: int) -> tuple[str, str]:
    ns = next(ns for ns in fleet.namespaces if shard_of(ns, SHARDS) == shard)
    return ns, "cb-0"


def _settled_group(
    fleet: Fleet, shard_group: Callable[[], ShardGroup]
) -> tuple[ShardGroup, dict[str, list[int]]]:
    """Three replicas on the whole fleet, one shard each, every bundle converged."""
    fleet.ensure()
    group = shard_group()
    group.start(3)
    held = group.wait_balanced()
    fleet.wait_converged(timeout=300)
    group.wait_caches(fleet)
    return group, held


# ---------------------------------------------------------------------------- tests


@pytest.mark.timeout(900)
def test_three_replicas_converge_3000_bundles_a_third_each(
    fleet: Fleet, shard_group: Callable[[], ShardGroup]
) -> None:
    group = shard_group()
    replicas = group.start(3)
    held = group.wait_balanced()
    assert all(len(v) == 1 for v in held.values()), held

    began = fleet.ensure()
    converged = fleet.wait_converged(timeout=420)
    fleet.assert_one_configmap_each()
    group.wait_caches(fleet)

    # The API server filters by the selector with the same hash as ours. (It echoes the
    # selector in metadata.shardInfo for built-in resources, not for custom ones.)
    expected = fleet.expected_per_shard()
    for s in range(SHARDS):
        query = urllib.parse.urlencode({"shardSelector": ShardRange.of(s, SHARDS).selector()})
        for path in ("/apis/cbop.dev/v1beta1/configbundles", "/api/v1/configmaps"):
            listing = json.loads(raw_get(group.kube, f"{path}?{query}"))
            mine = [i for i in listing["items"] if i["metadata"]["namespace"] in fleet.namespaces]
            assert len(mine) == expected[s], path
        assert listing["metadata"]["shardInfo"]["selector"] == ShardRange.of(s, SHARDS).selector()

    writes = group.assert_no_overlapping_writes()
    fleet_writes = [w for w in writes if w.namespace in set(fleet.namespaces)]
    last = max(w.received for w in fleet_writes if w.resource == "configbundles/status")
    per_replica = []
    for r in replicas:
        (shard,) = held[r.user]
        stats = r.stats()
        # Only its own shard's objects (a shard it let go of, if any, counts zero).
        assert {s: v for s, v in stats.bundles.items() if v} == {shard: expected[shard]}, stats
        assert {s: v for s, v in stats.configmaps.items() if v} == {shard: expected[shard]}
        # About a third: the namespaces' hashes split 3,000 bundles unevenly, not wildly.
        assert 0.25 * 3000 <= expected[shard] <= 0.42 * 3000, expected
        rss, hwm = r.memory_mib()
        mine = [w for w in fleet_writes if w.user == r.user]
        assert mine, f"replica {r.user} wrote nothing"
        assert {shard_of(w.namespace, SHARDS) for w in mine} == {shard}
        per_replica.append(
            {
                "shard": shard,
                "bundles": stats.bundles[shard],
                "configmaps": stats.configmaps[shard],
                "writes": len(mine),
                "rss_mib": round(rss, 1),
                "peak_rss_mib": round(hwm, 1),
            }
        )
    FIGURES["three_replicas_3000_bundles"] = {
        "converged_s_from_first_create": round(converged - began, 1),
        "last_status_write_s_from_first_create": round(last - began, 1),
        "replicas": per_replica,
    }


@pytest.mark.timeout(900)
def test_sigkill_a_replica_its_shard_is_taken_over_within_the_lease_plus_5s(
    fleet: Fleet, shard_group: Callable[[], ShardGroup]
) -> None:
    group, held = _settled_group(fleet, shard_group)

    victim = next(r for r in group.replicas if held[r.user])
    (shard,) = held[victim.user]
    ns, name = _some_bundle(fleet, shard)
    victim.op.send(signal.SIGKILL)
    killed = time.time()
    set_spec(group.kube, ns, name, spec(ns, name, "after-kill"))

    def applied() -> bool:
        cm = group.kube.get(CONFIGMAPS, ns, name)
        return (cm.get("data") or {}).get("value") == "after-kill"

    wait_for(applied, 120, interval=0.1, message="the change applied after the kill")
    seen = time.time()
    assert victim.op.proc.wait(10) == -signal.SIGKILL

    writes = group.assert_no_overlapping_writes()
    configmap_write = next(
        w
        for w in writes
        if (w.namespace, w.name, w.resource) == (ns, name, "configmaps")
        and w.received > killed
        and 200 <= w.code < 300
    )
    assert configmap_write.user != victim.user
    taken = next(
        c for c in audit.acquisitions(group.changes()[shard]) if c.at > killed and c.holder
    )
    assert taken.holder == configmap_write.user
    takeover = configmap_write.received - killed
    FIGURES.setdefault("sigkill", []).append(
        {
            "shard_acquired_s_after_kill": round(taken.at - killed, 2),
            "change_written_s_after_kill": round(takeover, 2),
            "change_seen_s_after_kill": round(seen - killed, 2),
        }
    )
    # Issue 17: applied within the lease duration plus 5 s.
    assert takeover <= LEASE_SECONDS + 5, f"{takeover:.1f} s from the kill to the write"

    # The two survivors share the three shards (2 + 1) and every bundle converges.
    held = group.wait_balanced()
    assert sorted(len(v) for v in held.values()) == [1, 2]
    fleet.wait_converged(timeout=180)
    group.assert_no_overlapping_writes()


class Changer:
    """Patches random bundles of a set at a steady rate on a thread; remembers the last
    value sent to each."""

    def __init__(self, kube: KubeClient, keys: Sequence[tuple[str, str]], rate: float) -> None:
        self.kube = kube
        self.keys = list(keys)
        self.rate = rate
        self.last: dict[tuple[str, str], str] = {}
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="changer", daemon=True)

    def _run(self) -> None:
        rng = random.Random(17)
        start = time.monotonic()
        while not self._stop.is_set():
            ns, name = rng.choice(self.keys)
            value = f"c{self.sent}"
            set_spec(self.kube, ns, name, spec(ns, name, value))
            self.last[ns, name] = value
            self.sent += 1
            self._stop.wait(max(0.0, start + self.sent / self.rate - time.monotonic()))

    def __enter__(self) -> Changer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.mark.timeout(900)
def test_scale_3_to_2_to_3_under_changes_loses_nothing_and_writes_once(
    fleet: Fleet, shard_group: Callable[[], ShardGroup]
) -> None:
    group, held = _settled_group(fleet, shard_group)
    # One bundle per namespace: about a hundred per shard.
    keys = [(ns, "cb-1") for ns in fleet.namespaces]

    with Changer(group.kube, keys, rate=10.0) as changer:
        wait_for(lambda: changer.sent >= 30, 60, message="changes under way")
        leaving = group.replicas[0]
        leaving.op.send(signal.SIGTERM)
        termed = time.time()
        assert leaving.op.proc.wait(60) == 0, leaving.op.logs()[-3000:]
        held = group.wait_balanced()
        assert sorted(len(v) for v in held.values()) == [1, 2]
        members = group.kube.list(
            LEASES, group.namespace, label_selector="cbop.dev/shard-role=member"
        )["items"]
        assert len(members) == 2, "the stopped replica deleted its membership Lease"
        at_two = changer.sent
        wait_for(lambda: changer.sent >= at_two + 50, 60, message="changes with two replicas")
        (joined,) = group.start(1)
        joining = time.time()
        held = group.wait_balanced()
        assert len(held[joined.user]) == 1
        at_three = changer.sent
        wait_for(lambda: changer.sent >= at_three + 50, 60, message="changes with three")

    fleet.wait_converged(timeout=180, values=changer.last)
    fleet.assert_one_configmap_each()
    group.assert_no_overlapping_writes()
    changes = group.changes()

    # SIGTERM: the leaving replica released each of its shards (no expiry wait).
    for s in range(SHARDS):
        before = [c for c in changes[s] if c.at < termed]
        if before and before[-1].holder == leaving.user:
            assert any(c.holder is None and c.at > termed for c in changes[s]), (
                f"shard {s} was not released on SIGTERM"
            )
    # Joining: the shard the new replica took was handed over, released first.
    (taken,) = held[joined.user]
    acquired = next(c for c in changes[taken] if c.at > joining and c.holder == joined.user)
    previous = [c for c in changes[taken] if c.at < acquired.at]
    assert previous, "the new replica's shard had no holder before"
    assert previous[-1].holder is None, "taken over without a release"
    FIGURES["scale_3_2_3"] = {
        "changes": changer.sent,
        "bundles_changed": len(changer.last),
    }
