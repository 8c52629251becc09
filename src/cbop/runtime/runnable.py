r"""Runnables and their ordered groups: what the manager starts and stops, and when.

As controller-runtime's ``manager.Runnable`` and ``runnable_group.go``: everything a
process runs besides its controllers' workers is a :class:`Runnable` (start, stop with
a time budget), filed into one of the manager's :class:`RunnableGroup`\\ s. The manager
starts the groups in :data:`GROUP_ORDER` and stops them in reverse, on one shutdown
path; within a group, runnables start in the order added and stop in reverse:

1. ``servers``: the HTTP servers (``/healthz`` and ``/readyz``, ``/metrics``), first up
   and last down, so probes and scrapes answer for the whole life of the process;
2. ``caches``: the process's shared informers (a standby keeps warm caches);
3. ``others``: the Event sink and anything else that is not leader-gated;
4. ``leader-election``: the leadership source (no election, the single leader, or the
   shard coordinator), which starts and stops the scopes and so the controllers'
   workers: last up, first down, so the workers drain and the lease is handed back
   while the caches, the Event sink and the servers still run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

import structlog

__all__ = [
    "CACHES",
    "GROUP_ORDER",
    "LEADER_ELECTION",
    "OTHERS",
    "SERVERS",
    "Hooks",
    "Runnable",
    "RunnableGroup",
]

log = structlog.get_logger("cbop.manager")

SERVERS: Final = "servers"
CACHES: Final = "caches"
OTHERS: Final = "others"
LEADER_ELECTION: Final = "leader-election"
#: The order groups start in (and the reverse of the order they stop in).
GROUP_ORDER: Final = (SERVERS, CACHES, OTHERS, LEADER_ELECTION)


class Runnable(Protocol):
    """Something the manager starts with the process and stops on its one shutdown path."""

    @property
    def name(self) -> str:
        """What logs call it."""
        ...

    def start(self) -> None:
        """Start it (threads, sockets) and return at once.

        Raises:
            Exception: it could not start (a bind address taken, ...); the manager stops
                what it started and re-raises.
        """
        ...

    def stop(self, timeout: float) -> None:
        """Stop it, taking ``timeout`` seconds at most for a graceful stop (0: at once)."""
        ...


@dataclass(frozen=True)
class Hooks:
    """A :class:`Runnable` made of two functions.

    Attributes:
        name: what logs call it.
        on_start: called by :meth:`start` (None: nothing to start).
        on_stop: ``fn(timeout)``, called by :meth:`stop` (None: nothing to stop).
    """

    name: str
    on_start: Callable[[], object] | None = None
    on_stop: Callable[[float], object] | None = None

    def start(self) -> None:
        """Call ``on_start``."""
        if self.on_start is not None:
            self.on_start()

    def stop(self, timeout: float) -> None:
        """Call ``on_stop(timeout)``."""
        if self.on_stop is not None:
            self.on_stop(timeout)


class RunnableGroup:
    """Runnables of one kind: started in the order added, stopped in reverse.

    Args:
        name: the group's name (one of :data:`GROUP_ORDER`).

    Not thread-safe: the manager adds runnables before :meth:`start` and calls
    :meth:`start` and :meth:`stop` from its run thread.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._runnables: list[Runnable] = []
        self._started: list[Runnable] = []

    @property
    def runnables(self) -> list[Runnable]:
        """The runnables, in the order added."""
        return list(self._runnables)

    def add(self, runnable: Runnable) -> None:
        """Add ``runnable`` at the end of the group."""
        self._runnables.append(runnable)

    def start(self) -> None:
        """Start every runnable in order.

        Raises:
            Exception: from a runnable's ``start``; the ones started before it stay
                started (:meth:`stop` stops them).
        """
        for runnable in self._runnables:
            if runnable in self._started:
                continue
            runnable.start()
            self._started.append(runnable)

    def stop(self, timeout: float) -> None:
        """Stop the started runnables in reverse order, each with ``timeout`` seconds.

        A runnable whose ``stop`` raises is logged; the others are still stopped.
        """
        while self._started:
            runnable = self._started.pop()
            try:
                runnable.stop(timeout)
            except Exception:  # one broken stop must not keep the rest running
                log.exception("a runnable failed to stop", group=self.name, runnable=runnable.name)
