"""No write without the lease: two cbop replicas under faults, judged by the audit log.

One control plane for the module, with an audit policy that records every write to
ConfigBundles, ConfigMaps and Events and every Lease write with its holder. Each cbop
process authenticates as a user of its own (a client certificate per process), so the
audit log tells which replica made each write and when the API server received it.

For every fault: no replica writes while the Lease names another (zero writes outside
leadership), the bundles converge, every bundle has exactly one ConfigMap, owned by it,
and no managed ConfigMap is left without its bundle. The failover time (fault to the
next Lease acquisition, from the audit log) is recorded in ``leader-fencing.json`` under
pytest's base temporary directory; docs/leader-election.md reports the figures.

Lease timings are short (6 s lease, 4 s renew deadline, 1 s retry) except for the
paused-leader input and the slow API server, which use the defaults (15/10/2 s), as
the faults were first reported.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s_client

from cbop.api import LABEL_MANAGED_BY, MANAGED_BY_VALUE
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, LEASES, ApiError, KubeClient, Resource
from cbop.manager import Manager, Options
from cbop_testing.envtest import WRITES_AUDIT_POLICY, ControlPlane

from . import audit
from .control_plane import START_TIMEOUT, _binaries
from .fixtures import install_crd
from .harness import Operator, bundle, set_spec, wait_for

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SHORT_TIMINGS = (
    "--leader-election-lease-duration=6s",
    "--leader-election-renew-deadline=4s",
    "--leader-election-retry-period=1s",
)
FIGURES: dict[str, list[float]] = {}
#: The short timings' lease duration and retry period (seconds).
SHORT_LEASE, SHORT_RETRY = 6.0, 1.0
#: What a failover may take beyond the lease running out: the standby's acquire attempts
#: come every retry period jittered by up to 1.5x (cbop.leaderelection), and on this
#: 2-core machine the standby's thread and the audit log's timestamps may lag by a
#: scheduling delay; 3 s covers both.
FAILOVER_MARGIN = 3.0


def failover_bound(fault_seconds: float = 0.0) -> float:
    """The longest a failover may take with the short timings: the fault itself, a
    lease duration, one jittered retry period, and the margin."""
    return fault_seconds + SHORT_LEASE + 1.5 * SHORT_RETRY + FAILOVER_MARGIN


@pytest.fixture(scope="module")
def audited(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """A control plane of this module's own, auditing writes."""
    control = ControlPlane(
        binaries=_binaries(request.config),
        workdir=tmp_path_factory.mktemp("audited-control-plane"),
        audit_policy=WRITES_AUDIT_POLICY,
    )
    control.start(timeout=START_TIMEOUT)
    try:
        install_crd(control)
        yield control
    finally:
        control.stop()
        path = tmp_path_factory.getbasetemp() / "leader-fencing.json"
        summary = {
            fault: {
                "rounds": len(times),
                "failover_p50_s": round(statistics.median(times), 2),
                "failover_max_s": round(max(times), 2),
                "samples_s": [round(t, 2) for t in times],
            }
            for fault, times in FIGURES.items()
        }
        path.write_text(json.dumps(summary, indent=2) + "\n")


@dataclass
class Replica:
    """One cbop process with leader election, as a user of its own."""

    user: str
    op: Operator
    identity: str = ""

    def leading(self) -> bool:
        if self.op.proc.poll() is not None:
            return False
        values = [
            v for k, v in self.op.metrics().items() if k.startswith("leader_election_master_status")
        ]
        return values == [1.0]

    def exit_code(self, timeout: float = 30.0) -> int:
        return self.op.proc.wait(timeout)


@dataclass
class Cluster:
    """Replicas of cbop electing on one Lease in one namespace, plus an admin client."""

    control: ControlPlane
    kube: KubeClient
    namespace: str
    lease: str
    tmp: Path
    timings: tuple[str, ...]
    extra: tuple[str, ...] = ()
    replicas: list[Replica] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)

    def start_replica(self) -> Replica:
        user = f"cbop-replica-{len(self.replicas)}-{uuid.uuid4().hex[:4]}"
        kubeconfig = self.control.kubeconfig_for_user(user, ("system:masters",))
        op = Operator(
            kubeconfig,
            [self.namespace],
            args=[
                "--leader-elect",
                f"--leader-election-namespace={self.namespace}",
                f"--leader-election-id={self.lease}",
                "--resync-period=0",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                *self.timings,
                *self.extra,
            ],
            log_path=self.tmp / f"{user}.log",
        )
        replica = Replica(user, op)
        self.replicas.append(replica)
        op.wait_ready()
        replica.identity = next(str(r["identity"]) for r in op.log_records() if r.get("identity"))
        return replica

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.op.proc.poll() is None]

    def holder(self) -> Replica | None:
        """The replica the Lease names (None: none, or not one of ours)."""
        try:
            spec = self.kube.get(LEASES, self.namespace, self.lease).get("spec") or {}
        except ApiError:
            return None
        return next((r for r in self.replicas if r.identity == spec.get("holderIdentity")), None)

    def leader(self, timeout: float = 60.0) -> Replica:
        """Wait until one live replica leads (Lease and its own metric agree)."""

        def one() -> Replica | None:
            holder = self.holder()
            if holder is None or holder.op.proc.poll() is not None or not holder.leading():
                return None
            return holder

        found: Replica = wait_for(one, timeout, interval=0.2, message="a leader")
        return found

    def events(self) -> list[dict[str, Any]]:
        return [
            e
            for e in audit.read_events(self.control.audit_log_path)
            if audit.seconds(e["requestReceivedTimestamp"]) >= self.started_at
        ]

    def changes(self) -> list[audit.LeaseChange]:
        return audit.lease_changes(self.events(), self.namespace, self.lease)

    def writes(self) -> list[audit.Write]:
        return audit.writes(self.events(), [r.user for r in self.replicas])

    def acquired_after(self, when: float, timeout: float = 60.0) -> audit.LeaseChange:
        """Wait for the first Lease acquisition committed after ``when``."""

        def first() -> audit.LeaseChange | None:
            return next((c for c in audit.acquisitions(self.changes()) if c.at > when), None)

        found: audit.LeaseChange = wait_for(first, timeout, interval=0.2, message="acquisition")
        return found

    def stop(self) -> None:
        for replica in self.replicas:
            if replica.op.proc.poll() is None:
                replica.op.send(signal.SIGCONT)
            replica.op.stop(signal.SIGKILL)


@pytest.fixture
def cluster_factory(audited: ControlPlane, tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    kube = KubeClient.from_config(kubeconfig=str(audited.kubeconfig_path), qps=0)
    made: list[Cluster] = []

    def make(timings: tuple[str, ...] = SHORT_TIMINGS, extra: tuple[str, ...] = ()) -> Cluster:
        namespace = f"fence-{uuid.uuid4().hex[:8]}"
        kube.create(NAMESPACES, None, {"metadata": {"name": namespace}})
        cluster = Cluster(
            audited,
            kube,
            namespace,
            "cbop-leader",
            tmp_path,
            timings,
            extra,
            started_at=time.time(),
        )
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.stop()
        with contextlib.suppress(ApiError):
            kube.delete(NAMESPACES, None, cluster.namespace)
    kube.close()


def _create_bundles(kube: KubeClient, namespace: str, count: int, value: str) -> None:
    for i in range(count):
        kube.create(CONFIGBUNDLES, namespace, bundle(f"le-{i}", {"data": {"k": value}}))


def _converged(kube: KubeClient, namespace: str, count: int, value: str) -> bool:
    """Every bundle Ready for its generation, with exactly its ConfigMap holding ``value``."""
    bundles = kube.list(CONFIGBUNDLES, namespace)["items"]
    if len(bundles) != count:
        return False
    for b in bundles:
        status = b.get("status") or {}
        if status.get("observedGeneration") != b["metadata"]["generation"]:
            return False
        ready = [c for c in status.get("conditions") or () if c["type"] == "Ready"]
        if not ready or ready[0]["status"] != "True":
            return False
    configmaps = kube.list(
        CONFIGMAPS, namespace, label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"
    )["items"]
    return all(cm.get("data") == {"k": value} for cm in configmaps) and len(configmaps) == count


def _assert_no_duplicate_or_orphan(kube: KubeClient, namespace: str) -> None:
    bundles = {b["metadata"]["uid"]: b for b in kube.list(CONFIGBUNDLES, namespace)["items"]}
    configmaps = kube.list(
        CONFIGMAPS, namespace, label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"
    )["items"]
    owners = []
    for cm in configmaps:
        refs = [r for r in cm["metadata"].get("ownerReferences") or () if r.get("controller")]
        assert len(refs) == 1, f"ConfigMap {cm['metadata']['name']} has no single controller"
        assert refs[0]["uid"] in bundles, f"orphaned ConfigMap {cm['metadata']['name']}"
        assert refs[0]["name"] == cm["metadata"]["name"]
        owners.append(refs[0]["uid"])
    assert sorted(owners) == sorted(bundles), "a bundle without exactly one ConfigMap"


def _settle(cluster: Cluster, count: int, value: str, timeout: float = 120.0) -> None:
    """Converged, no duplicate or orphan, and not one write outside leadership."""
    wait_for(
        lambda: _converged(cluster.kube, cluster.namespace, count, value),
        timeout,
        interval=0.5,
        message=f"{count} bundles converged on k={value}",
    )
    _assert_no_duplicate_or_orphan(cluster.kube, cluster.namespace)
    outside = audit.writes_outside_leadership(cluster.writes(), cluster.changes())
    assert outside == [], f"{len(outside)} writes while another replica held the lease"


def _record(fault: str, seconds: float) -> None:
    FIGURES.setdefault(fault, []).append(seconds)


def test_a_paused_leader_writes_nothing_when_it_wakes(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Issue 10, input 1: SIGSTOP the leader past its lease; it must not write on SIGCONT."""
    cluster = cluster_factory(timings=())
    kube, ns = cluster.kube, cluster.namespace
    _create_bundles(kube, ns, 30, "1")
    a = cluster.start_replica()
    time.sleep(4)
    cluster.start_replica()
    assert cluster.leader() is a
    _settle(cluster, 30, "1")

    a.op.send(signal.SIGSTOP)
    stopped = time.time()
    taken = cluster.acquired_after(stopped, timeout=60)
    assert taken.holder != a.user
    _record("SIGSTOP of the leader (15/10/2 s)", taken.at - stopped)
    for i in range(30):
        set_spec(kube, ns, f"le-{i}", {"data": {"k": "2"}})
    time.sleep(3)
    woke = time.time()
    a.op.send(signal.SIGCONT)
    assert a.exit_code() == 1, "a leader that lost its lease exits non-zero"
    late = [w for w in cluster.writes() if w.user == a.user and w.received >= stopped]
    assert late == [], f"the paused leader wrote after it woke: {late[:5]}"
    _settle(cluster, 30, "2")
    # "k" never went back to "1": no ConfigMap write by A after the pause at all (above),
    # and the final state is "2"; the successor never had to correct drift.
    assert woke > stopped


def _fault_rounds(
    cluster: Cluster,
    rounds: int,
    label: str,
    inject: Callable[[Cluster], float],
    *,
    failover: Callable[[Cluster, float], float] | None = None,
    fault_seconds: Callable[[float], float] = lambda began: 0.0,
) -> None:
    """Two replicas, 20 bundles; per round: settle, inject the fault, change every bundle.

    ``inject`` returns the time the fault began; ``failover`` (default: the next Lease
    acquisition) the time leadership was whole again, which must come within
    :func:`failover_bound` of ``fault_seconds(began)`` (how long the fault itself
    lasted). Replicas that exited are replaced after each round.
    """
    _create_bundles(cluster.kube, cluster.namespace, 20, "0")
    cluster.start_replica()
    cluster.start_replica()
    for n in range(rounds):
        cluster.leader()
        _settle(cluster, 20, str(n))
        began = inject(cluster)
        for i in range(20):
            set_spec(cluster.kube, cluster.namespace, f"le-{i}", {"data": {"k": str(n + 1)}})
        whole = cluster.acquired_after(began).at if failover is None else failover(cluster, began)
        _record(label, whole - began)
        bound = failover_bound(fault_seconds(began))
        assert whole - began <= bound, f"{label}: failover took {whole - began:.1f} s > {bound} s"
        _settle(cluster, 20, str(n + 1))
        # A replica that stopped leading exits (code 1), but not at once: count it as
        # live meanwhile and the next round would start with a single replica.
        for replica in cluster.live():
            if any(r.get("event") == "stopped leading" for r in replica.op.log_records()):
                replica.exit_code()
        while len(cluster.live()) < 2:
            cluster.start_replica()


def test_sigkill_of_the_leader(cluster_factory: Callable[..., Cluster]) -> None:
    def kill(cluster: Cluster) -> float:
        cluster.leader().op.send(signal.SIGKILL)
        return time.time()

    _fault_rounds(cluster_factory(), 3, "SIGKILL of the leader (6/4/1 s)", kill)


def test_sigterm_with_a_backlog_releases_at_once(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Issue 10, input 2: 300 bundles, SIGTERM 2 s later; the standby leads within 5 s."""
    for timings, label in (((), "15/10/2 s"), (SHORT_TIMINGS, "6/4/1 s")):
        cluster = cluster_factory(timings=timings, extra=("--shutdown-timeout=3s",))
        kube, ns = cluster.kube, cluster.namespace
        cluster.start_replica()
        cluster.start_replica()
        leader = cluster.leader()
        created = time.time()
        _create_bundles(kube, ns, 300, "1")
        time.sleep(max(0.0, created + 2 - time.time()))
        leader.op.send(signal.SIGTERM)
        termed = time.time()
        assert leader.exit_code() == 0, leader.op.logs()[-3000:]
        taken = cluster.acquired_after(termed)
        assert taken.holder != leader.user
        _record(f"SIGTERM of the leader, 300-key backlog ({label})", taken.at - termed)
        assert taken.at - termed < 5.0, "the standby must lead within 5 s of SIGTERM"
        released = [
            c
            for c in cluster.changes()
            if c.at >= termed and c.holder is None and c.verb != "delete"
        ]
        assert released, "the leader released the lease"
        after = [
            w for w in cluster.writes() if w.user == leader.user and w.received > released[0].at
        ]
        assert after == [], f"writes after the release: {after[:5]}"
        _settle(cluster, 300, "1", timeout=240)
        cluster.stop()


def test_the_lease_deleted_by_hand(cluster_factory: Callable[..., Cluster]) -> None:
    def delete(cluster: Cluster) -> float:
        cluster.kube.delete(LEASES, cluster.namespace, cluster.lease)
        return time.time()

    _fault_rounds(cluster_factory(), 3, "Lease deleted by hand (6/4/1 s)", delete)


def test_api_server_paused_past_the_renew_deadline(
    cluster_factory: Callable[..., Cluster],
) -> None:
    def pause(cluster: Cluster) -> float:
        cluster.control.pause_apiserver()
        paused = time.time()
        try:
            time.sleep(7)  # renew deadline 4 s, lease 6 s
        finally:
            cluster.control.resume_apiserver()
        return paused

    _fault_rounds(
        cluster_factory(), 2, "API server paused 7 s (6/4/1 s)", pause, fault_seconds=lambda _: 7
    )


def test_one_slow_renewal_does_not_cost_the_lease(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Issue 10, input 3: a 6 s stall of the API server, shorter than the 10 s deadline."""
    cluster = cluster_factory(timings=())
    _create_bundles(cluster.kube, cluster.namespace, 10, "0")
    cluster.start_replica()
    cluster.start_replica()
    leader = cluster.leader()
    _settle(cluster, 10, "0")
    time.sleep(2.5)  # the stall starts right after a renewal, at the worst moment
    cluster.control.pause_apiserver()
    paused = time.time()
    try:
        time.sleep(6)
    finally:
        cluster.control.resume_apiserver()
    for i in range(10):
        set_spec(cluster.kube, cluster.namespace, f"le-{i}", {"data": {"k": "1"}})
    _settle(cluster, 10, "1")
    assert leader.op.proc.poll() is None, leader.op.logs()[-3000:]
    assert cluster.holder() is leader
    assert leader.leading()
    assert [c for c in audit.acquisitions(cluster.changes()) if c.at > paused] == []


def test_api_server_restart(cluster_factory: Callable[..., Cluster]) -> None:
    back: list[float] = []

    def restart(cluster: Cluster) -> float:
        restarted = time.time()
        cluster.control.restart_apiserver()
        back.append(time.time())
        return restarted

    def renewed(cluster: Cluster, began: float) -> float:
        """The first Lease write naming a holder once the API server is back."""

        def first() -> float | None:
            return next((c.at for c in cluster.changes() if c.at > back[-1] and c.holder), None)

        at: float = wait_for(first, 60, interval=0.2, message="a leader after the restart")
        return at

    _fault_rounds(
        cluster_factory(),
        2,
        "API server restart (6/4/1 s)",
        restart,
        failover=renewed,
        fault_seconds=lambda began: back[-1] - began,
    )


def test_caches_that_never_sync_exit_1(namespace: str) -> None:
    """An API server that accepts connections and never answers (no refusal: a 403 or a
    missing CRD is waited out instead): the caches never sync; exit 1 after the timeout.

    Under ``--leader-elect`` the same path runs once leading;
    a replica cannot lead without a working API server, so that variant is unit-tested.
    """
    with socket.create_server(("127.0.0.1", 0)) as silent:  # never accepts, never answers
        configuration = k8s_client.Configuration(
            host=f"https://127.0.0.1:{silent.getsockname()[1]}"
        )
        configuration.verify_ssl = False
        client = KubeClient.from_configuration(configuration)
        manager = Manager(
            client,
            Options(
                namespaces=(namespace,),
                metrics_bind_address="0",
                health_probe_bind_address="0",
                cache_sync_timeout=3.0,
                shutdown_timeout=1.0,
                read_timeout=2.0,
            ),
        )
        try:
            assert manager.run() == 1
        finally:
            client.close()
