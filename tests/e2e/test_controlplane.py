"""End-to-end checks of the local control plane itself (cbop_testing.envtest).

Each test asserts behaviour the operator's own e2e tests rely on: the official client
works through the generated kubeconfig, the garbage collector and namespace controller
run, compaction and restarts surface as on a real cluster, service-account tokens and
RBAC are enforced, and nothing is left running afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kubernetes import client, watch
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from cbop_testing.envtest import ControlPlane, ControlPlaneError, ControlPlaneStartError
from cbop_testing.envtest.process import pid_alive, processes_mentioning

REPO = Path(__file__).resolve().parents[2]
MakeClient = Callable[[str | Path], client.ApiClient]


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.2) -> float:
    """Poll ``condition`` until true; return the seconds it took; fail after ``timeout``."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout:
            pytest.fail(f"condition not met within {timeout}s")
        time.sleep(interval)
    return time.monotonic() - began


def meta(obj: Any) -> client.V1ObjectMeta:
    """The metadata of an API object (always set on what the server returns)."""
    metadata = obj.metadata
    assert isinstance(metadata, client.V1ObjectMeta)
    return metadata


def list_rv(listing: Any) -> str:
    """The resourceVersion of a list response."""
    rv = listing.metadata.resource_version
    assert isinstance(rv, str)
    return rv


def watch_events(list_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
    """``kubernetes.watch.Watch().stream`` (untyped in the client) for typed callers."""
    stream = watch.Watch()  # type: ignore[no-untyped-call]
    yield from stream.stream(list_fn, *args, **kwargs)  # type: ignore[no-untyped-call]


def user_info(review: Any) -> client.V1UserInfo:
    """The authenticated user of a SelfSubjectReview answer."""
    info = review.status.user_info
    assert isinstance(info, client.V1UserInfo)
    return info


def config_map(name: str, data: dict[str, str], **meta: Any) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, **meta), data=data)


def gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_configmap_create_get_update_delete_and_watch(
    api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    start_rv = list_rv(core.list_namespaced_config_map(namespace))

    created = core.create_namespaced_config_map(namespace, config_map("cm", {"a": "1"}))
    assert meta(created).uid
    got = core.read_namespaced_config_map("cm", namespace)
    assert got.data == {"a": "1"}

    got.data = {"a": "2", "b": "3"}
    updated = core.replace_namespaced_config_map("cm", namespace, got)
    assert updated.data == {"a": "2", "b": "3"}
    assert int(meta(updated).resource_version or 0) > int(meta(created).resource_version or 0)
    patched = core.patch_namespaced_config_map("cm", namespace, {"data": {"c": "4"}})
    assert patched.data == {"a": "2", "b": "3", "c": "4"}

    core.delete_namespaced_config_map("cm", namespace)
    assert gone(lambda: core.read_namespaced_config_map("cm", namespace))

    # The watch replays everything since the list's resourceVersion, in order.
    seen: list[tuple[str, dict[str, str] | None]] = []
    for event in watch_events(
        core.list_namespaced_config_map,
        namespace,
        resource_version=start_rv,
        timeout_seconds=10,
    ):
        obj = event["object"]
        if meta(obj).name == "cm":
            seen.append((event["type"], obj.data))
        if event["type"] == "DELETED":
            break
    assert seen == [
        ("ADDED", {"a": "1"}),
        ("MODIFIED", {"a": "2", "b": "3"}),
        ("MODIFIED", {"a": "2", "b": "3", "c": "4"}),
        ("DELETED", {"a": "2", "b": "3", "c": "4"}),
    ]


def test_garbage_collector_deletes_dependents(api_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api_client)
    owner = core.create_namespaced_config_map(namespace, config_map("owner", {}))
    reference = client.V1OwnerReference(
        api_version="v1",
        kind="ConfigMap",
        name="owner",
        uid=meta(owner).uid or "",
        block_owner_deletion=True,
    )
    core.create_namespaced_config_map(
        namespace, config_map("dependent", {"x": "y"}, owner_references=[reference])
    )
    core.delete_namespaced_config_map("owner", namespace)
    took = wait_until(
        lambda: gone(lambda: core.read_namespaced_config_map("dependent", namespace)), 30
    )
    print(f"dependent collected {took:.1f}s after its owner was deleted")


def test_namespace_with_objects_finishes_deleting(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    name = f"e2e-ns-delete-{os.getpid()}-{time.monotonic_ns() % 100000}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    for i in range(3):
        core.create_namespaced_config_map(name, config_map(f"cm-{i}", {"i": str(i)}))
    core.create_namespaced_secret(
        name, client.V1Secret(metadata=client.V1ObjectMeta(name="s"), string_data={"k": "v"})
    )
    core.delete_namespace(name)
    took = wait_until(lambda: gone(lambda: core.read_namespace(name)), 60)
    print(f"namespace with 4 objects deleted in {took:.1f}s")


def _watch_error_status(
    list_fn: Callable[..., Any], namespace: str, resource_version: str
) -> int | None:
    """Watch from ``resource_version``; return the HTTP status of an error, or None."""
    try:
        for _event in watch_events(
            list_fn, namespace, resource_version=resource_version, timeout_seconds=3
        ):
            pass
    except ApiException as exc:
        return int(exc.status)
    return None


def test_watch_from_compacted_revision_gets_410(
    control_plane: ControlPlane,
    api_client: client.ApiClient,
    make_api_client: MakeClient,
    namespace: str,
) -> None:
    core = client.CoreV1Api(api_client)
    events = client.CoreV1Api(api_client).list_namespaced_event
    core.create_namespaced_config_map(namespace, config_map("before", {}))
    old_rv = list_rv(core.list_namespaced_config_map(namespace))
    old_events_rv = list_rv(core.list_namespaced_event(namespace))
    # Some writes after the old revision, so it is strictly older than the compaction.
    for i in range(3):
        core.create_namespaced_config_map(namespace, config_map(f"after-{i}", {}))

    revision = control_plane.compact_etcd()
    assert revision > int(old_rv)

    # Events are not in the apiserver's watch cache: such watches go to etcd directly,
    # which has discarded the old revision.
    assert _watch_error_status(events, namespace, old_events_rv) == 410
    # ConfigMaps are; the cache keeps its own recent window, unaffected by compaction...
    assert _watch_error_status(core.list_namespaced_config_map, namespace, old_rv) is None
    # ...until the apiserver restarts: the new cache starts at etcd's current revision.
    control_plane.restart_apiserver()
    fresh_core = client.CoreV1Api(make_api_client(control_plane.kubeconfig_path))
    status = _watch_error_status(fresh_core.list_namespaced_config_map, namespace, old_rv)
    assert status == 410


def test_data_survives_apiserver_restart(
    control_plane: ControlPlane,
    api_client: client.ApiClient,
    make_api_client: MakeClient,
    namespace: str,
) -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_config_map(namespace, config_map("persistent", {"k": "v"}))
    url = control_plane.api_url
    old_pid = control_plane.pids()["kube-apiserver"]

    control_plane.restart_apiserver()

    assert control_plane.api_url == url
    assert control_plane.pids()["kube-apiserver"] != old_pid
    assert not pid_alive(old_pid)
    fresh_core = client.CoreV1Api(make_api_client(control_plane.kubeconfig_path))
    assert fresh_core.read_namespaced_config_map("persistent", namespace).data == {"k": "v"}
    fresh_core.create_namespaced_config_map(namespace, config_map("after-restart", {}))
    # The controller manager reconnects: garbage collection still works afterwards.
    owner = core.create_namespaced_config_map(namespace, config_map("owner", {}))
    ref = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=meta(owner).uid or ""
    )
    core.create_namespaced_config_map(namespace, config_map("dep", {}, owner_references=[ref]))
    core.delete_namespaced_config_map("owner", namespace)
    wait_until(lambda: gone(lambda: core.read_namespaced_config_map("dep", namespace)), 30)


def _grant_configmap_reading(rbac: client.RbacAuthorizationV1Api, namespace: str) -> None:
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="configmap-reader"),
            rules=[
                client.V1PolicyRule(
                    api_groups=[""], resources=["configmaps"], verbs=["get", "list", "watch"]
                )
            ],
        ),
    )


def test_service_account_token_authenticates_and_rbac_limits_it(
    control_plane: ControlPlane,
    api_client: client.ApiClient,
    make_api_client: MakeClient,
    namespace: str,
) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)
    _grant_configmap_reading(rbac, namespace)
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="robot-reads-configmaps"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="configmap-reader"
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name="robot", namespace=namespace)
            ],
        ),
    )
    client.CoreV1Api(api_client).create_namespaced_config_map(namespace, config_map("c", {}))

    path = control_plane.kubeconfig_for_service_account(namespace, "robot", expiration_seconds=600)

    robot = make_api_client(path)
    review = client.AuthenticationV1Api(robot).create_self_subject_review(
        client.V1SelfSubjectReview()
    )
    assert user_info(review).username == f"system:serviceaccount:{namespace}:robot"
    core = client.CoreV1Api(robot)
    names = [meta(cm).name for cm in core.list_namespaced_config_map(namespace).items]
    assert names == ["c"]
    with pytest.raises(ApiException) as denied:
        core.list_namespaced_secret(namespace)
    assert denied.value.status == 403
    with pytest.raises(ApiException) as denied_write:
        core.create_namespaced_config_map(namespace, config_map("nope", {}))
    assert denied_write.value.status == 403


def test_user_certificate_kubeconfig_carries_user_and_groups(
    control_plane: ControlPlane,
    api_client: client.ApiClient,
    make_api_client: MakeClient,
    namespace: str,
) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)
    _grant_configmap_reading(rbac, namespace)
    path = control_plane.kubeconfig_for_user("alice", ["cbop-e2e-readers", "staff"])
    alice = make_api_client(path)
    info = user_info(
        client.AuthenticationV1Api(alice).create_self_subject_review(client.V1SelfSubjectReview())
    )
    assert info.username == "alice"
    assert {"cbop-e2e-readers", "staff", "system:authenticated"} <= set(info.groups or ())
    core = client.CoreV1Api(alice)
    with pytest.raises(ApiException) as denied:
        core.list_namespaced_config_map(namespace)
    assert denied.value.status == 403
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="readers"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="configmap-reader"
            ),
            subjects=[
                client.RbacV1Subject(
                    kind="Group",
                    name="cbop-e2e-readers",
                    api_group="rbac.authorization.k8s.io",
                )
            ],
        ),
    )
    # RBAC's authorizer cache follows the binding within moments.
    wait_until(lambda: _can_list_configmaps(core, namespace), 10)


def test_a_control_plane_without_nodes_has_no_way_to_kubelets(
    control_plane: ControlPlane, api_client: client.ApiClient
) -> None:
    with pytest.raises(ControlPlaneError, match="was not made for nodes"):
        _ = control_plane.cluster_egress_socket
    assert not (control_plane.workdir / "egress-selector.yaml").exists()
    bindings = client.RbacAuthorizationV1Api(api_client).list_cluster_role_binding()
    assert not [b for b in bindings.items if b.role_ref.name == "system:kubelet-api-admin"]
    # Certificates from the cluster CA are still issued, for whatever a test serves.
    pair = control_plane.issue_certificate("svc", client=False, server=True, dns_names=["svc"])
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    cert.verify_directly_issued_by(
        x509.load_pem_x509_certificate(control_plane.ca_path.read_bytes())
    )
    assert cert.subject.rfc4514_string() == "CN=svc"


def _can_list_configmaps(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.list_namespaced_config_map(namespace)
    except ApiException as exc:
        if exc.status == 403:
            return False
        raise
    return True


def test_pause_and_resume_apiserver(control_plane: ControlPlane, kubeconfig: str) -> None:
    configuration = client.Configuration()
    kube_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig, client_configuration=configuration
    )
    configuration.retries = 0
    with client.ApiClient(configuration) as api:
        core = client.CoreV1Api(api)
        core.list_namespace(_request_timeout=5)
        control_plane.pause_apiserver()
        try:
            assert control_plane.apiserver_paused
            began = time.monotonic()
            with pytest.raises(Exception) as hung:  # noqa: PT011 - urllib3's timeout types vary
                core.list_namespace(_request_timeout=2)
            assert "timed out" in str(hung.value).lower() or "timeout" in repr(hung.value).lower()
            assert time.monotonic() - began < 10
            assert not control_plane.apiserver_ready(timeout=1)
        finally:
            control_plane.resume_apiserver()
        assert not control_plane.apiserver_paused
        wait_until(lambda: control_plane.apiserver_ready(timeout=2), 30)
        assert core.list_namespace(_request_timeout=5).items


def _assert_nothing_left(workdir: Path, pids: list[int], timeout: float = 15) -> None:
    def clean() -> bool:
        return not any(pid_alive(p) for p in pids) and not processes_mentioning(str(workdir))

    wait_until(clean, timeout)


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    control = ControlPlane(workdir=tmp_path / "cp")
    control.start()
    try:
        pids = list(control.pids().values())
        assert len(pids) == 3
        assert all(pid_alive(p) for p in pids)
        workdir = control.workdir
        assert processes_mentioning(str(workdir)).keys() == set(pids)
        control.restart_apiserver()
        spawned = list(control.spawned_pids)
        assert len(spawned) == 4 + sum(control.respawns.values())
        control.check()
        # A dead component is reported, with the reason, rather than left unnoticed.
        os.kill(control.pids()["kube-controller-manager"], signal.SIGKILL)
        wait_until(lambda: "kube-controller-manager" not in control.pids(), 5)
        with pytest.raises(ControlPlaneError, match=r"kube-controller-manager .* status -9"):
            control.check()
    finally:
        control.stop()
    assert not control.running
    assert control.pids() == {}
    # Stop reaps: immediately nothing is left, without waiting.
    assert not any(pid_alive(p) for p in spawned)
    assert not processes_mentioning(str(workdir))


_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from cbop_testing.envtest import ControlPlane, ControlPlaneError
    control = ControlPlane(workdir=Path(sys.argv[1]))
    control.start()
    print(json.dumps(list(control.pids().values())), flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_killed_parent_leaves_no_orphans(tmp_path: Path, sig: signal.Signals) -> None:
    workdir = tmp_path / "cp"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *sys.path])}
    parent = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(workdir)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        pids = json.loads(line)
        assert len(pids) == 3
        assert all(pid_alive(p) for p in pids)
        parent.send_signal(sig)
        assert parent.wait(timeout=30) == -sig
        # SIGTERM: the handler stops the children; SIGKILL: the kernel does
        # (PR_SET_PDEATHSIG).
        _assert_nothing_left(workdir, pids)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_nothing_survives_a_pytest_session(tmp_path: Path) -> None:
    base = tmp_path / "inner"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *sys.path])}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--basetemp={base}",
            f"{Path(__file__)}::test_configmap_create_get_update_delete_and_watch",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "1 passed" in result.stdout
    assert "control plane: ready in" in result.stdout
    assert not processes_mentioning(f"{base}{os.sep}")


def test_dev_cluster_cli_detaches_and_stops(tmp_path: Path, make_api_client: MakeClient) -> None:
    state = tmp_path / "dev-cluster"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *sys.path])}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cbop_testing.envtest", f"--state-dir={state}", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    started = cli("start", "--detach")
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == f"export KUBECONFIG={state / 'kubeconfig'}"
    assert (state / "env").read_text().strip() == started.stdout.strip()
    daemon = int((state / "pid").read_text())
    info = json.loads((state / "info.json").read_text())
    try:
        # The daemon outlived the command that started it.
        assert pid_alive(daemon)
        core = client.CoreV1Api(make_api_client(state / "kubeconfig"))
        assert "default" in [meta(ns).name for ns in core.list_namespace().items]
        status = cli("status")
        assert status.returncode == 0
        assert info["api_url"] in status.stdout
        again = cli("start", "--detach")
        assert again.returncode == 0
        assert "already running" in again.stderr
    finally:
        stopped = cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not pid_alive(daemon)
    assert not any(pid_alive(p) for p in info["components"].values())
    assert not processes_mentioning(f"{state}{os.sep}")
    assert not (state / "kubeconfig").exists()
    assert cli("status").returncode == 3


def test_failed_start_reports_the_log_and_leaves_nothing(tmp_path: Path) -> None:
    control = ControlPlane(workdir=tmp_path / "cp", extra_apiserver_flags=["--no-such-flag"])
    with pytest.raises(ControlPlaneStartError) as failed:
        control.start(timeout=30)
    message = str(failed.value)
    assert "kube-apiserver exited with status" in message
    assert "unknown flag: --no-such-flag" in message
    assert not control.running
    assert control.spawned_pids  # etcd and kube-apiserver were started...
    assert not any(pid_alive(p) for p in control.spawned_pids)  # ...and are gone
    assert not processes_mentioning(f"{tmp_path / 'cp'}{os.sep}")
