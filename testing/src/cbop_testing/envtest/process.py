"""Child processes that cannot outlive the process that started them.

Three layers, so that no etcd or kube-apiserver is left behind by a test run:

* Every child runs in its own session and process group (``start_new_session``), so a
  terminal's Ctrl-C reaches only the parent, and stopping a child signals its whole
  group.
* Owners with live children (control planes) are registered here and stopped from an
  ``atexit`` hook and from SIGTERM/SIGHUP handlers (installed in the main thread, only
  where the signal has its default disposition; an existing Python handler is chained).
* On Linux each child asks the kernel for ``PR_SET_PDEATHSIG`` = SIGKILL between fork
  and exec, so it is killed even when the parent is SIGKILLed and no Python code runs.
  The kernel sends it when the *thread* that forked the child exits, so start control
  planes from a thread that lives as long as they should (normally the main thread).

Also two small helpers the components' owners share: free loopback ports
(:func:`free_ports`, reserved machine-wide for a while, so that parallel test workers
are never given the same port) and the tail of a log file (:func:`tail_file`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Protocol

__all__ = [
    "Stoppable",
    "free_ports",
    "pid_alive",
    "processes_mentioning",
    "register",
    "signal_group",
    "spawn",
    "tail_file",
    "terminate",
    "unregister",
]

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    fn: Callable[..., int] = prctl
    return fn


# Looked up once here: between fork and exec only the already-resolved function runs.
_prctl = _load_prctl()


def _bind_to_parent(parent_pid: int) -> Callable[[], None]:
    def preexec() -> None:
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        # The parent may have died between fork and prctl; then nothing would fire.
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


def spawn(
    args: Sequence[str],
    log: IO[bytes],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    bind_to_parent: bool = True,
) -> subprocess.Popen[bytes]:
    """Start ``args`` in a new session and process group, output appended to ``log``.

    Args:
        args: Program and arguments.
        log: Open binary file receiving stdout and stderr.
        env: Environment; the parent's when None.
        cwd: Working directory.
        bind_to_parent: Kill the child with SIGKILL when the calling thread's process
            dies (``PR_SET_PDEATHSIG``, Linux). False for a daemon meant to outlive us.

    Returns:
        The running process; its pid is also its process-group id.

    Raises:
        OSError: The program could not be executed.
    """
    return subprocess.Popen(
        list(args),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=None if env is None else dict(env),
        cwd=cwd,
        start_new_session=True,
        preexec_fn=_bind_to_parent(os.getpid()) if bind_to_parent else None,  # noqa: PLW1509
    )


def signal_group(popen: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the process group of ``popen`` (ignored when it is gone)."""
    if popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, sig)


def terminate(popen: subprocess.Popen[bytes], grace: float = 10.0) -> int:
    """Stop a child started by :func:`spawn` and reap it.

    SIGTERM goes to its process group (followed by SIGCONT, so that a paused child
    handles it); after ``grace`` seconds SIGKILL follows.

    Args:
        popen: The child.
        grace: Seconds to wait after SIGTERM before SIGKILL.

    Returns:
        The child's exit status (negative signal number when killed by a signal).
    """
    if popen.poll() is None:
        signal_group(popen, signal.SIGTERM)
        signal_group(popen, signal.SIGCONT)
        try:
            popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            signal_group(popen, signal.SIGKILL)
            popen.wait()
    # The group may hold grandchildren that outlived the leader; none should survive.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    return popen.returncode


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists and is not a zombie (Linux ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:
        return True
    # Field 3, after the parenthesised command name, is the state; Z is a zombie.
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state != "Z"


def processes_mentioning(text: str) -> dict[int, str]:
    """Live processes whose command line contains ``text``, as ``{pid: command line}``.

    Used to prove that nothing a control plane started remains: every component's
    command line names the control plane's work directory.
    """
    found: dict[int, str] = {}
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        cmdline = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
        if text in cmdline and pid_alive(int(entry.name)):
            found[int(entry.name)] = cmdline
    return found


class Stoppable(Protocol):
    """Anything with an idempotent ``stop()`` (a control plane)."""

    def stop(self) -> None:
        """Stop every child process."""


_registry_lock = threading.RLock()
_registry: dict[int, Stoppable] = {}
_handlers_installed = False
_atexit_registered = False


def _stop_all() -> None:
    with _registry_lock:
        owners = list(_registry.values())
    for owner in owners:
        try:
            owner.stop()
        except Exception as exc:  # noqa: BLE001 - keep stopping the others
            print(f"cbop_testing.envtest: stopping {owner!r} failed: {exc}", file=sys.stderr)


def _make_handler(
    previous: Callable[[int, FrameType | None], object],
) -> Callable[[int, FrameType | None], None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        _stop_all()
        previous(signum, frame)

    return handler


def _default_action(signum: int, _frame: FrameType | None) -> None:
    # Die of the signal as if no handler had been installed.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    time.sleep(1)


def _install_hooks() -> None:
    global _atexit_registered, _handlers_installed  # noqa: PLW0603 - process-wide setup
    if not _atexit_registered:
        _atexit_registered = True
        atexit.register(_stop_all)
    # signal.signal works only in the main thread; from another, atexit must do.
    if _handlers_installed or threading.current_thread() is not threading.main_thread():
        return
    _handlers_installed = True
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(signum)
        if previous == signal.SIG_DFL or previous is None:
            signal.signal(signum, _make_handler(_default_action))
        elif callable(previous):
            signal.signal(signum, _make_handler(previous))
        # SIG_IGN: the process chose to ignore it; leave it so.


def register(owner: Stoppable) -> None:
    """Stop ``owner`` at interpreter exit and on SIGTERM/SIGHUP until unregistered."""
    with _registry_lock:
        _registry[id(owner)] = owner
        _install_hooks()


def unregister(owner: Stoppable) -> None:
    """Undo :func:`register` (no error when not registered)."""
    with _registry_lock:
        _registry.pop(id(owner), None)


#: Seconds a port handed out by :func:`free_ports` stays reserved for its caller: long
#: enough for a control plane to bind its last port (kube-controller-manager's, after
#: the API server is ready).
PORT_HOLD_SECONDS = 300.0
#: The machine-wide record of reserved ports (a JSON object, port -> expiry as Unix
#: time), with its lock file beside it; in the temporary directory, shared by every
#: process of the user (pytest-xdist workers, several checkouts).
_PORT_RECORD = "cbop-envtest-ports.json"


@contextlib.contextmanager
def _reserved_ports() -> Iterator[dict[int, float]]:
    """Yield the unexpired reservations, under an exclusive lock; write them back after.

    Without a usable record (an unwritable temporary directory) it yields an empty dict
    and keeps nothing: ports are then only as free as the kernel says.
    """
    record = Path(tempfile.gettempdir()) / _PORT_RECORD
    try:
        lock = open(record.with_suffix(".lock"), "a")  # noqa: SIM115 - closed below
    except OSError:
        yield {}
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        now = time.time()
        try:
            loaded = json.loads(record.read_text(encoding="utf-8"))
            held = {int(port): float(until) for port, until in loaded.items() if until > now}
        except (OSError, ValueError, TypeError, AttributeError):
            held = {}
        yield held
        with contextlib.suppress(OSError):
            partial = record.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps({str(p): u for p, u in held.items()}), "utf-8")
            partial.replace(record)


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports on 127.0.0.1 that are free right now.

    The kernel picks them (bind to port 0); each is then reserved machine-wide for
    :data:`PORT_HOLD_SECONDS`, so that no other caller of this function, in this process
    or another (parallel test workers, another checkout's tests), is given it before its
    owner binds it. Another program may still take one; callers that start servers on
    them retry with new ports when a bind fails.
    """
    sockets: list[socket.socket] = []
    chosen: list[int] = []
    try:
        with _reserved_ports() as held:
            # A reserved port stays bound here while looking further, so the kernel
            # does not offer it again.
            while len(chosen) < count:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
                if port not in held:
                    chosen.append(port)
            until = time.time() + PORT_HOLD_SECONDS
            held.update(dict.fromkeys(chosen, until))
        return chosen
    finally:
        for sock in sockets:
            sock.close()


def tail_file(path: Path, lines: int) -> str:
    """Return the last ``lines`` lines of a text file (empty when it does not exist).

    Reads backwards in 64 KiB blocks, so a large log costs only its end.
    """
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            block = 64 * 1024
            data = b""
            while size > 0 and data.count(b"\n") <= lines:
                step = min(block, size)
                size -= step
                handle.seek(size)
                data = handle.read(step) + data
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
