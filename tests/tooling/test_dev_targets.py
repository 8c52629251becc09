"""The developer make targets as a new user runs them: `make dev`, `make dev-cluster` (with
and without a node), `make uninstall`, and cbop's own errors for an address it cannot
listen on.

Each test that needs a cluster of its own (make dev starts one; make uninstall deletes the
CRD) starts a detached control plane in a temporary state directory, as `make
dev-cluster` does, and stops it afterwards.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cbop.api import FINALIZER_ORPHAN, GROUP, LABEL_BUNDLE, LABEL_MANAGED_BY
from cbop.controllers import CONTROLLERS
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, KubeClient
from cbop_testing.envtest import find_binaries, process
from tests.e2e.fixtures import CRDS
from tests.e2e.harness import REPO, bundle, error_lines, free_port, run_cli, wait_for
from tests.e2e.images import BUILD_TIMEOUT

DEV = REPO / "hack" / "dev.sh"
CRD_NAME = "configbundles.cbop.dev"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "REUSE_CLUSTER")}
    env.update(extra)
    return env


def _envtest(state: Path, *args: str, timeout: float = 240.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cbop_testing.envtest", "--state-dir", str(state), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _make(
    *args: str, env: dict[str, str], timeout: float = 240.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-s", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _pid(state: Path) -> int:
    return int((state / "pid").read_text().strip())


@contextlib.contextmanager
def _dev_cluster(state: Path) -> Iterator[Path]:
    """A detached control plane in ``state`` (as `make dev-cluster`); yields its kubeconfig."""
    started = _envtest(state, "start", "--detach", "--timeout=180", timeout=300)
    try:
        assert started.returncode == 0, started.stderr
        yield state / "kubeconfig"
    finally:
        stopped = _envtest(state, "stop", timeout=120)
        assert stopped.returncode == 0, stopped.stderr


@contextlib.contextmanager
def _dev_script(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """hack/dev.sh in its own process group, as a terminal runs it; killed on the way out."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(DEV)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _wait_ready(proc: subprocess.Popen[bytes], probe_port: int, log: Path) -> None:
    """Wait until the cbop that make dev started answers /readyz with 200."""

    def ready() -> bool:
        assert proc.poll() is None, f"make dev exited with {proc.returncode}:\n{log.read_text()}"
        with contextlib.suppress(OSError):
            url = f"http://127.0.0.1:{probe_port}/readyz"
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        return False

    wait_for(ready, 240, interval=0.5, message="cbop started by make dev to be ready")


def _ctrl_c(proc: subprocess.Popen[bytes]) -> int:
    """Send SIGINT to the whole process group, as Ctrl-C does; return the exit status."""
    os.killpg(proc.pid, signal.SIGINT)
    return proc.wait(120)


def _ports() -> dict[str, str]:
    return {"METRICS_ADDR": f"127.0.0.1:{free_port()}", "PROBE_ADDR": f"127.0.0.1:{free_port()}"}


@pytest.mark.parametrize(
    ("variable", "flag"),
    [("METRICS_ADDR", "--metrics-bind-address"), ("PROBE_ADDR", "--health-probe-bind-address")],
)
def test_make_dev_with_a_taken_port_fails_before_starting_anything(
    tmp_path: Path, variable: str, flag: str
) -> None:
    state = tmp_path / "dev"
    with socket.create_server(("127.0.0.1", 0)) as busy:
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        ports = {**_ports(), variable: address}
        result = _make(
            "dev", *(f"{k}={v}" for k, v in ports.items()), f"DEV_CLUSTER_DIR={state}", env=_env()
        )
    assert result.returncode != 0
    assert f"{flag} {address}: Address already in use" in result.stderr, result.stderr
    assert f"make dev {variable}=" in result.stderr
    assert not (state / "pid").exists(), "a control plane was started for nothing"


@pytest.mark.parametrize("flag", ["--metrics-bind-address", "--health-probe-bind-address"])
def test_cbop_names_the_flag_and_address_it_cannot_listen_on(
    kubeconfig: str, crd: None, namespace: str, flag: str
) -> None:
    addresses = {
        "--metrics-bind-address": f"127.0.0.1:{free_port()}",
        "--health-probe-bind-address": f"127.0.0.1:{free_port()}",
    }
    with socket.create_server(("127.0.0.1", 0)) as busy:
        addresses[flag] = f"127.0.0.1:{busy.getsockname()[1]}"
        args = [a for pair in addresses.items() for a in pair]
        result = run_cli(kubeconfig, *args, f"--namespace={namespace}", timeout=90)
    assert result.returncode == 2, result.stderr
    assert error_lines(result.stderr) == [
        f"{flag} {addresses[flag]}: cannot listen: Address already in use"
    ], result.stderr


def test_make_dev_leaves_a_cluster_it_did_not_start_running(tmp_path: Path) -> None:
    state = tmp_path / "dev"
    with _dev_cluster(state):
        pid = _pid(state)
        refused = _make(
            "dev", f"DEV_CLUSTER_DIR={state}", *map("=".join, _ports().items()), env=_env()
        )
        assert refused.returncode != 0
        assert "make dev REUSE_CLUSTER=1" in refused.stderr, refused.stderr
        assert _envtest(state, "status").returncode == 0
        assert _pid(state) == pid

        # Reused: cbop's failure is the exit status, and the cluster stays.
        env = _env(DEV_CLUSTER_DIR=str(state), REUSE_CLUSTER="1", **_ports())
        failed = subprocess.run(
            [str(DEV), "--no-such-flag"],
            check=False,
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert failed.returncode == 2, failed.stderr
        assert "reusing the control plane" in failed.stdout
        assert _envtest(state, "status").returncode == 0

        # Reused, then Ctrl-C: cbop stops, the cluster stays.
        ports = _ports()
        log = tmp_path / "dev.log"
        with _dev_script(_env(DEV_CLUSTER_DIR=str(state), REUSE_CLUSTER="1", **ports), log) as proc:
            _wait_ready(proc, int(ports["PROBE_ADDR"].rsplit(":", 1)[1]), log)
            code = _ctrl_c(proc)
        assert code == 0, log.read_text()
        assert "the control plane keeps running" in log.read_text()
        assert _envtest(state, "status").returncode == 0
        assert _pid(state) == pid


def test_make_dev_stops_the_cluster_it_started(tmp_path: Path) -> None:
    state = tmp_path / "dev"
    ports = _ports()
    log = tmp_path / "dev.log"
    try:
        with _dev_script(_env(DEV_CLUSTER_DIR=str(state), **ports), log) as proc:
            _wait_ready(proc, int(ports["PROBE_ADDR"].rsplit(":", 1)[1]), log)
            components = json.loads((state / "info.json").read_text())["components"]
            code = _ctrl_c(proc)
        assert code == 0, log.read_text()
        assert _envtest(state, "status").returncode == 3, "the control plane still runs"
        assert not [p for p in components.values() if process.pid_alive(p)]
    finally:
        _envtest(state, "stop", timeout=120)


def _kube(kubeconfig: Path) -> KubeClient:
    return KubeClient.from_config(kubeconfig=str(kubeconfig), qps=0)


def _install(kubeconfig: Path) -> KubeClient:
    """`make install` on the cluster; returns a client once ConfigBundles are served."""
    installed = _make("install", env=_env(KUBECONFIG=str(kubeconfig)))
    assert installed.returncode == 0, installed.stderr
    kube = _kube(kubeconfig)
    wait_for(lambda: kube.list(CONFIGBUNDLES, None, limit=1) is not None, 60, message="CRD served")
    return kube


def _crd_gone(kube: KubeClient) -> bool:
    try:
        kube.get(CRDS, None, CRD_NAME)
    except ApiError as err:
        return err.is_not_found
    return False


def test_make_install_serves_every_crd_so_every_sample_applies(tmp_path: Path) -> None:
    """On a fresh control plane, `make install` then `kubectl apply -f manifests/samples/`,
    as a new user does: every CRD a controller of cbop reads is served, and every object
    of every sample file is created (the ClusterConfigBundle of trusted-ca.yaml too)."""
    with _dev_cluster(tmp_path / "dev") as kubeconfig:
        env = _env(KUBECONFIG=str(kubeconfig))
        installed = _make("install", env=env)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        with _kube(kubeconfig) as kube:
            served = {c["metadata"]["name"] for c in kube.list(CRDS, None)["items"]}
        wanted = {
            f"{r.plural}.{r.group}" for d in CONTROLLERS for r in d.resources if r.group == GROUP
        }
        assert wanted == {"configbundles.cbop.dev", "clusterconfigbundles.cbop.dev"}
        assert wanted <= served, served
        kubectl = str(find_binaries().kubectl)
        samples = REPO / "manifests" / "samples"
        applied = subprocess.run(
            [kubectl, "apply", "-f", f"{samples}/"],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert applied.returncode == 0, applied.stderr
        expected = {
            f"{doc['kind']}/{doc['metadata']['name']}".lower()
            for path in sorted(samples.iterdir())
            for doc in yaml.safe_load_all(path.read_text())
            if doc
        }
        assert len(expected) == 6, expected
        listed = subprocess.run(
            [kubectl, "get", "-f", f"{samples}/", "-o", "name"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        got = {line.replace(".cbop.dev", "") for line in listed.stdout.split()}
        assert got == expected, listed.stdout


def test_make_uninstall_without_cbop_releases_orphan_bundles(tmp_path: Path) -> None:
    with _dev_cluster(tmp_path / "dev") as kubeconfig:
        kube = _install(kubeconfig)
        kube.create(
            CONFIGBUNDLES,
            "default",
            bundle("keep", {"deletionPolicy": "Orphan", "data": {"a": "1"}}),
        )
        kube.create(CONFIGBUNDLES, "default", bundle("drop", {"data": {"b": "2"}}))
        # cbop ran once (finalizer added, ConfigMaps created) and is not running now.
        once = run_cli(kubeconfig, "--once", "--namespace=default")
        assert once.returncode == 0, once.stdout + once.stderr
        assert (
            FINALIZER_ORPHAN in kube.get(CONFIGBUNDLES, "default", "keep")["metadata"]["finalizers"]
        )

        started = time.monotonic()
        result = _make("uninstall", env=_env(KUBECONFIG=str(kubeconfig)), timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        assert time.monotonic() - started < 110
        assert _crd_gone(kube)
        assert "releasing them as cbop would" in result.stdout
        assert "uninstall: $ cbop release --all" in result.stdout
        assert (
            "ConfigBundle default/keep: ConfigMap default/keep released (content kept"
            in result.stdout
        ), result.stdout
        assert "left behind (deletionPolicy Orphan" in result.stdout
        assert "ConfigMap default/keep" in result.stdout
        kept = kube.get(CONFIGMAPS, "default", "keep")
        assert kept["data"] == {"a": "1"}
        assert not kept["metadata"].get("ownerReferences")
        labels = kept["metadata"].get("labels") or {}
        assert LABEL_MANAGED_BY not in labels
        assert LABEL_BUNDLE not in labels

        again = _make("uninstall", env=_env(KUBECONFIG=str(kubeconfig)))
        assert again.returncode == 0
        assert "is not installed; nothing to do" in again.stdout


def test_make_uninstall_names_foreign_finalizers_instead_of_hanging(tmp_path: Path) -> None:
    with _dev_cluster(tmp_path / "dev") as kubeconfig:
        kube = _install(kubeconfig)
        held = bundle("held", {"data": {"a": "1"}}, finalizers=["example.com/hold"])
        kube.create(CONFIGBUNDLES, "default", held)
        env = _env(KUBECONFIG=str(kubeconfig))
        result = _make("uninstall", "UNINSTALL_ARGS=--timeout=5", env=env, timeout=120)
        assert result.returncode != 0
        assert "default/held: finalizers example.com/hold" in result.stdout, result.stdout
        assert "kubectl patch configbundle" in result.stdout
        kube.patch(CONFIGBUNDLES, "default", "held", {"metadata": {"finalizers": None}})
        wait_for(lambda: _crd_gone(kube), 60, message="the CRD to go once the finalizer is removed")


def test_warm_binaries_are_never_rebuilt() -> None:
    # The up-to-date check piped kubectl into `grep -q` under pipefail and failed about 5
    # times in 30 (SIGPIPE), rebuilding kubectl for minutes. Without Go on PATH, a run
    # that decided to build would fail instead of compiling.
    script = REPO / "hack" / "build-control-plane.sh"
    env = _env(PATH="/usr/bin:/bin")
    for _ in range(100):
        result = subprocess.run(
            [str(script), "--check"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr


# --------------------------------------------- the dev cluster behaves like a cluster


class _Kubectl:
    """kubectl against one kubeconfig, as a user runs it."""

    def __init__(self, kubeconfig: Path) -> None:
        self.base = [str(find_binaries().kubectl), f"--kubeconfig={kubeconfig}"]

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 120.0) -> str:
        result = subprocess.run(
            [*self.base, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def items(self, *args: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(self("get", *args, "-o", "json"))["items"]
        return items


def _owned_by(items: list[dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    return [
        item
        for item in items
        if any(
            ref["kind"] == kind and ref["name"] == name and ref.get("controller")
            for ref in item["metadata"].get("ownerReferences") or []
        )
    ]


def _deployment(name: str, **template_spec: Any) -> str:
    labels = {"app": name}
    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "labels": {"cbop.dev/rollout": "true"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": name,
                                "image": "cbop:dev",
                                "imagePullPolicy": "Never",
                                **template_spec,
                            }
                        ]
                    },
                },
            },
        }
    )


def _signing_request(user: str) -> str:
    """A CertificateSigningRequest (JSON) for a client certificate of ``user``."""
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, user)]))
        .sign(key, hashes.SHA256())
    )
    pem = csr.public_bytes(serialization.Encoding.PEM)
    return json.dumps(
        {
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"name": user},
            "spec": {
                "request": base64.b64encode(pem).decode(),
                "signerName": "kubernetes.io/kube-apiserver-client",
                "usages": ["client auth"],
            },
        }
    )


#: Error lines kube-controller-manager may log without anything being wrong: one at every
#: start (component-base reads an unset metric-label allow-list manifest), conflicts
#: that a controller retries from a fresh read, and a sync put off because the
#: controller's informer has not yet seen its own last write (the ReplicaSet
#: controller's consistency check, pkg/controller/util/consistency: requeued, seen on a
#: loaded machine).
_HARMLESS_KCM_ERRORS = (
    "The manifest file is empty, ignoring.",
    "the object has been modified",
    "is not as new as written version",
)


def test_the_dev_cluster_runs_kube_controller_managers_default_controllers(
    tmp_path: Path,
) -> None:
    """What docs/rollout.md has a new user try: a Deployment gets a ReplicaSet, a new pod
    template (cbop's rollout) a second one, a Job a pod, an approved CSR its certificate.
    No node: the pods stay Pending."""
    state = tmp_path / "dev"
    with _dev_cluster(state) as kubeconfig:
        kubectl = _Kubectl(kubeconfig)
        kubectl("apply", "-f", "-", stdin=_deployment("web"))
        (first,) = wait_for(
            lambda: _owned_by(kubectl.items("replicasets"), "Deployment", "web"),
            60,
            message="a ReplicaSet of the Deployment",
        )
        rs = first["metadata"]["name"]
        pods = wait_for(
            lambda: (p := _owned_by(kubectl.items("pods"), "ReplicaSet", rs)) and len(p) == 2 and p,
            60,
            message="two pods of the ReplicaSet",
        )
        assert {p["status"]["phase"] for p in pods} == {"Pending"}

        # What cbop's rollout writes: a pod template annotation. A new ReplicaSet rolls it.
        annotation = {"cbop.dev/config-hash": "sha256:" + "0" * 64}
        patch = {"spec": {"template": {"metadata": {"annotations": annotation}}}}
        kubectl("patch", "deployment", "web", "--type=merge", "-p", json.dumps(patch))
        rolled = wait_for(
            lambda: [
                r
                for r in _owned_by(kubectl.items("replicasets"), "Deployment", "web")
                if r["spec"]["template"]["metadata"].get("annotations") == annotation
            ],
            60,
            message="a second ReplicaSet with the new pod template",
        )
        assert rolled[0]["metadata"]["name"] != rs

        kubectl("create", "job", "once", "--image=cbop:dev", "--", "cbop", "--version")
        wait_for(
            lambda: _owned_by(kubectl.items("pods"), "Job", "once"), 60, message="the Job's pod"
        )

        kubectl("apply", "-f", "-", stdin=_signing_request("carol"))
        kubectl("certificate", "approve", "carol")

        def issued() -> bytes:
            csr = json.loads(kubectl("get", "csr", "carol", "-o", "json"))
            return base64.b64decode(csr.get("status", {}).get("certificate", ""))

        cert = x509.load_pem_x509_certificate(wait_for(issued, 60, message="a signed CSR"))
        info = json.loads((state / "info.json").read_text())
        ca = x509.load_pem_x509_certificate((Path(info["workdir"]) / "pki" / "ca.crt").read_bytes())
        cert.verify_directly_issued_by(ca)
        assert cert.subject.rfc4514_string() == "CN=carol"

        log = Path(info["logs"]["kube-controller-manager"]).read_text()
        assert "--controllers=* " in log, "not kube-controller-manager's default set"
        errors = [
            line
            for line in log.splitlines()
            if line.startswith("E") and not any(h in line for h in _HARMLESS_KCM_ERRORS)
        ]
        assert not errors, "\n".join(errors)


@pytest.mark.node
@pytest.mark.timeout(BUILD_TIMEOUT + 900)
def test_make_dev_cluster_with_a_node_serves_kubectl_logs_and_exec(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """`make dev-cluster WITH_NODE=1` as docs/control-plane.md has a user run it; the API
    server reaches the kubelet in the node's network namespace for logs and exec."""
    # A short directory: the kubelet's Unix sockets under it must stay below 108 bytes,
    # also under a pytest-xdist worker's longer base temp (<base>/popen-gw<N>/).
    state = tmp_path_factory.mktemp("dev")
    env = _env()
    try:
        started = _make(
            "dev-cluster", "WITH_NODE=1", f"DEV_CLUSTER_DIR={state}", env=env, timeout=1500
        )
        assert started.returncode == 0, started.stdout + started.stderr
        kubectl = _Kubectl(state / "kubeconfig")
        script = "import time; print('hello from the dev cluster', flush=True); time.sleep(3600)"
        kubectl("apply", "-f", "-", stdin=_deployment("echo", command=["python3", "-c", script]))
        kubectl("rollout", "status", "deployment/echo", "--timeout=180s", timeout=200)

        pods = [
            p["metadata"]["name"]
            for p in kubectl.items("pods", "-l", "app=echo")
            if not p["metadata"].get("deletionTimestamp")
        ]
        assert len(pods) == 2, pods
        for name in pods:
            wait_for(
                functools.partial(kubectl, "logs", name),
                30,
                message=f"kubectl logs {name}",
            )
            assert kubectl("logs", name) == "hello from the dev cluster\n"
            version = kubectl("exec", name, "--", "cbop", "--version")
            assert version.startswith("cbop "), version
            reversed_ = kubectl(
                "exec",
                "-i",
                name,
                "--",
                "python3",
                "-c",
                "import sys; print(sys.stdin.read()[::-1])",
                stdin="stdin reaches the container",
            )
            assert reversed_ == "reniatnoc eht sehcaer nidts\n"
    finally:
        info = (
            json.loads(info_file.read_text()) if (info_file := state / "info.json").exists() else {}
        )
        stopped = _make("dev-cluster-down", f"DEV_CLUSTER_DIR={state}", env=env, timeout=180)
        assert stopped.returncode == 0, stopped.stderr
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    node = info.get("node", {})
    assert node, "the dev cluster ran no node"
    assert not process.processes_mentioning(str(state)), "processes left after dev-cluster-down"
    assert not [line for line in netns.stdout.splitlines() if node["name"] in line]
