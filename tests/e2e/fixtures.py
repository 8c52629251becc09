"""Fixtures shared by the operator's end-to-end tests (loaded by tests/conftest.py).

* ``crd`` (session): the ConfigBundle CRD installed and served.
* ``kube``: a :class:`cbop.kube.KubeClient` for the admin, without client-side limits.
* ``cbop``: a factory starting cbop subprocesses scoped to the test's namespace with a
  2 s resync period; every one is stopped (and must stop cleanly) after the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from cbop.kube import CONFIGBUNDLES, CUSTOM_RESOURCE_DEFINITIONS, ApiError, KubeClient
from cbop_testing.envtest import ControlPlane

from .harness import REPO, Operator, wait_for

CRDS = CUSTOM_RESOURCE_DEFINITIONS
RESYNC = "2s"


@pytest.fixture(scope="session")
def crd(control_plane: ControlPlane) -> None:
    """Install the ConfigBundle CRD once and wait until it is served."""
    install_crd(control_plane)


def install_crd(control_plane: ControlPlane) -> None:
    """Install the ConfigBundle CRD in ``control_plane`` and wait until it is served."""
    kube = KubeClient.from_config(kubeconfig=str(control_plane.kubeconfig_path))
    body = yaml.safe_load((REPO / "manifests" / "crd" / "cbop.dev_configbundles.yaml").read_text())
    try:
        kube.create(CRDS, None, body)
    except ApiError as err:
        if not err.is_already_exists:
            raise

    def established() -> bool:
        got = kube.get(CRDS, None, body["metadata"]["name"])
        conds = {c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions") or []}
        if conds.get("Established") != "True":
            return False
        try:
            kube.list(CONFIGBUNDLES, "default", limit=1)
        except ApiError:
            return False
        return True

    wait_for(established, 30, message="CRD established")


@pytest.fixture
def kube(kubeconfig: str, crd: None) -> Iterator[KubeClient]:
    client = KubeClient.from_config(kubeconfig=kubeconfig, qps=0)
    yield client
    client.close()


@pytest.fixture
def cbop(
    kubeconfig: str, namespace: str, tmp_path: Path, crd: None
) -> Iterator[Callable[..., Operator]]:
    """Factory: start cbop scoped to the test namespace; all are stopped after the test."""
    started: list[Operator] = []

    def start(*args: str, namespaces: list[str] | None = None, wait: bool = True) -> Operator:
        op = Operator(
            kubeconfig,
            namespaces if namespaces is not None else [namespace],
            args=["--resync-period", RESYNC, *args],
            log_path=tmp_path / f"cbop-{len(started)}.log",
        )
        started.append(op)
        if wait:
            op.wait_ready()
        return op

    yield start
    # Delete the bundles while cbop still runs, so their Orphan finalizers are handled
    # and the namespace can finish deleting after the test.
    if any(op.proc.poll() is None for op in started):
        kube = KubeClient.from_config(kubeconfig=kubeconfig, qps=0)
        for item in kube.list(CONFIGBUNDLES, namespace)["items"]:
            try:
                kube.delete(CONFIGBUNDLES, namespace, item["metadata"]["name"])
            except ApiError as err:
                if not err.is_not_found:
                    raise
        wait_for(
            lambda: not kube.list(CONFIGBUNDLES, namespace)["items"], 30, message="bundles gone"
        )
        kube.close()
    for op in started:
        code = op.stop()
        assert code in (0, -9), f"cbop did not stop cleanly ({code}):\n{op.logs()[-4000:]}"
