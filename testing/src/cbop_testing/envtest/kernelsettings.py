"""Host kernel settings shared by every local node on the machine, restored by the last one.

A kubelet with ``protectKernelDefaults: false`` sets a few sysctls when it starts
(``vm.overcommit_memory``, ``kernel.panic``, ...; Kubernetes' container manager) and never
puts them back, so a :class:`~cbop_testing.envtest.node.Node` saves them before its
kubelet starts and restores them when it stops. The settings are the host's, not the
node's: with several nodes on one machine (parallel tests, several checkouts) a node
that stopped first would restore them under a kubelet still running, and the last one
would "restore" the kubelet's values for good.

So the nodes share them through :class:`KernelSettings`, a reference count in a
well-known directory (``/run/cbop-envtest/kernel-settings`` by default; ``/run`` is
emptied at boot, when the kernel's values reset too):

* ``lock``: every change below happens under an exclusive ``flock`` of this file.
* ``saved.json``: the values found by the first user, ``{"vm/overcommit_memory": "0",
  ...}`` (keys relative to ``/proc/sys``).
* ``users/<pid>-<token>``: one file per user holding the process's start time (field 22
  of ``/proc/<pid>/stat``). An entry whose process is gone, or whose pid now belongs to a
  process started at another time, is stale: it is removed and not counted, so a node
  killed outright does not hold the settings forever.

:meth:`KernelSettings.acquire` saves the values when no live user is left (unless a
crashed last user left ``saved.json`` behind: those are the host's values, the current
ones may be a kubelet's) and registers the caller; :meth:`KernelSettings.release`
unregisters it and, when no live user is left, writes the saved values back and removes
``saved.json``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

__all__ = ["DEFAULT_STATE_DIR", "KUBELET_SYSCTLS", "KernelSettings", "process_start_time"]

#: Host sysctls the kubelet sets (Kubernetes' container manager), relative to /proc/sys.
KUBELET_SYSCTLS: Final[tuple[str, ...]] = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
#: Where the nodes of this machine keep the shared state (tmpfs, emptied at boot).
DEFAULT_STATE_DIR: Final = Path("/run/cbop-envtest/kernel-settings")


def process_start_time(pid: int) -> str | None:
    """Return the start time of process ``pid`` (clock ticks since boot), None if it is gone.

    Field 22 of ``/proc/<pid>/stat``; with the pid it names one process for the machine's
    uptime (a reused pid has another start time).
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


class KernelSettings:
    """One user's share of the host's kubelet sysctls (module docstring).

    Args:
        keys: The settings, relative to ``proc_sys`` (:data:`KUBELET_SYSCTLS`).
        state_dir: The shared directory (:data:`DEFAULT_STATE_DIR`); created if missing.
        proc_sys: Where the settings live (``/proc/sys``; tests pass a directory).

    Not thread-safe per instance (a :class:`~cbop_testing.envtest.node.Node` calls it
    under its own lock); instances in any threads and processes share safely.
    """

    def __init__(
        self,
        keys: Sequence[str] = KUBELET_SYSCTLS,
        *,
        state_dir: Path = DEFAULT_STATE_DIR,
        proc_sys: Path = Path("/proc/sys"),
    ) -> None:
        self._keys = tuple(keys)
        self._dir = state_dir
        self._proc_sys = proc_sys
        self._entry: Path | None = None

    @property
    def held(self) -> bool:
        """Whether this instance has acquired and not yet released."""
        return self._entry is not None

    def acquire(self) -> None:
        """Register this process as a user; save the host's values if it is the only one.

        Idempotent while held.

        Raises:
            OSError: The state directory cannot be created or locked.
        """
        if self._entry is not None:
            return
        with self._locked():
            users = self._live_users()
            saved = self._dir / "saved.json"
            if not users and not saved.exists():
                values = {}
                for key in self._keys:
                    with contextlib.suppress(OSError):
                        values[key] = (self._proc_sys / key).read_text().strip()
                _write_atomically(saved, json.dumps(values, sort_keys=True))
            pid = os.getpid()
            entry = self._dir / "users" / f"{pid}-{secrets.token_hex(4)}"
            entry.write_text(process_start_time(pid) or "", encoding="ascii")
            self._entry = entry

    def release(self) -> bool:
        """Unregister; the last live user writes the saved values back.

        Idempotent: a second call (or one without :meth:`acquire`) does nothing.

        Returns:
            Whether the values were restored (no live user was left).
        """
        entry, self._entry = self._entry, None
        if entry is None:
            return False
        with self._locked():
            entry.unlink(missing_ok=True)
            if self._live_users():
                return False
            saved = self._dir / "saved.json"
            try:
                values: dict[str, str] = json.loads(saved.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return False
            for key, value in values.items():
                with contextlib.suppress(OSError):
                    (self._proc_sys / key).write_text(value)
            saved.unlink(missing_ok=True)
            return True

    def users(self) -> list[str]:
        """Return the live users' entry names (``<pid>-<token>``), pruning stale ones."""
        with self._locked():
            return sorted(p.name for p in self._live_users())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        (self._dir / "users").mkdir(parents=True, exist_ok=True)
        fd = os.open(self._dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _live_users(self) -> list[Path]:
        """Entries whose process still runs (same pid, same start time); removes the rest."""
        live = []
        for entry in (self._dir / "users").iterdir():
            pid_text = entry.name.split("-", 1)[0]
            try:
                started = entry.read_text(encoding="ascii").strip()
            except OSError:
                continue
            current = process_start_time(int(pid_text)) if pid_text.isdigit() else None
            if current is not None and current == started:
                live.append(entry)
            else:
                entry.unlink(missing_ok=True)
        return live


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)
