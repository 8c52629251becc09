"""Fixtures for tests against a real local control plane (cbop_testing.envtest).

A plugin loaded by tests/conftest.py, so the e2e tests and the tooling tests that need a
control plane (tests/tooling/test_dev_targets.py) share one.

* ``control_plane`` (session): one :class:`cbop_testing.envtest.ControlPlane` for the session,
  with its work directory (and logs) under pytest's base temp directory.
* ``kubeconfig``: path (str) of its admin kubeconfig.
* ``api_client``: a ``kubernetes.client.ApiClient`` loaded from that kubeconfig by the
  client's own loader; ``make_api_client(path)`` makes more, for other kubeconfigs.
* ``namespace``: a fresh, uniquely named namespace per test, deleted afterwards
  (without waiting for the deletion to finish).

The binaries are resolved (and built if missing, which can take long) once after
collection, outside any test's timeout, when an e2e test or a test using
``control_plane`` was collected. When they cannot be had the e2e tests fail with
the reason; they are never skipped (CI sets ``CI`` and must not pass without them).

A failing test's report gets the tail of every component's log. After the session no
process that mentions the base temp directory (every control plane's work directory is
under it) may remain; otherwise the session fails.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import warnings
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from cbop_testing.envtest import (
    Binaries,
    BinariesUnavailableError,
    ControlPlane,
    ControlPlaneError,
    ControlPlaneStartError,
    find_binaries,
)
from cbop_testing.envtest.process import processes_mentioning

_HERE = Path(__file__).parent.resolve()
#: Seconds the session's control plane gets to become ready.
START_TIMEOUT = 90.0
#: Log lines per component attached to a failed test's report.
LOG_TAIL_LINES = 60

_BINARIES = pytest.StashKey[Binaries | str]()
_FAILED = pytest.StashKey[list[str]]()
_SESSION_CP = pytest.StashKey[ControlPlane]()
_STARTUP = pytest.StashKey[float]()
#: pytest-xdist: each worker's summary facts, by worker id (on the controller).
_WORKERS = pytest.StashKey[dict[str, dict[str, Any]]]()
_WORKER_OUTPUT = "cbop_control_plane"


def _is_e2e(item: pytest.Item) -> bool:
    """Whether ``item`` is an e2e test or uses the session's control plane."""
    if "control_plane" in getattr(item, "fixturenames", ()):
        return True
    return _HERE in Path(str(item.path)).resolve().parents


def pytest_collection_finish(session: pytest.Session) -> None:
    """Resolve (building if need be) the binaries once, when e2e tests were collected."""
    if not any(_is_e2e(item) for item in session.items):
        return
    capture = session.config.pluginmanager.getplugin("capturemanager")
    try:
        # Let the build script's progress through: a cold build takes long.
        if capture is not None:
            with capture.global_and_fixture_disabled():
                session.config.stash[_BINARIES] = find_binaries()
        else:
            session.config.stash[_BINARIES] = find_binaries()
    except BinariesUnavailableError as exc:
        where = "in CI (CI is set), so the e2e tests fail" if os.environ.get("CI") else ""
        session.config.stash[_BINARIES] = (
            f"control-plane binaries unavailable{', ' + where if where else ''}: {exc}"
        )


def _binaries(config_: pytest.Config) -> Binaries:
    found = config_.stash.get(_BINARIES, None)
    if found is None:
        try:
            found = find_binaries()
        except BinariesUnavailableError as exc:
            found = f"control-plane binaries unavailable: {exc}"
        config_.stash[_BINARIES] = found
    if isinstance(found, str):
        pytest.fail(found, pytrace=False)
    return found


@pytest.fixture(scope="session")
def control_plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """One control plane for the whole session; logs under the base temp directory."""
    binaries = _binaries(request.config)
    control = ControlPlane(binaries=binaries, workdir=tmp_path_factory.mktemp("control-plane"))
    try:
        control.start(timeout=START_TIMEOUT)
    except ControlPlaneStartError as exc:
        pytest.fail(f"the control plane did not start: {exc}", pytrace=False)
    request.config.stash[_SESSION_CP] = control
    request.config.stash[_STARTUP] = control.startup_seconds
    yield control
    workdir = control.workdir
    control.stop()
    left = processes_mentioning(f"{workdir}{os.sep}")
    assert not left, f"control-plane processes left after stop: {left}"


@pytest.fixture(autouse=True)
def _control_plane_alive(request: pytest.FixtureRequest) -> None:
    """Fail a test up front, with the reason, if a component of the session's control
    plane has died (say, kube-controller-manager: garbage collection would silently stop)."""
    if "control_plane" in request.fixturenames:
        control: ControlPlane = request.getfixturevalue("control_plane")
        try:
            control.check()
        except ControlPlaneError as exc:
            pytest.fail(f"the session's control plane is broken: {exc}", pytrace=False)


@pytest.fixture
def kubeconfig(control_plane: ControlPlane) -> str:
    """Path of the admin kubeconfig (user admin, group system:masters)."""
    return str(control_plane.kubeconfig_path)


def _new_api_client(kubeconfig_path: str | Path) -> client.ApiClient:
    """Return an ``ApiClient`` for a kubeconfig, through the client's own loader."""
    # The loader carries no annotations.
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig_path)
    )
    return api


@pytest.fixture
def api_client(kubeconfig: str) -> Iterator[client.ApiClient]:
    """An admin ``kubernetes.client.ApiClient``, closed after the test."""
    with _new_api_client(kubeconfig) as api:
        yield api


@pytest.fixture
def make_api_client() -> Iterator[Callable[[str | Path], client.ApiClient]]:
    """A factory: ``make_api_client(kubeconfig_path)`` gives an ``ApiClient`` for any
    kubeconfig (e.g. from ``kubeconfig_for_user``); all are closed after the test."""
    with contextlib.ExitStack() as made:

        def make(kubeconfig_path: str | Path) -> client.ApiClient:
            api: client.ApiClient = made.enter_context(_new_api_client(kubeconfig_path))
            return api

        yield make


def _namespace_name(test_name: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].rstrip("-")
    return f"e2e-{slug}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new namespace for this test; deletion is requested afterwards, not awaited."""
    name = _namespace_name(request.node.name)
    core = client.CoreV1Api(api_client)
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"cbop.dev/e2e": "true"}))
    )
    yield name
    try:
        core.delete_namespace(name, propagation_policy="Background", _request_timeout=10)
    except ApiException as exc:
        if exc.status != 404:
            warnings.warn(f"deleting namespace {name} failed: {exc}", stacklevel=1)
    except OSError as exc:  # urllib3's errors are OSErrors; e.g. apiserver left paused
        warnings.warn(f"deleting namespace {name} failed: {exc}", stacklevel=1)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the component logs' tails to the report of a failed e2e test."""
    report: pytest.TestReport = yield
    control = item.config.stash.get(_SESSION_CP, None)
    if report.failed and _is_e2e(item):
        item.config.stash.setdefault(_FAILED, []).append(report.nodeid)
        if control is not None and control.running:
            report.sections.append(
                (
                    f"control-plane logs (last {LOG_TAIL_LINES} lines per component)",
                    control.tail_logs(LOG_TAIL_LINES),
                )
            )
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Report the control plane's start-up time and, after failures, where its logs are
    (under pytest-xdist: each worker's, as :func:`pytest_testnodedown` collected them)."""
    config = terminalreporter.config
    stash = config.stash
    workers = stash.get(_WORKERS, {})
    startup = stash.get(_STARTUP, None)
    if startup is not None:
        terminalreporter.write_line(f"control plane: ready in {startup:.1f}s")
    elif times := [
        f"{w['startup']:.1f}s ({n})" for n, w in sorted(workers.items()) if w["startup"]
    ]:
        terminalreporter.write_line(f"control plane: ready in {', '.join(times)}")
    failed = stash.get(_FAILED, [])
    if failed and stash.get(_SESSION_CP, None) is not None:
        base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        terminalreporter.write_line(
            f"control plane: {len(failed)} e2e failure(s); component logs are kept under {base}"
        )
    for name, worker in sorted(workers.items()):
        if worker["failed"]:
            terminalreporter.write_line(
                f"control plane: {worker['failed']} e2e failure(s) on {name}; component logs"
                f" are kept under {worker['base']}"
            )


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist, on the controller: keep what a finished worker reported for the
    summary (its control plane's start-up time, its e2e failures, its base temp)."""
    output = getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT)
    if output is not None:
        node.config.stash.setdefault(_WORKERS, {})[node.gateway.id] = output


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session if any process started under the base temp directory survives.

    On a pytest-xdist worker, also hand the summary's facts to the controller."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and factory is not None:
        workeroutput[_WORKER_OUTPUT] = {
            "startup": session.config.stash.get(_STARTUP, None),
            "failed": len(session.config.stash.get(_FAILED, [])),
            "base": str(factory.getbasetemp()),
        }
    if factory is None or _BINARIES not in session.config.stash:
        return
    base = factory.getbasetemp()
    left = processes_mentioning(f"{base}{os.sep}")
    if left:
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        lines = "\n".join(f"  {pid}: {cmd[:200]}" for pid, cmd in left.items())
        print(f"\nprocesses started under {base} survived the session (killed now):\n{lines}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
