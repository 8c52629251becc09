"""What a reconciler is to the runtime: a key in, a result or an exception out.

As controller-runtime's ``reconcile`` package: a :class:`Reconciler` gets one
``namespace/name`` key (see :mod:`cbop.keys`) at a time, reads what it needs from
informer caches, acts, and tells the worker what to do with the key through what it
returns or raises (see :mod:`cbop.runtime.controller` for the policy):

- a :class:`Result` with ``requeue_after`` > 0: look again after that many seconds;
- a :class:`Result` otherwise: done, the key's failure count is forgotten;
- :class:`Requeue`: an expected, transient failure (a lost optimistic-concurrency
  race): retried rate-limited and logged quietly;
- any other exception: an error, retried rate-limited.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Reconciler", "Requeue", "Result"]


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
