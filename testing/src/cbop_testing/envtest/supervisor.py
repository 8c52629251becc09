"""The named processes of a control plane or a node, each with its own log.

This module owns :class:`Supervisor`, what :class:`~cbop_testing.envtest.ControlPlane`
and :class:`~cbop_testing.envtest.node.Node` do with the processes they start: start
one under a name, logging to ``logs/<name>.log`` of the work directory (a header per
start); wait until a probe says it is ready while none of the others has exited; start
one that exited again when its :class:`Restart` policy says so, as a kubelet restarts a
static pod; stop them in order; show the logs' tails. How a child
is started and stopped safely (its own process group, stopped when the parent dies) is
:mod:`cbop_testing.envtest.process`'s.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from cbop_testing.envtest import process

__all__ = ["Exited", "Restart", "Supervisor"]


@dataclass(frozen=True, slots=True)
class Restart:
    """When a process that exited on its own is started again.

    Only after an exit with status ``code`` whose log's last 40 lines hold one of
    ``log_signs``, at most ``limit`` times per :class:`Supervisor`.
    """

    code: int
    log_signs: tuple[str, ...]
    limit: int


@dataclass(frozen=True, slots=True)
class Exited:
    """A process found exited, and not started again: its name, pid, status, log tail."""

    name: str
    pid: int
    code: int
    log_tail: str


class Supervisor:
    """Child processes by name, in one work directory. Not thread-safe: the owner locks.

    Args:
        workdir: where the processes run; their logs go to its ``logs/``.
        poll: seconds between two probes in :meth:`wait`.
        grace: seconds a process gets to exit after SIGTERM before SIGKILL.
    """

    def __init__(self, workdir: Path, *, poll: float, grace: float) -> None:
        self.workdir = workdir
        self._poll = poll
        self._grace = grace
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        """The processes started and not stopped, by name, in the order started."""
        self.spawned: list[int] = []
        """Every process id ever started (restarts included)."""
        self.respawns: dict[str, int] = {}
        """How often each process was started again by its :class:`Restart` policy."""
        self._commands: dict[str, list[str]] = {}
        self._restarts: dict[str, Restart] = {}
        self._logs: dict[str, IO[bytes]] = {}

    def log_path(self, name: str) -> Path:
        """Return the log file of the process ``name``."""
        return self.workdir / "logs" / f"{name}.log"

    def spawn(
        self, name: str, args: Sequence[str] | None = None, *, restart: Restart | None = None
    ) -> None:
        """Start the process ``name``: ``args``, or (None) the command it last ran.

        ``restart``: its policy from now on (default: the one it had, or none).
        """
        command = list(args) if args is not None else self._commands[name]
        self._commands[name] = command
        if restart is not None:
            self._restarts[name] = restart
        log = self._logs.get(name)
        if log is None or log.closed:
            log = self._logs[name] = self.log_path(name).open("ab")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        log.write(f"=== cbop_testing.envtest: starting {name} at {stamp}\n".encode())
        log.write(("=== " + " ".join(command) + "\n").encode())
        log.flush()
        popen = process.spawn(command, log, cwd=self.workdir)
        self.children[name] = popen
        self.spawned.append(popen.pid)

    def wait(
        self,
        name: str,
        deadline: float,
        probe: Callable[[], bool],
        *,
        on_exit: Callable[[Exited], None],
        not_yet: tuple[type[BaseException], ...],
    ) -> float:
        """Probe until ``probe()`` is true, ``time.monotonic()`` ``deadline`` at the latest.

        Args:
            name: the process waited for (for the message).
            deadline: a ``time.monotonic()`` value.
            probe: true once the process is ready.
            on_exit: called for each process found exited meanwhile (any, not only
                ``name``) and not started again (:meth:`exited`); it raises, or the
                wait goes on.
            not_yet: exceptions of ``probe`` that mean "not ready yet".

        Returns:
            The seconds it took.

        Raises:
            TimeoutError: not ready in time; the message has the probe's last error.
        """
        began = time.monotonic()
        last = "no answer yet"
        while True:
            for exited in self.exited():
                on_exit(exited)
            try:
                if probe():
                    return time.monotonic() - began
            except not_yet as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{name} was not ready in time (last probe: {last})")
            time.sleep(self._poll)

    def exited(self) -> list[Exited]:
        """Start again the exited processes whose policy says so; return the others.

        The ones returned stay in :attr:`children` (a later call returns them again).
        """
        found = []
        for name, popen in list(self.children.items()):
            code = popen.poll()
            if code is None:
                continue
            tail = self.tail(name, 40)
            restart = self._restarts.get(name)
            if (
                restart is not None
                and code == restart.code
                and any(sign in tail for sign in restart.log_signs)
                and self.respawns.get(name, 0) < restart.limit
            ):
                self.respawns[name] = self.respawns.get(name, 0) + 1
                self.spawn(name)
            else:
                found.append(Exited(name, popen.pid, code, tail))
        return found

    def stop(self, name: str) -> None:
        """Stop the process ``name`` (SIGTERM to its group, SIGKILL after the grace), if any."""
        popen = self.children.pop(name, None)
        if popen is not None:
            process.terminate(popen, self._grace)

    def stop_all(self, order: Iterable[str] = ()) -> None:
        """Stop the processes named in ``order`` first, in that order, then the others."""
        for name in (*order, *self.children):
            self.stop(name)
        for log in self._logs.values():
            with contextlib.suppress(OSError):
                log.close()
        self._logs.clear()

    def pids(self) -> dict[str, int]:
        """Return the process ids of the processes still running, by name."""
        return {name: p.pid for name, p in self.children.items() if p.poll() is None}

    def tail(self, name: str, lines: int) -> str:
        """Return the last ``lines`` lines of the log of ``name``."""
        return process.tail_file(self.log_path(name), lines)

    def tails(self, names: Iterable[str], lines: int) -> str:
        """Return the last ``lines`` lines of each log of ``names``, under a header each."""
        return "\n".join(
            f"==> {name} ({self.log_path(name)}) <==\n{self.tail(name, lines)}" for name in names
        )
