"""ClusterConfigBundles under ``--shards 2``: two replicas on a control plane of their own.

Each shard stamps the namespaces whose name hashes into its range; the holder of shard
0 writes the one status from cluster-wide caches, and learns of a refusal in shard 1's
namespace through shard 1's report annotation. Shown: every selected namespace served
exactly once (one ConfigBundle create answered 201 per namespace), one status with the
right counts, the refusal reported and then lifted, and a hand-over (the status
writer's replica stopped) with no namespace lost.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from cbop.clusterbundle import report
from cbop.kube import (
    CLUSTERCONFIGBUNDLES,
    CONFIGBUNDLES,
    LEASES,
    ApiError,
    KubeClient,
)
from cbop.shardrange import shard_of
from cbop_testing.envtest import ControlPlane

from .clusterbundles import (
    BINDINGS,
    POLICIES,
    WAIT,
    bundle_plane,
    configmap_data,
    get,
    make_ccb,
    make_namespace,
    relabel,
    wait_status,
)
from .harness import REPO, Operator, apiserver_writes, wait_for

SHARDS = 2
TIMINGS = (
    "--leader-election-lease-duration=6s",
    "--leader-election-renew-deadline=4s",
    "--leader-election-retry-period=1s",
)
SELECT = {"shard.test/ca": "yes"}
REFUSE = "shard.test/refuse"


@dataclass
class Plane:
    """A control plane of the module's own, an admin client, and the replicas started."""

    control: ControlPlane
    kube: KubeClient
    tmp: Path
    group: str = field(default_factory=lambda: f"ccb-{secrets.token_hex(3)}")
    replicas: list[Operator] = field(default_factory=list)

    def start(self) -> Operator:
        op = Operator(
            self.control.kubeconfig_path,
            [],
            args=[
                "--leader-elect",
                "--leader-election-namespace=default",
                f"--leader-election-id={self.group}",
                f"--shards={SHARDS}",
                "--resync-period=2s",
                "--no-rollout",
                *TIMINGS,
            ],
            log_path=self.tmp / f"cbop-{len(self.replicas)}.log",
        )
        self.replicas.append(op)
        op.wait_ready(60)
        return op

    def identity(self, op: Operator) -> str:
        def joined() -> list[str]:
            return [
                str(r["identity"])
                for r in op.log_records()
                if r.get("event") == "joining the shard group"
            ]

        return str(wait_for(joined, 30, message="the joining log line")[0])

    def holders(self) -> dict[int, str]:
        """Shard index -> the identity holding its Lease."""
        out = {}
        for lease in self.kube.list(LEASES, "default")["items"]:
            name = lease["metadata"]["name"]
            if name.startswith(f"{self.group}-shard-"):
                holder = (lease.get("spec") or {}).get("holderIdentity")
                if holder:
                    out[int(name.rsplit("-", 1)[1])] = str(holder)
        return out


@pytest.fixture(scope="module")
def plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Plane]:
    with bundle_plane(request.config, tmp_path_factory, "sharded-cluster-bundles") as (
        control,
        kube,
    ):
        found = Plane(control, kube, tmp_path_factory.mktemp("sharded-cluster-bundles"))
        yield found
        for op in found.replicas:
            if op.proc.poll() is None:
                assert op.stop(timeout=80.0) in (0, -9), op.logs()[-4000:]


def names_in(shard: int, count: int) -> list[str]:
    """``count`` random namespace names whose hash falls in ``shard``."""
    out: list[str] = []
    while len(out) < count:
        name = f"{secrets.token_hex(3)}-sharded"
        if shard_of(name, SHARDS) == shard:
            out.append(name)
    return out


def refusing_policy(kube: KubeClient) -> None:
    """The shipped protected-namespace policy, bound to namespaces labelled REFUSE."""
    policy, binding = yaml.safe_load_all(
        (REPO / "manifests" / "policy" / "protected_namespaces.yaml").read_text()
    )
    binding["spec"]["matchResources"]["namespaceSelector"] = {"matchLabels": {REFUSE: "yes"}}
    kube.create(POLICIES, None, policy)
    kube.create(BINDINGS, None, binding)


def test_two_shards_serve_every_namespace_once_under_one_status(plane: Plane) -> None:
    kube = plane.kube
    served = {0: names_in(0, 4), 1: names_in(1, 4)}
    (refused,) = names_in(1, 1)
    for name in (*served[0], *served[1]):
        make_namespace(kube, name, SELECT)
    make_namespace(kube, refused, {**SELECT, REFUSE: "yes"})
    make_namespace(kube, "sharded-unselected")
    refusing_policy(kube)

    def enforced() -> bool:
        try:
            kube.create(
                CONFIGBUNDLES,
                refused,
                {
                    "apiVersion": CONFIGBUNDLES.api_version,
                    "kind": "ConfigBundle",
                    "metadata": {"name": "probe"},
                    "spec": {},
                },
                dry_run=True,
            )
        except ApiError as err:
            return err.status in (403, 422)
        return False

    wait_for(enforced, WAIT, interval=0.5, message="the policy enforced")

    first, second = plane.start(), plane.start()
    by_identity = {plane.identity(op): op for op in (first, second)}
    wait_for(
        lambda: len(plane.holders()) == SHARDS and len(set(plane.holders().values())) == SHARDS,
        60,
        message="one shard each",
    )
    created = apiserver_writes(kube, ("configbundles",), codes=("201",))

    make_ccb(kube, "sharded-ca", {"matchLabels": SELECT})
    got = wait_status(kube, "sharded-ca", selected=9, ready=8, failed=1)
    (failure,) = got["failedNamespaces"]
    assert (failure["namespace"], failure["reason"]) == (refused, "Refused")
    assert f"protected namespace {refused}" in failure["message"]
    for name in (*served[0], *served[1]):
        assert configmap_data(kube, name, "sharded-ca") == {"ca.crt": "CA-1"}, name
    assert get(kube, CONFIGBUNDLES, refused, "sharded-ca") is None
    assert get(kube, CONFIGBUNDLES, "sharded-unselected", "sharded-ca") is None
    # The refusal reached the status writer through shard 1's report only.
    annotations = kube.get(CLUSTERCONFIGBUNDLES, None, "sharded-ca")["metadata"]["annotations"]
    reports = {k: v for k, v in annotations.items() if k.startswith(report.REPORT_PREFIX)}
    assert list(reports) == [report.report_key(1, SHARDS)]
    assert [f.namespace for f in report.decode(reports[report.report_key(1, SHARDS)])] == [refused]

    def creates() -> float:
        now = apiserver_writes(kube, ("configbundles",), codes=("201",))
        return sum(now.values()) - sum(created.values())

    assert creates() == 8, "one stamp create per served namespace, by one shard"

    # Hand-over: the status writer's replica stops; the other takes shard 0 too, and
    # namespaces created in both shards are served and counted.
    writer = by_identity[plane.holders()[0]]
    other = second if writer is first else first
    assert writer.stop(timeout=80.0) == 0
    other_id = plane.identity(other)
    wait_for(lambda: plane.holders() == {0: other_id, 1: other_id}, 60, message="one holds both")
    late = [names_in(0, 1)[0], names_in(1, 1)[0]]
    for name in late:
        make_namespace(kube, name, SELECT)
    got = wait_status(kube, "sharded-ca", selected=11, ready=10, failed=1)
    assert [f["namespace"] for f in got["failedNamespaces"]] == [refused]
    wait_for(
        lambda: all(configmap_data(kube, n, "sharded-ca") == {"ca.crt": "CA-1"} for n in late),
        WAIT,
        message="the namespaces created after the hand-over served",
    )

    # The refusal lifted: served, counted, and the report cleared.
    relabel(kube, refused, {REFUSE: None})
    wait_status(kube, "sharded-ca", selected=11, ready=11, failed=0)

    def report_gone() -> bool:
        meta = kube.get(CLUSTERCONFIGBUNDLES, None, "sharded-ca")["metadata"]
        return not any(k.startswith(report.REPORT_PREFIX) for k in meta.get("annotations") or {})

    wait_for(report_gone, WAIT, message="shard 1's report cleared")
    assert creates() == 11, "every namespace served exactly once across the hand-over"
    assert other.stop(timeout=80.0) == 0
