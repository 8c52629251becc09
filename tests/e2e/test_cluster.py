"""cbop as it runs in a cluster: leader election, its own RBAC identity, probes.

The operator authenticates as the ``cbop`` ServiceAccount of the shipped RBAC (a
TokenRequest token) while kube-apiserver runs the OwnerReferencesPermissionEnforcement
admission plugin (the session control plane always does), so these tests also prove
the ClusterRole suffices for ``blockOwnerDeletion`` (field case 16).
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, KubeClient, Resource
from cbop_testing.envtest import ControlPlane

from .harness import REPO, Operator, bundle, condition, get_or_none, ready, set_spec, wait_for

SECRETS = Resource("", "v1", "secrets", "Secret")


@pytest.fixture(scope="module")
def sa_kubeconfig(control_plane: ControlPlane, crd: None) -> Path:
    """The shipped namespace and RBAC applied; a kubeconfig for cbop-system/cbop."""
    kubectl = str(control_plane.binaries.kubectl)
    for args in (
        ["-f", str(REPO / "manifests" / "namespace.yaml")],
        ["-k", str(REPO / "manifests" / "rbac")],
    ):
        subprocess.run(
            [kubectl, "--kubeconfig", str(control_plane.kubeconfig_path), "apply", *args],
            check=True,
            capture_output=True,
            timeout=60,
        )
    return control_plane.kubeconfig_for_service_account("cbop-system", "cbop")


@pytest.fixture
def elect(sa_kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[Callable[[], Operator]]:
    """Factory of cbop candidates with leader election on a Lease unique to the test."""
    lease = f"cbop-e2e-{uuid.uuid4().hex[:8]}"
    started: list[Operator] = []

    def start() -> Operator:
        op = Operator(
            sa_kubeconfig,
            [namespace],
            args=[
                "--leader-elect",
                "--leader-election-namespace=cbop-system",
                f"--leader-election-id={lease}",
                "--resync-period=0",
            ],
            log_path=tmp_path / f"candidate-{len(started)}.log",
        )
        started.append(op)
        return op.wait_ready()

    yield start
    for op in started:
        op.stop(signal.SIGKILL)


def _leading(op: Operator) -> bool:
    if op.proc.poll() is not None:
        return False
    values = [v for k, v in op.metrics().items() if k.startswith("leader_election_master_status")]
    return values == [1.0]


def _successes(op: Operator) -> float:
    return op.metrics()[
        'controller_runtime_reconcile_total{controller="configbundle",result="success"}'
    ]


def test_service_account_runs_the_operator_under_owner_reference_enforcement(
    sa_kubeconfig: Path, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """The main scenarios as the ``cbop`` identity; and that identity may not read Secrets."""
    sa = KubeClient.from_config(kubeconfig=str(sa_kubeconfig))
    with pytest.raises(ApiError) as denied:
        sa.list(SECRETS, namespace)
    assert denied.value.status == 403
    sa.list(CONFIGMAPS, namespace)

    op = Operator(
        sa_kubeconfig, [namespace], args=["--resync-period=5s"], log_path=tmp_path / "sa.log"
    )
    try:
        op.wait_ready()
        kube.create(CONFIGBUNDLES, namespace, bundle("owned", {"data": {"a": "1"}}))
        kube.create(
            CONFIGBUNDLES,
            namespace,
            bundle("kept", {"data": {"a": "1"}, "deletionPolicy": "Orphan"}),
        )
        wait_for(lambda: ready(kube, namespace, "owned"), 30, message="owned Ready")
        wait_for(lambda: ready(kube, namespace, "kept"), 30, message="kept Ready")
        cm = kube.get(CONFIGMAPS, namespace, "owned")
        assert cm["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] is True
        kube.patch(CONFIGMAPS, namespace, "owned", {"data": {"a": "tampered"}})
        wait_for(
            lambda: kube.get(CONFIGMAPS, namespace, "owned")["data"] == {"a": "1"},
            15,
            message="healed",
        )
        set_spec(kube, namespace, "owned", {"data": {"a": "2"}})
        wait_for(
            lambda: kube.get(CONFIGMAPS, namespace, "owned")["data"] == {"a": "2"},
            15,
            message="updated",
        )
        kube.delete(CONFIGBUNDLES, namespace, "owned")
        kube.delete(CONFIGBUNDLES, namespace, "kept")
        wait_for(lambda: get_or_none(kube, namespace, "owned") is None, 90, message="collected")
        wait_for(
            lambda: (
                (c := get_or_none(kube, namespace, "kept"))
                and not c["metadata"].get("ownerReferences")
            ),
            30,
            message="orphaned",
        )
        m = op.metrics()
        assert m['controller_runtime_reconcile_errors_total{controller="configbundle"}'] == 0, (
            op.logs()[-3000:]
        )
    finally:
        assert op.stop() == 0


def test_exactly_one_leader_reconciles_and_failover_is_fast(
    elect: Callable[[], Operator], kube: KubeClient, namespace: str
) -> None:
    """SIGKILL the leader: the standby takes over within 20 s; SIGTERM: within 5 s."""
    a, b = elect(), elect()
    wait_for(lambda: _leading(a) != _leading(b), 30, message="one leader")
    leader, standby = (a, b) if _leading(a) else (b, a)
    kube.create(CONFIGBUNDLES, namespace, bundle("le", {"data": {"v": "1"}}))
    wait_for(lambda: ready(kube, namespace, "le"), 20, message="reconciled by the leader")
    assert _successes(leader) >= 1
    assert _successes(standby) == 0
    assert standby.get("/readyz")[0] == 200, "a standby keeps warm caches and is ready"

    leader.stop(signal.SIGKILL)
    set_spec(kube, namespace, "le", {"data": {"v": "2"}})
    changed = time.monotonic()
    wait_for(
        lambda: kube.get(CONFIGMAPS, namespace, "le")["data"] == {"v": "2"},
        20,
        message="standby took over",
    )
    assert time.monotonic() - changed <= 20
    assert _leading(standby)

    third = elect()
    time.sleep(1)
    assert not _leading(third)
    assert standby.stop(signal.SIGTERM) == 0, "a graceful stop exits 0 after releasing the lease"
    set_spec(kube, namespace, "le", {"data": {"v": "3"}})
    changed = time.monotonic()
    wait_for(
        lambda: kube.get(CONFIGMAPS, namespace, "le")["data"] == {"v": "3"},
        5,
        message="successor took over",
    )
    assert time.monotonic() - changed <= 5


def test_an_api_server_outage_fails_readyz_not_healthz(
    kube: KubeClient, namespace: str, control_plane: ControlPlane, tmp_path: Path, kubeconfig: str
) -> None:
    """Liveness does not fight outages: a frozen API server fails /readyz, not /healthz.

    Restarting every replica would not bring the API server back; the outage shows on
    /readyz (and in the logs), and both probes are fine once the server is back.
    """
    op = Operator(
        kubeconfig, [namespace], args=["--watch-read-timeout=3s"], log_path=tmp_path / "h.log"
    )
    try:
        op.wait_ready()
        assert op.get("/healthz")[0] == 200
        control_plane.pause_apiserver()
        try:
            # Each informer's own check names the failing request. The informers' watches
            # time out one by one (each 3 s after its own last read): wait for this one's.
            failed = f"[-]informer configmaps/{namespace} failed: "
            wait_for(
                lambda: all(
                    line in op.get("/readyz")[1]
                    for line in ("[-]informers-connected failed", failed)
                ),
                120,
                interval=1,
                message="/readyz 503 with informers-connected and configmaps failed",
            )
            status, body = op.get("/readyz")
            assert status == 503, body
            assert failed in body, body
            assert op.get("/healthz")[0] == 200, "an outage must not fail liveness"
            connected = [v for k, v in op.metrics().items() if "cbop_informer_connected" in k]
            assert 0.0 in connected, connected
        finally:
            control_plane.resume_apiserver()
        wait_for(
            lambda: op.get("/readyz")[0] == 200, 60, interval=0.5, message="/readyz back to 200"
        )
        assert op.get("/healthz")[0] == 200
        kube.create(CONFIGBUNDLES, namespace, bundle("after", {"data": {"a": "1"}}))
        wait_for(lambda: ready(kube, namespace, "after"), 30, message="reconciles again")
        assert condition(kube, namespace, "after") is not None
    finally:
        op.stop()


def test_rotated_token_keeps_cbop_reconciling(
    control_plane: ControlPlane,
    sa_kubeconfig: Path,
    kube: KubeClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The token file is replaced and the old token invalidated; cbop keeps working.

    Tokens are bound to Secrets (TokenRequest ``boundObjectRef``): deleting the Secret
    invalidates its token, as a deleted pod invalidates its projected token.
    """

    def bound_token(secret: dict[str, Any]) -> str:
        meta = secret["metadata"]
        ref = {"kind": "Secret", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]}
        path = control_plane.kubeconfig_for_service_account("cbop-system", "cbop", bound_object=ref)
        return str(yaml.safe_load(path.read_text())["users"][0]["user"]["token"])

    first = kube.create(SECRETS, "cbop-system", {"metadata": {"generateName": "token-binding-"}})
    second = kube.create(SECRETS, "cbop-system", {"metadata": {"generateName": "token-binding-"}})
    token_file = tmp_path / "token"
    old_token = bound_token(first)
    token_file.write_text(old_token)
    doc = yaml.safe_load(sa_kubeconfig.read_text())
    doc["users"][0]["user"] = {"tokenFile": str(token_file)}
    rotating = tmp_path / "rotating.kubeconfig"
    rotating.write_text(yaml.safe_dump(doc))
    doc["users"][0]["user"] = {"token": old_token}
    stale = tmp_path / "stale.kubeconfig"
    stale.write_text(yaml.safe_dump(doc))

    op = Operator(rotating, [namespace], args=["--resync-period=0"], log_path=tmp_path / "rot.log")
    try:
        op.wait_ready()
        kube.create(CONFIGBUNDLES, namespace, bundle("before", {"data": {"a": "1"}}))
        wait_for(lambda: ready(kube, namespace, "before"), 30, message="before Ready")

        token_file.write_text(bound_token(second))
        kube.delete(SECRETS, "cbop-system", first["metadata"]["name"])
        old = KubeClient.from_config(kubeconfig=str(stale), qps=0)

        def rejected() -> bool:
            try:
                old.list(CONFIGMAPS, namespace, limit=1)
            except ApiError as err:
                return err.status == 401
            return False

        wait_for(rejected, 60, interval=1, message="old token rejected")
        old.close()

        kube.create(CONFIGBUNDLES, namespace, bundle("after", {"data": {"a": "2"}}))
        wait_for(lambda: ready(kube, namespace, "after"), 60, message="after Ready, new token")
        set_spec(kube, namespace, "before", {"data": {"a": "changed"}})
        wait_for(
            lambda: kube.get(CONFIGMAPS, namespace, "before")["data"] == {"a": "changed"},
            60,
            message="update with the new token",
        )
        errors = op.metrics()[
            'controller_runtime_reconcile_errors_total{controller="configbundle"}'
        ]
        assert errors == 0, op.logs()[-3000:]
    finally:
        assert op.stop() == 0
