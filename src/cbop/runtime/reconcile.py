"""What a reconciler is to the runtime: a key in, a result or an exception out.

As controller-runtime's ``reconcile`` package: a :class:`Reconciler` gets one
``namespace/name`` key (see :mod:`cbop.keys`) at a time, reads what it needs from
informer caches, acts, and tells the worker what to do with the key through what it
returns or raises (see :mod:`cbop.runtime.controller` for the policy):

- a :class:`Result` with ``requeue_after`` > 0: look again after that many seconds;
- a :class:`Result` otherwise: done, the key's failure count is forgotten;
- :class:`Requeue`: an expected, transient failure (a lost optimistic-concurrency
  race): retried rate-limited and logged quietly;
- :class:`TerminalError`: a failure no retry can fix (controller-runtime's
  ``reconcile.TerminalError``): counted, logged, never retried; a new event for the
  key (a spec change) brings it back;
- any other exception: an error, retried rate-limited.

Every reconcile runs inside :func:`reconcile_context`, which the controller (and
``cbop --once``) opens: it binds the controller's name, the key's namespace and name
and a fresh reconcile id to structlog's context variables, so every log line of the
reconcile, whichever module writes it, carries them without a logger being passed
around (the ``merge_contextvars`` processor of :mod:`cbop.logconfig` adds them).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import structlog

from cbop.keys import split_key

__all__ = [
    "Reconciler",
    "Requeue",
    "Result",
    "TerminalError",
    "new_reconcile_id",
    "reconcile_context",
]

#: Reconcile ids: a random prefix per process and a counter (unique in the process's
#: log, and far cheaper than a UUID per reconcile).
_RECONCILE_ID_PREFIX = uuid.uuid4().hex[:6]
_reconcile_ids = itertools.count(1)


def new_reconcile_id() -> str:
    """Return a fresh reconcile id: the process's 6 hex digits and a 6-digit hex count."""
    return f"{_RECONCILE_ID_PREFIX}{next(_reconcile_ids):06x}"


@contextmanager
def reconcile_context(controller: str, key: str) -> Iterator[str]:
    """Bind ``controller``, ``namespace``, ``name`` and a new ``reconcile_id`` for logs.

    Args:
        controller: the controller's name (``configbundle``, ``rollout-deployment``).
        key: the object key being reconciled (``namespace/name``, or ``name``).

    Yields:
        The reconcile id. The bindings are structlog context variables of the calling
        thread (and context), restored on exit.
    """
    namespace, name = split_key(key)
    reconcile_id = new_reconcile_id()
    with structlog.contextvars.bound_contextvars(
        controller=controller, namespace=namespace, name=name, reconcile_id=reconcile_id
    ):
        yield reconcile_id


class Result(Protocol):
    """What the worker reads of a reconcile's return value."""

    @property
    def requeue_after(self) -> float | None:
        """Seconds until the key should be reconciled again; None or 0: not at all."""
        ...


class Reconciler(Protocol):
    """Reconciles one object key at a time.

    Called from several worker threads at once, but never for the same key on two of
    them (the workqueue guarantees it).
    """

    def reconcile(self, key: str) -> Result:
        """Bring the object ``key`` (``namespace/name``) to its desired state.

        Raises:
            Requeue: a transient, expected failure; retried quietly, rate-limited.
            Exception: any other failure; retried rate-limited.
        """
        ...


class Requeue(Exception):  # noqa: N818 - a signal, named for what the controller does
    """A transient, expected failure (e.g. 409 Conflict): retry rate-limited, log quietly."""


class TerminalError(Exception):
    """A failure no retry can fix: counted and logged, the key is not requeued.

    As controller-runtime's ``reconcile.TerminalError``: the controller counts it in
    ``controller_runtime_terminal_reconcile_errors_total`` (and as an error), logs its
    message without a traceback, and forgets the key's failures; only a new event for
    the key reconciles it again. Raise it after reporting the failure where users look
    (a status condition, an Event).
    """
