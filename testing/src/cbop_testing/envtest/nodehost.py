"""What a local node makes on the host and removes again: cgroups, a network namespace, mounts.

:class:`~cbop_testing.envtest.node.Node` creates a cgroup root of its own name in every
hierarchy (cgroup v1 with the cgroupfs driver, or the v2 mount) and a network namespace
for the kubelet, containerd and the pods; at stop it kills what is left in those cgroups,
unmounts the pods' volumes under its work directory and removes both. The host's kernel
settings are shared between nodes: :mod:`cbop_testing.envtest.kernelsettings`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Final

from cbop_testing.envtest.errors import NodeError

__all__ = [
    "COMMAND_TIMEOUT",
    "cgroup_hierarchies",
    "kill_cgroup_tree",
    "make_cgroup_root",
    "make_netns",
    "remove_cgroup_tree",
    "run",
    "unmount_under",
]

_CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
#: Seconds a host command (ip, ctr, kubectl) may take.
COMMAND_TIMEOUT: Final = 120.0


def run(args: Sequence[str], *, stdin: IO[bytes] | None = None) -> str:
    """Run a command to completion (120 s at most) and return its stdout.

    Raises:
        NodeError: It exited non-zero; the message has its stderr.
        subprocess.TimeoutExpired: It took longer.
    """
    result = subprocess.run(
        list(args),
        stdin=stdin,
        capture_output=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    if result.returncode != 0:
        raise NodeError(
            f"{' '.join(args)} failed (exit {result.returncode}): "
            f"{result.stderr.decode(errors='replace').strip()}"
        )
    return result.stdout.decode(errors="replace")


def make_netns(netns: str, *, service_ip: str, node_ip: str) -> None:
    """Create network namespace ``netns`` with loopback, ``service_ip`` and ``node_ip``.

    ``service_ip`` (the ``kubernetes`` Service's ClusterIP, where a relay listens) is a
    /32 on ``lo``; ``node_ip`` a /24 on one end of a veth pair whose both ends stay inside,
    with the default route on it. Nothing is routed out of the namespace.

    Raises:
        NodeError: An ``ip`` command failed (the namespace may exist: delete it).
    """
    run(["ip", "netns", "add", netns])
    ns = ["ip", "-n", netns]
    run([*ns, "link", "set", "lo", "up"])
    run([*ns, "addr", "add", f"{service_ip}/32", "dev", "lo"])
    # The dummy link type is not available on every kernel; a veth pair is.
    run([*ns, "link", "add", "node0", "type", "veth", "peer", "name", "node0-peer"])
    run([*ns, "addr", "add", f"{node_ip}/24", "dev", "node0"])
    run([*ns, "link", "set", "node0-peer", "up"])
    run([*ns, "link", "set", "node0", "up"])
    run([*ns, "route", "add", "default", "dev", "node0"])


def cgroup_hierarchies() -> list[Path]:
    """Cgroup v1 hierarchies (the named systemd one too), or the v2 mount."""
    if (_CGROUP_ROOT / "cgroup.controllers").exists():
        return [_CGROUP_ROOT]
    return [
        p
        for p in sorted(_CGROUP_ROOT.iterdir())
        if p.is_dir() and not p.is_symlink() and p.name != "unified"
    ]


def make_cgroup_root(name: str) -> None:
    """Create cgroup ``/<name>`` in every hierarchy (cpuset: with its parent's cpus and mems).

    Raises:
        OSError: Not permitted (the node needs root).
    """
    for hierarchy in cgroup_hierarchies():
        target = hierarchy / name
        target.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (target / knob).write_text((hierarchy / knob).read_text())


def kill_cgroup_tree(name: str) -> None:
    """SIGKILL every process under cgroup ``/<name>`` (the containers), until none is left.

    Gives up after 20 rounds 0.2 s apart. A cgroup removed while the tree is walked
    ends that round's walk of its hierarchy; the next round walks it again.
    """
    for _ in range(20):
        pids: set[int] = set()
        walked = True
        for hierarchy in cgroup_hierarchies():
            root = hierarchy / name
            if not root.is_dir():
                continue
            # The kubelet and containerd remove pod cgroups meanwhile: a directory gone
            # under the walk ends it, and the next round walks again.
            try:
                for procs in root.rglob("cgroup.procs"):
                    with contextlib.suppress(OSError, ValueError):
                        pids.update(int(p) for p in procs.read_text().split())
            except FileNotFoundError:
                walked = False
        if not pids and walked:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def remove_cgroup_tree(name: str) -> None:
    """Remove cgroup ``/<name>`` and every cgroup below it, deepest first (best effort)."""
    for hierarchy in cgroup_hierarchies():
        root = hierarchy / name
        if not root.is_dir():
            continue
        for directory in sorted(
            (p for p in root.rglob("*") if p.is_dir()),
            key=lambda p: len(p.parts),
            reverse=True,
        ):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            root.rmdir()


def unmount_under(workdir: Path) -> None:
    """Lazily unmount every mount point below ``workdir`` (the pods' volumes), deepest first."""
    prefix = str(workdir) + "/"
    mounts = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix):
                mounts.append(point)
    for point in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)
