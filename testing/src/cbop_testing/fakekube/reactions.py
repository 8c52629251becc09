"""Recorded actions and scripted reactions of the fake API server.

This module owns :class:`Action` (one call the code under test made, as client-go's
``testing.Action``) and the reactions a test puts in front of the tracker (as client-go's
``Reactor`` chain, newest first): a reaction is called with the action and returns
``None`` to pass it on, returns an answer (an object dict, or a
:class:`~cbop_testing.fakekube.FakeWatch` for a watch), or raises the error the call
must raise. Builders: :func:`fail`, :func:`conflict_on`, :func:`delay`, :class:`Stall`,
:class:`Script`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from cbop.kube import ConnectionFailed, Resource
from cbop_testing.fakekube import errors

__all__ = [
    "WRITE_VERBS",
    "Action",
    "Reaction",
    "Script",
    "Stall",
    "conflict_on",
    "delay",
    "fail",
]

#: The verbs that change state.
WRITE_VERBS = frozenset({"create", "update", "patch", "delete"})


@dataclass(frozen=True)
class Action:
    """One call made through :class:`~cbop_testing.fakekube.FakeKube`.

    Attributes:
        verb: ``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``
            (or the verb of a raw :meth:`~cbop.kube.KubeClient.request`).
        resource: the plural, e.g. ``"configmaps"``.
        namespace: the namespace (``None`` for cluster scope or all namespaces).
        name: the object's name (``None`` for create, list, watch).
        subresource: e.g. ``"status"``.
        body: the request body (a dict, or a list for JSON patches).
        options: the other arguments that were given (``patch_type``,
            ``field_manager``, ``dry_run``, ``label_selector``, ``resource_version``, ...).
        res: the :class:`Resource` (not compared).
    """

    verb: str
    resource: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    body: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)
    res: Resource | None = field(default=None, compare=False, repr=False)

    @property
    def is_write(self) -> bool:
        """Whether the verb changes state."""
        return self.verb in WRITE_VERBS

    def matches(self, verb: str = "*", resource: str = "*") -> bool:
        """Whether the action is ``verb`` on ``resource`` (``*`` matches anything).

        ``resource`` may name a subresource: ``"configbundles/status"``.
        """
        full = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return verb in ("*", self.verb) and resource in ("*", self.resource, full)

    @property
    def key(self) -> tuple[str, str, str | None, str | None]:
        """``(verb, resource[/subresource], namespace, name)``, handy to compare."""
        full = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return (self.verb, full, self.namespace, self.name)


class Reaction(Protocol):
    """A scripted answer: ``None`` passes the action on; a value answers it; raising fails it."""

    def __call__(self, action: Action) -> Any:
        """React to ``action``."""
        ...


class _Counted:
    """Counts the actions it is offered that pass ``when``."""

    def __init__(self, when: Callable[[Action], bool] | None) -> None:
        self._when = when
        self._lock = threading.Lock()
        self.seen = 0

    def _count(self, action: Action) -> int | None:
        if self._when is not None and not self._when(action):
            return None
        with self._lock:
            self.seen += 1
            return self.seen


def fail(
    error: BaseException | Callable[[Action], BaseException],
    *,
    times: int | None = None,
    after: int = 0,
    when: Callable[[Action], bool] | None = None,
) -> Reaction:
    """Fail matching calls with ``error``.

    Args:
        error: the exception raised, or a function of the action that builds it
            (e.g. ``lambda a: errors.not_found(a.res, a.name)``).
        times: how many calls fail (``None``: every one).
        after: let this many matching calls through first.
        when: only actions for which it returns True count and fail.
    """
    counter = _Counted(when)

    def react(action: Action) -> Any:
        n = counter._count(action)
        if n is None or n <= after or (times is not None and n > after + times):
            return None
        raise error(action) if callable(error) and not isinstance(error, BaseException) else error

    return react


def conflict_on(n: int, *, when: Callable[[Action], bool] | None = None) -> Reaction:
    """Answer the ``n``-th matching write (1-based) with ``409 Conflict``, as a lost race.

    Other calls pass on. Reads are not counted.
    """

    def is_write(action: Action) -> bool:
        return action.is_write and (when is None or when(action))

    counter = _Counted(is_write)

    def react(action: Action) -> Any:
        if counter._count(action) != n:
            return None
        res = action.res or Resource("", "v1", action.resource, "Object")
        raise errors.conflict(res, action.name or "")

    return react


class _SleepClock(Protocol):
    def sleep(self, seconds: float) -> None: ...


def delay(clock: _SleepClock, seconds: float) -> Reaction:
    """Hold each matching call for ``seconds`` on ``clock``, then pass it on.

    With a :class:`cbop_testing.clock.FakeClock` the call returns once the test moves
    the clock that far.
    """

    def react(action: Action) -> Any:
        clock.sleep(seconds)
        return None

    return react


class _WaitClock(Protocol):
    def now(self) -> float: ...
    def wait_until(self, cond: threading.Condition, deadline: float | None) -> bool: ...


class Stall:
    """A server that does not answer: calls block until released or timed out.

    A stalled call waits on ``clock`` until :meth:`release` (then it passes on to the
    next reaction or the tracker) or until ``timeout`` seconds of clock time passed
    (then it raises ``ConnectionFailed(timed_out=True)``, as the client's read timeout).

    Args:
        clock: a clock with ``now`` and ``wait_until`` (a FakeClock).
        timeout: clock seconds before a stalled call times out; ``None``: never.
    """

    def __init__(self, clock: _WaitClock, *, timeout: float | None = None) -> None:
        self._clock = clock
        self._timeout = timeout
        self._cond = threading.Condition()
        self._released = False
        self.stalled = 0
        """How many calls are blocked now."""

    def release(self) -> None:
        """Let every blocked call, and every later one, through."""
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def wait_stalled(self, n: int = 1, timeout: float = 5.0) -> bool:
        """Wait (real time) until ``n`` calls are blocked; return whether they are."""
        with self._cond:
            return self._cond.wait_for(lambda: self.stalled >= n, timeout)

    def __call__(self, action: Action) -> Any:
        """Block the call until released (pass it on) or timed out (raise)."""
        deadline = None if self._timeout is None else self._clock.now() + self._timeout
        with self._cond:
            self.stalled += 1
            self._cond.notify_all()
            try:
                while not self._released:
                    if deadline is not None and self._clock.now() >= deadline:
                        raise ConnectionFailed(
                            f"{action.verb} {action.resource}: read timed out",
                            cause=TimeoutError(),
                            timed_out=True,
                        )
                    self._clock.wait_until(self._cond, deadline)
            finally:
                self.stalled -= 1
        return None


_PASS = object()


class Script:
    """A queue of answers, one per matching call, as client-go's scripted reactors.

    Each answer is a dict (returned), a :class:`~cbop_testing.fakekube.FakeWatch`
    (returned to a watch), an exception (raised), or :attr:`PASS` (the call goes on to the
    tracker). Once the queue is empty every call passes on, or, with ``wait``, waits
    that many real seconds for the test to queue an answer (a server the test answers
    by hand) and then raises :class:`TimeoutError`. Answers may be appended with
    :meth:`add` while the test runs; :meth:`wait_empty` waits until all were used.

    Args:
        answers: the first answers.
        wait: real seconds a call waits for an answer when none is queued; ``None``:
            pass on at once.
    """

    PASS: Any = _PASS

    def __init__(self, *answers: Any, wait: float | None = None) -> None:
        self._answers = list(answers)
        self._cond = threading.Condition()
        self._wait = wait
        self.used = 0

    def add(self, *answers: Any) -> None:
        """Queue more answers."""
        with self._cond:
            self._answers.extend(answers)
            self._cond.notify_all()

    def put(self, answer: Any) -> None:
        """Queue one answer (as ``queue.Queue.put``)."""
        self.add(answer)

    def clear(self) -> int:
        """Drop every queued answer; return how many were dropped."""
        with self._cond:
            dropped = len(self._answers)
            self._answers.clear()
            self._cond.notify_all()
            return dropped

    @property
    def left(self) -> int:
        """How many answers are still queued."""
        with self._cond:
            return len(self._answers)

    def wait_empty(self, timeout: float = 5.0) -> bool:
        """Wait (real time) until every queued answer was used."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._answers, timeout)

    def __call__(self, action: Action) -> Any:
        """Answer with the next queued answer, or pass on."""
        with self._cond:
            waited = self._wait is None or self._cond.wait_for(
                lambda: bool(self._answers), self._wait
            )
            if not waited:
                raise TimeoutError(f"no scripted answer for {action.verb} {action.resource}")
            if not self._answers:
                return None
            answer = self._answers.pop(0)
            self.used += 1
            self._cond.notify_all()
        if answer is _PASS:
            return None
        if isinstance(answer, BaseException):
            raise answer
        return answer
