"""Command line for the local control plane: ``python -m cbop_testing.envtest start|stop|status``.

``start`` runs a :class:`~cbop_testing.envtest.ControlPlane` in the foreground until SIGTERM or
Ctrl-C; ``start --detach`` runs it as a background daemon that survives the calling
shell (and ``make``) and returns once it is ready. Either way the admin kubeconfig is
copied to ``<state-dir>/kubeconfig``, the line ``export KUBECONFIG=...`` is written to
``<state-dir>/env`` and printed, and the daemon's pid is kept in ``<state-dir>/pid``.
``stop`` ends the daemon named by the pid file; ``status`` reports on it. A second
``start --detach`` on a running state directory reuses it (exit 0, it says so), or with
``--fail-if-running`` exits 4 and leaves it alone.

The control plane runs kube-controller-manager's default controller set (``*``,
:data:`~cbop_testing.envtest.components.DEV_CLUSTER_CONTROLLERS`), so Deployments make
ReplicaSets and Jobs make Pods as on any cluster; the e2e harness's
:class:`~cbop_testing.envtest.ControlPlane` keeps a smaller set by default.

``start --with-node`` also runs a :class:`~cbop_testing.envtest.node.Node` (kubelet and
containerd) with the podman image ``localhost/cbop:dev`` loaded (``make image``); its
work directory is ``<state-dir>/node`` (container logs in ``node/pod-logs``); ``kubectl
logs`` and ``kubectl exec`` reach its pods through the API server.

The state directory defaults to ``${XDG_CACHE_HOME:-~/.cache}/cbop/dev-cluster``;
``make dev-cluster`` / ``make dev-cluster-down`` / ``make dev`` pass ``--state-dir``
``.dev-cluster`` in the checkout, so each checkout has its own cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from cbop_testing.envtest import process
from cbop_testing.envtest.binaries import repo_root
from cbop_testing.envtest.components import DEV_CLUSTER_CONTROLLERS
from cbop_testing.envtest.controlplane import ControlPlane
from cbop_testing.envtest.errors import EnvtestError
from cbop_testing.envtest.node import Node

#: Exit status of ``status`` when no control plane runs (as LSB init scripts).
EXIT_NOT_RUNNING = 3
#: Exit status of ``start --detach --fail-if-running`` when one already runs.
EXIT_ALREADY_RUNNING = 4
#: Seconds ``stop`` waits for the daemon to exit after SIGTERM before SIGKILL.
STOP_TIMEOUT = 30.0


def default_state_dir() -> Path:
    """Return ``${XDG_CACHE_HOME:-$HOME/.cache}/cbop/dev-cluster``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cbop" / "dev-cluster"


class _Files:
    """Paths inside a state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir
        self.pid = state_dir / "pid"
        self.env = state_dir / "env"
        self.kubeconfig = state_dir / "kubeconfig"
        self.info = state_dir / "info.json"
        self.daemon_log = state_dir / "daemon.log"
        self.workdir = state_dir / "state"

    def clear(self) -> None:
        for path in (self.pid, self.env, self.kubeconfig, self.info):
            path.unlink(missing_ok=True)


def _export_line(kubeconfig: Path) -> str:
    return f"export KUBECONFIG={shlex.quote(str(kubeconfig))}"


def _running_pid(files: _Files) -> int | None:
    """Pid of the live daemon of this state directory, or None (stale files removed)."""
    try:
        pid = int(files.pid.read_text(encoding="utf-8").strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        cmdline = b""
    if process.pid_alive(pid) and b"cbop_testing.envtest" in cmdline:
        return pid
    return None


class _StopRequestedError(Exception):
    """Raised in the main thread by the SIGTERM/SIGINT/SIGHUP handler of ``start``."""


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    raise _StopRequestedError(signal.Signals(signum).name)


def _start_node(control_plane: ControlPlane, files: _Files) -> Node:
    """Start a node with ``localhost/cbop:dev`` and the pause image (hack/image/pause.sh)."""
    root = repo_root()
    if root is None:
        raise EnvtestError("--with-node needs a source checkout (hack/image/pause.sh)")
    pause = subprocess.run(
        [str(root / "hack" / "image" / "pause.sh")], capture_output=True, text=True, check=False
    )
    if pause.returncode != 0:
        raise EnvtestError(f"hack/image/pause.sh failed: {pause.stderr}")
    node = Node(
        control_plane,
        images=["localhost/cbop:dev"],
        pause_image=pause.stdout.strip(),
        workdir=files.workdir.parent / "node",
    )
    node.start()
    return node


def _run_foreground(files: _Files, timeout: float, *, with_node: bool = False) -> int:
    files.dir.mkdir(parents=True, exist_ok=True)
    if (pid := _running_pid(files)) is not None and pid != os.getpid():
        print(f"cbop_testing.envtest: already running (pid {pid})", file=sys.stderr)
        return 1
    files.clear()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _raise_stop)
    files.pid.write_text(f"{os.getpid()}\n", encoding="utf-8")
    control_plane = ControlPlane(
        workdir=files.workdir, for_nodes=with_node, controllers=DEV_CLUSTER_CONTROLLERS
    )
    node: Node | None = None
    try:
        control_plane.start(timeout=timeout)
        if with_node:
            node = _start_node(control_plane, files)
        shutil.copyfile(control_plane.kubeconfig_path, files.kubeconfig)
        files.kubeconfig.chmod(0o600)
        info = {
            "pid": os.getpid(),
            "api_url": control_plane.api_url,
            "kubeconfig": str(files.kubeconfig),
            "workdir": str(control_plane.workdir),
            "logs": {k: str(v) for k, v in control_plane.log_paths().items()},
            "components": control_plane.pids(),
            "startup_seconds": round(control_plane.startup_seconds, 2),
        }
        if node is not None:
            info["node"] = {"name": node.name, "workdir": str(node.workdir)}
        files.info.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        # Written last: its presence tells `start --detach` that all is ready.
        files.env.write_text(_export_line(files.kubeconfig) + "\n", encoding="utf-8")
        print(
            f"cbop_testing.envtest: control plane ready at {control_plane.api_url} "
            f"in {control_plane.startup_seconds:.1f}s",
            file=sys.stderr,
        )
        print(_export_line(files.kubeconfig), flush=True)
        while True:
            signal.pause()
    except _StopRequestedError as stop:
        print(f"cbop_testing.envtest: {stop}, stopping", file=sys.stderr)
        return 0
    except EnvtestError as exc:
        print(f"cbop_testing.envtest: {exc}", file=sys.stderr)
        return 1
    finally:
        if node is not None:
            node.stop()
        control_plane.stop()
        if _running_pid(files) in (None, os.getpid()):
            files.clear()


def _start_detached(
    files: _Files, timeout: float, *, reuse: bool = True, with_node: bool = False
) -> int:
    files.dir.mkdir(parents=True, exist_ok=True)
    if (pid := _running_pid(files)) is not None:
        if not reuse:
            print(
                f"cbop_testing.envtest: already running in {files.dir} (pid {pid}); not reusing it",
                file=sys.stderr,
            )
            return EXIT_ALREADY_RUNNING
        print(f"cbop_testing.envtest: already running (pid {pid}); reusing it", file=sys.stderr)
        print(files.env.read_text(encoding="utf-8").strip())
        return 0
    files.clear()
    command = [
        sys.executable,
        "-m",
        "cbop_testing.envtest",
        "start",
        f"--state-dir={files.dir}",
        f"--timeout={timeout}",
        *(["--with-node"] if with_node else []),
    ]
    with files.daemon_log.open("wb") as log:
        # Its own session and no parent-death binding: it must outlive us and make.
        daemon = process.spawn(command, log, bind_to_parent=False)
    # A node adds its start-up: images loaded, kubelet registered and Ready.
    deadline = time.monotonic() + timeout + (210 if with_node else 30)
    while time.monotonic() < deadline:
        if files.env.exists() and _running_pid(files) == daemon.pid:
            print(f"cbop_testing.envtest: dev cluster running (pid {daemon.pid})", file=sys.stderr)
            print(files.env.read_text(encoding="utf-8").strip())
            return 0
        if daemon.poll() is not None:
            break
        time.sleep(0.2)
    else:
        process.terminate(daemon)
    log_tail = "\n".join(
        files.daemon_log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:]
    )
    print(
        f"cbop_testing.envtest: the control plane did not start (see {files.daemon_log}):\n"
        f"{log_tail}",
        file=sys.stderr,
    )
    return 1


def _stop(files: _Files) -> int:
    pid = _running_pid(files)
    if pid is None:
        print("cbop_testing.envtest: not running", file=sys.stderr)
        files.clear()
        return 0
    components: dict[str, int] = {}
    with contextlib.suppress(OSError, ValueError, KeyError):
        components = json.loads(files.info.read_text(encoding="utf-8"))["components"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while process.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if process.pid_alive(pid):
        # Its components die with it (PR_SET_PDEATHSIG).
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + STOP_TIMEOUT
    while any(process.pid_alive(p) for p in components.values()):
        if time.monotonic() > deadline:
            print(f"cbop_testing.envtest: components still running: {components}", file=sys.stderr)
            return 1
        time.sleep(0.1)
    files.clear()
    print(f"cbop_testing.envtest: stopped (pid {pid})", file=sys.stderr)
    return 0


def _status(files: _Files) -> int:
    pid = _running_pid(files)
    if pid is None:
        print("not running")
        return EXIT_NOT_RUNNING
    try:
        info = json.loads(files.info.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = {}
    print(f"running (pid {pid})")
    for key in ("api_url", "kubeconfig", "workdir", "components"):
        if key in info:
            print(f"  {key}: {info[key]}")
    if not files.env.exists():
        print("  starting (not ready yet)")
        return 0
    print(f"  {files.env.read_text(encoding='utf-8').strip()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m cbop_testing.envtest",
        description="Run cbop's local Kubernetes control plane (etcd, kube-apiserver, "
        "kube-controller-manager).",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help="where the kubeconfig, env, pid file and state live (default: %(default)s)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="start (foreground unless --detach)")
    start.add_argument("--state-dir", type=Path, default=argparse.SUPPRESS)
    start.add_argument(
        "--detach", action="store_true", help="run in the background; return when ready"
    )
    start.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to become ready (default 60)"
    )
    start.add_argument(
        "--fail-if-running",
        action="store_true",
        help=f"with --detach: exit {EXIT_ALREADY_RUNNING} when a control plane already runs "
        "in the state directory, instead of reusing it",
    )
    start.add_argument(
        "--with-node",
        action="store_true",
        help="also run a kubelet node with cbop:dev loaded (make dev-cluster WITH_NODE=1)",
    )
    stop = commands.add_parser("stop", help="stop the background control plane")
    stop.add_argument("--state-dir", type=Path, default=argparse.SUPPRESS)
    status = commands.add_parser("status", help="report on the background control plane")
    status.add_argument("--state-dir", type=Path, default=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    files = _Files(args.state_dir.expanduser().resolve())
    if args.command == "start":
        if args.detach:
            return _start_detached(
                files, args.timeout, reuse=not args.fail_if_running, with_node=args.with_node
            )
        return _run_foreground(files, args.timeout, with_node=args.with_node)
    if args.command == "stop":
        return _stop(files)
    return _status(files)


if __name__ == "__main__":
    sys.exit(main())
