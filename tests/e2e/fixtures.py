"""Fixtures shared by the operator's end-to-end tests (loaded by tests/conftest.py).

* ``crd`` (session): the ConfigBundle CRD installed and served.
* ``kube``: a :class:`cbop.kube.KubeClient` for the admin, without client-side limits.
* ``cbop``: a factory starting cbop subprocesses scoped to the test's namespace with a
  2 s resync period; every one is stopped (and must stop cleanly) after the test.
* ``workload_control_plane`` (shared): a second control plane whose
  kube-controller-manager also runs the workload controllers
  (:data:`tests.e2e.workloads.WORKLOAD_CONTROLLERS`), the CRD installed; for the rollout
  modules, which use namespaces of their own in it.

A shared control plane (a name in :data:`SHARED_PLANES`) starts when the first test that
uses it starts, and stops after the last one selected for the session, not at the end
of the session: idle, it would take CPU from the tests after it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest
import yaml

from cbop.kube import CONFIGBUNDLES, CUSTOM_RESOURCE_DEFINITIONS, ApiError, KubeClient
from cbop_testing.envtest import ControlPlane, ControlPlaneStartError

from .control_plane import START_TIMEOUT, _binaries
from .harness import REPO, Operator, wait_for
from .workloads import WORKLOAD_CONTROLLERS

CRDS = CUSTOM_RESOURCE_DEFINITIONS
RESYNC = "2s"
#: The session-scoped fixtures of control planes that several modules share.
SHARED_PLANES = ("workload_control_plane",)

_LAST_USERS = pytest.StashKey[dict[str, pytest.Item]]()
_RUNNING = pytest.StashKey[dict[str, ControlPlane]]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Note, per shared control plane, the test after which it stops:
    the last selected test of the last module that uses it (so that module's own
    fixtures, a client or a cbop process, end first). trylast: after ``-k`` and ``-m``."""
    last_module: dict[str, pytest.Module | None] = {}
    for item in items:
        for name in SHARED_PLANES:
            if name in getattr(item, "fixturenames", ()):
                last_module[name] = item.getparent(pytest.Module)
    stop_after: dict[str, pytest.Item] = {}
    for item in items:
        for name, module in last_module.items():
            if item.getparent(pytest.Module) is module:
                stop_after[name] = item
    config.stash[_LAST_USERS] = stop_after


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    """Stop each shared control plane after the last test that uses it."""
    try:
        yield
    finally:
        running = item.config.stash.get(_RUNNING, {})
        for name, last in item.config.stash.get(_LAST_USERS, {}).items():
            # The item itself, not its node id: pytest-xdist's loadgroup renames it.
            if last is item and name in running:
                running.pop(name).stop()


@contextlib.contextmanager
def _shared_plane(request: pytest.FixtureRequest, plane: ControlPlane) -> Iterator[ControlPlane]:
    """Start ``plane`` for the shared fixture being set up; stop it after its last user
    (:func:`pytest_runtest_teardown`) or, at the latest, at the end of the session."""
    name = request.fixturename
    assert name in SHARED_PLANES, name
    try:
        plane.start(timeout=START_TIMEOUT)
    except ControlPlaneStartError as exc:
        pytest.fail(f"the shared control plane {name} did not start: {exc}", pytrace=False)
    request.config.stash.setdefault(_RUNNING, {})[name] = plane
    try:
        yield plane
    finally:
        request.config.stash.get(_RUNNING, {}).pop(name, None)
        plane.stop()  # idempotent: a no-op when already stopped after its last user


@pytest.fixture(scope="session")
def workload_control_plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """A control plane that also runs the workload controllers, with the CRD installed."""
    plane = ControlPlane(
        binaries=_binaries(request.config),
        workdir=tmp_path_factory.mktemp("workload-plane"),
        controllers=WORKLOAD_CONTROLLERS,
    )
    with _shared_plane(request, plane) as started:
        install_crd(started)
        yield started


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
