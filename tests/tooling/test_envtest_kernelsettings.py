"""Host kernel settings shared by concurrent local nodes: saved by the first, restored by the last.

The settings live in a directory standing in for /proc/sys; the users are this process
and real child processes (one is killed outright, as a crashed test run would be).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from cbop_testing.envtest.kernelsettings import KernelSettings, process_start_time

KEYS = ("vm/overcommit_memory", "kernel/panic")
HOST = {"vm/overcommit_memory": "0", "kernel/panic": "0"}
KUBELET = {"vm/overcommit_memory": "1", "kernel/panic": "10"}

#: A child process that acquires the settings, says so, and waits for stdin to close
#: (then releases, unless it is killed first).
CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from cbop_testing.envtest.kernelsettings import KernelSettings
    settings = KernelSettings({keys!r}, state_dir=Path({state!r}), proc_sys=Path({proc!r}))
    settings.acquire()
    print("acquired", flush=True)
    sys.stdin.read()
    print("restored" if settings.release() else "kept", flush=True)
    """
)


class Sysctl:
    """A stand-in for /proc/sys with the two settings."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.set(HOST)

    def set(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            path = self.root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(value)

    def values(self) -> dict[str, str]:
        return {key: (self.root / key).read_text().strip() for key in KEYS}


@pytest.fixture
def sysctl(tmp_path: Path) -> Sysctl:
    return Sysctl(tmp_path / "proc-sys")


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def settings(state: Path, sysctl: Sysctl) -> KernelSettings:
    return KernelSettings(KEYS, state_dir=state, proc_sys=sysctl.root)


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)


def start_child(
    children: list[subprocess.Popen[str]], state: Path, sysctl: Sysctl
) -> subprocess.Popen[str]:
    code = CHILD.format(keys=KEYS, state=str(state), proc=str(sysctl.root))
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    children.append(child)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "acquired"
    return child


def test_a_single_node_restores_what_it_found(state: Path, sysctl: Sysctl) -> None:
    node = settings(state, sysctl)
    node.acquire()
    sysctl.set(KUBELET)  # what the kubelet does when it starts
    assert node.release() is True
    assert sysctl.values() == HOST
    assert not (state / "saved.json").exists()
    assert node.release() is False  # idempotent


def test_the_first_node_to_stop_leaves_the_settings_to_the_one_still_running(
    state: Path, sysctl: Sysctl
) -> None:
    first, second = settings(state, sysctl), settings(state, sysctl)
    first.acquire()
    sysctl.set(KUBELET)
    second.acquire()  # finds the first kubelet's values: they must not become "the host's"
    assert len(first.users()) == 2

    assert first.release() is False
    assert sysctl.values() == KUBELET, "restored under a kubelet that still runs"
    assert second.release() is True
    assert sysctl.values() == HOST


def test_nodes_in_other_processes_are_counted(
    state: Path, sysctl: Sysctl, children: list[subprocess.Popen[str]]
) -> None:
    child = start_child(children, state, sysctl)
    sysctl.set(KUBELET)
    node = settings(state, sysctl)
    node.acquire()
    assert node.release() is False
    assert sysctl.values() == KUBELET

    out, _ = child.communicate("", timeout=60)  # the child stops its node: the last one
    assert out.strip() == "restored"
    assert sysctl.values() == HOST


def test_a_node_killed_outright_is_not_counted(
    state: Path, sysctl: Sysctl, children: list[subprocess.Popen[str]]
) -> None:
    crashed = start_child(children, state, sysctl)
    sysctl.set(KUBELET)
    node = settings(state, sysctl)
    node.acquire()
    assert len(node.users()) == 2

    crashed.send_signal(signal.SIGKILL)
    crashed.wait(timeout=30)
    assert process_start_time(crashed.pid) is None
    assert len(node.users()) == 1, "the killed process is still counted"
    assert node.release() is True
    assert sysctl.values() == HOST


def test_a_crashed_last_node_leaves_the_host_values_for_the_next_one(
    state: Path, sysctl: Sysctl, children: list[subprocess.Popen[str]]
) -> None:
    crashed = start_child(children, state, sysctl)
    sysctl.set(KUBELET)
    crashed.kill()
    crashed.wait(timeout=30)

    node = settings(state, sysctl)
    node.acquire()  # must keep the saved host values, not save the kubelet's
    assert node.release() is True
    assert sysctl.values() == HOST


def test_a_reused_pid_is_not_counted(state: Path, sysctl: Sysctl) -> None:
    node = settings(state, sysctl)
    node.acquire()
    sysctl.set(KUBELET)
    # An entry of a process that had our pid before us: same pid, other start time.
    (state / "users" / f"{os.getpid()}-0badc0de").write_text("1", encoding="ascii")
    assert len(node.users()) == 1
    assert node.release() is True
    assert sysctl.values() == HOST


def test_process_start_time_names_one_process() -> None:
    mine = process_start_time(os.getpid())
    assert mine is not None
    assert mine.isdigit()
    assert process_start_time(os.getpid()) == mine
    assert process_start_time(1) != mine
