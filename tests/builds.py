"""The slow builds the selected tests need, started in the background once collected
(loaded by tests/conftest.py).

The tests build what they need on first use, each build under its script's lock: the
node binaries (hack/build-node.sh) and the images (hack/image/build.sh, pause.sh) for
the tests marked ``node``, helm (hack/build-helm.sh) for the modules that use
:func:`tests.e2e.helm.helm_binary`. Cold, that is minutes of waiting in the middle of
the run. So one process starts them right after collection, in two lanes:

* the images at once: mostly downloads (Debian packages, the Debian base, pip);
* the Go builds after the control plane's (``make test`` starts that one first):
  kubelet and kube-scheduler reuse its compiled packages, and meanwhile the control
  plane gets the CPU. Then the node binaries, then helm.

A test that needs a build then waits for it under the same lock and finds it done;
warm, each script returns within a second or so. A failed background build is run
again by the test that needs it, which fails with the script's error; the lanes'
output is in ``<basetemp>/builds/``. Only one process starts the lanes: the
pytest-xdist worker ``gw0``, or the session without ``-n``. At its end it waits for
them (another worker's test may still need them); an interrupted session stops them.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e import helm, images

REPO = Path(__file__).resolve().parents[1]
HACK = REPO / "hack"
#: Seconds the starting process waits for its lanes at the end of a session (at most
#: the builds' own timeouts, tests/e2e/images.py and helm.py, each after the other).
WAIT_SECONDS = 2 * images.BUILD_TIMEOUT + helm.BUILD_TIMEOUT

_RUNNING = pytest.StashKey["Running"]()


@dataclass(frozen=True)
class Lane:
    """Build scripts run one after another in the background, in a session of their own.

    ``name`` names the log file; ``commands`` are argument lists, each run only when
    the one before it succeeded (as ``a && b``).
    """

    name: str
    commands: tuple[tuple[str, ...], ...]


def needed_lanes(items: Iterable[pytest.Item]) -> list[Lane]:
    """Return the lanes of builds that ``items`` need (empty when they need none).

    The node binaries and both images for any test marked ``node``; helm for any test
    whose module uses :func:`tests.e2e.helm.helm_binary`; the cbop image also for one
    whose module uses :func:`tests.e2e.images.cbop_image`.
    """
    node = need_helm = need_image = False
    for item in items:
        module = getattr(item, "module", None)
        node = node or item.get_closest_marker("node") is not None
        need_helm = need_helm or getattr(module, "helm_binary", None) is helm.helm_binary
        need_image = need_image or getattr(module, "cbop_image", None) is images.cbop_image
    lanes = []
    image_builds: list[tuple[str, ...]] = []
    if node or need_image:
        image_builds.append((str(HACK / "image" / "build.sh"), "--if-missing"))
    if node:
        image_builds.append((str(HACK / "image" / "pause.sh"),))
    if image_builds:
        lanes.append(Lane("images", tuple(image_builds)))
    go_builds: list[tuple[str, ...]] = [(str(HACK / "build-node.sh"),)] if node else []
    if need_helm:
        go_builds.append((str(HACK / "build-helm.sh"),))
    if go_builds:
        control_plane = (str(HACK / "build-control-plane.sh"),)
        lanes.append(Lane("go", (control_plane, *go_builds)))
    return lanes


class Running:
    """The lanes started by :func:`start`: each a ``bash`` process leading its own
    process group (so :meth:`stop` ends the scripts and their compilers too)."""

    def __init__(self, procs: Sequence[subprocess.Popen[bytes]]) -> None:
        self.procs = list(procs)

    def wait(self, timeout: float) -> list[int | None]:
        """Wait up to ``timeout`` seconds in all for every lane; stop the ones still
        running then. Returns each lane's exit status (None: it was stopped)."""
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        codes = [proc.poll() for proc in self.procs]
        self.stop()
        return codes

    def stop(self) -> None:
        """Stop every lane still running (SIGTERM to its process group) and reap it."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()


def start(lanes: Sequence[Lane], log_dir: Path) -> Running:
    """Start ``lanes``, each in a new session, output to ``log_dir/<name>.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    for lane in lanes:
        script = " && ".join(shlex.join(command) for command in lane.commands)
        with (log_dir / f"{lane.name}.log").open("wb") as log:
            procs.append(
                subprocess.Popen(
                    ["bash", "-c", script],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=REPO,
                    start_new_session=True,
                )
            )
    return Running(procs)


def _starts_lanes(config: pytest.Config) -> bool:
    """Whether this process starts the lanes: ``gw0``, or a session without workers."""
    if config.getoption("collectonly"):
        return False
    workerinput = getattr(config, "workerinput", None)
    return workerinput is None or workerinput.get("workerid") == "gw0"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the lanes the collected tests need (first: tests/e2e/control_plane.py's
    hook then waits for the control plane's build)."""
    if not _starts_lanes(session.config):
        return
    lanes = needed_lanes(session.items)
    if lanes:
        base = session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        session.config.stash[_RUNNING] = start(lanes, Path(base) / "builds")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Wait for the lanes this process started; stop them if the session was interrupted."""
    running = session.config.stash.get(_RUNNING, None)
    if running is None:
        return
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        running.stop()
    else:
        running.wait(WAIT_SECONDS)
