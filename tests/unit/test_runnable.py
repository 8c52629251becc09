"""Runnables in ordered groups: start in order, stop in reverse, on one shutdown path.

The manager's groups (servers, caches, others, leader-election) as controller-runtime's
runnable groups; a manager with no controllers and an informer factory that never
lists, so nothing here talks to a server.
"""

from __future__ import annotations

import threading

import pytest

from cbop.informers import SharedInformerFactory
from cbop.kube import KubeClient
from cbop.runtime import Manager
from cbop.runtime.runnable import (
    CACHES,
    GROUP_ORDER,
    LEADER_ELECTION,
    OTHERS,
    SERVERS,
    Hooks,
    RunnableGroup,
)


class _Journal:
    """Records ``start <name>`` / ``stop <name>`` lines in the order they happen."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.started: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def hooks(self, name: str, *, fail_start: bool = False, fail_stop: bool = False) -> Hooks:
        def start() -> None:
            if fail_start:
                raise OSError(f"{name} cannot bind")
            self._note(f"start {name}")
            self.started.setdefault(name, threading.Event()).set()

        def stop(timeout: float) -> None:
            self._note(f"stop {name}")
            if fail_stop:
                raise RuntimeError(f"{name} broke while stopping")

        return Hooks(name, start, stop)

    def _note(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)


def test_a_group_starts_in_the_order_added_and_stops_in_reverse() -> None:
    journal = _Journal()
    group = RunnableGroup(OTHERS)
    for name in ("a", "b", "c"):
        group.add(journal.hooks(name))
    group.start()
    group.start()  # started runnables are not started twice
    group.stop(1.0)
    group.stop(1.0)  # nor stopped twice
    assert journal.lines == ["start a", "start b", "start c", "stop c", "stop b", "stop a"]


def test_a_stop_that_raises_does_not_keep_the_others_running() -> None:
    journal = _Journal()
    group = RunnableGroup(OTHERS)
    group.add(journal.hooks("a"))
    group.add(journal.hooks("b", fail_stop=True))
    group.add(journal.hooks("c"))
    group.start()
    group.stop(0.0)
    assert journal.lines[3:] == ["stop c", "stop b", "stop a"]


def test_a_start_that_raises_leaves_what_started_to_stop() -> None:
    journal = _Journal()
    group = RunnableGroup(SERVERS)
    group.add(journal.hooks("a"))
    group.add(journal.hooks("b", fail_start=True))
    group.add(journal.hooks("c"))
    with pytest.raises(OSError, match="b cannot bind"):
        group.start()
    group.stop(0.0)
    assert journal.lines == ["start a", "stop a"]


def _manager() -> Manager:
    client = KubeClient(None)
    return Manager(
        client,
        informers=lambda shard: SharedInformerFactory(
            client, namespaces=["a"], resync_period=0, shard=shard
        ),
        identity="test",
        shutdown_timeout=1.0,
    )


def test_the_manager_starts_the_groups_in_order_and_stops_them_in_reverse() -> None:
    journal = _Journal()
    manager = _manager()
    # Added against the group order, so only the groups can put them in order.
    for group in reversed(GROUP_ORDER):
        manager.add_runnable(journal.hooks(f"{group}-1"), group)
        manager.add_runnable(journal.hooks(f"{group}-2"), group)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(manager.run()))
    thread.start()
    last = journal.started.setdefault(f"{LEADER_ELECTION}-2", threading.Event())
    try:
        assert last.wait(10), journal.lines
    finally:
        manager.stop_event.set()
        thread.join(10)
    assert not thread.is_alive()
    assert codes == [0]
    starts = [line for line in journal.lines if line.startswith("start")]
    stops = [line for line in journal.lines if line.startswith("stop")]
    assert starts == [f"start {g}-{i}" for g in GROUP_ORDER for i in (1, 2)]
    assert stops == [f"stop {g}-{i}" for g in reversed(GROUP_ORDER) for i in (2, 1)]


def test_a_runnable_that_cannot_start_stops_what_started_and_is_raised() -> None:
    journal = _Journal()
    manager = _manager()
    manager.add_runnable(journal.hooks("probes"), SERVERS)
    manager.add_runnable(journal.hooks("cache"), CACHES)
    manager.add_runnable(journal.hooks("sink", fail_start=True), OTHERS)
    manager.add_runnable(journal.hooks("leader"), LEADER_ELECTION)
    with pytest.raises(OSError, match="sink cannot bind"):
        manager.run()
    assert journal.lines == ["start probes", "start cache", "stop cache", "stop probes"]


def test_an_unknown_group_is_refused() -> None:
    with pytest.raises(KeyError):
        _manager().add_runnable(Hooks("x"), "workers")
