"""The developer make targets as a new user runs them: `make dev`, `make uninstall`, and
cbop's own errors for an address it cannot listen on.

Each test that needs a cluster of its own (make dev starts one; make uninstall deletes the
CRD) starts a detached control plane in a temporary state directory, as `make
dev-cluster` does, and stops it afterwards.
"""

from __future__ import annotations

import contextlib
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

import pytest

from cbop.api import FINALIZER_ORPHAN, LABEL_BUNDLE, LABEL_MANAGED_BY
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, KubeClient
from cbop_testing.envtest import process

from .fixtures import CRDS
from .harness import REPO, bundle, error_lines, free_port, run_cli, wait_for

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
