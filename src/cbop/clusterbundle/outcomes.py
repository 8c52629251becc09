"""The failures of the stamp work that no stamp shows, per ClusterConfigBundle and namespace.

This module owns :class:`Outcomes`, the table the stamp reconciler
(:class:`cbop.clusterbundle.reconcile.StampReconciler`) fills and the status and report
reconcilers read: the namespaces whose stamp the API server refused, and those where a
foreign ConfigBundle is in the stamp's way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from cbop.clusterbundle.decision import Failure

__all__ = ["Outcomes"]


class Outcomes:
    """The failures no stamp shows, per ClusterConfigBundle and namespace (thread-safe).

    What the stamp work learns that the status writer's caches may not show: the
    namespaces whose stamp the API server refused, and (for a sharded writer, whose
    cache holds only stamps) those where a foreign ConfigBundle is in the way.

    The stamp reconciler records each namespace's last outcome (a :class:`Failure`, or
    None when the stamp work went through); the status reconciler reads the failures.
    A namespace never recorded since the process started is *unknown*
    (:meth:`known`): the status then keeps what it said before, so a restart writes
    no status that only lacks the refusals the stamp work has not met again yet.

    Args:
        changed: a first listener (see :meth:`listen`).
    """

    def __init__(self, changed: Callable[[str], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._outcomes: dict[str, dict[str, Failure | None]] = {}
        self._listeners: list[Callable[[str], None]] = [] if changed is None else [changed]

    def listen(self, changed: Callable[[str], None]) -> None:
        """Call ``changed(name)`` (outside the lock) whenever ``name``'s failures change.

        Every listener is called, in the order added (the controller that carries the
        failures to the status enqueues the ClusterConfigBundle's name).
        """
        with self._lock:
            self._listeners.append(changed)

    def record(self, name: str, namespace: str, failure: Failure | None) -> bool:
        """Record ``namespace``'s outcome for ``name``; return whether the failures changed."""
        with self._lock:
            table = self._outcomes.setdefault(name, {})
            before = table.get(namespace)
            table[namespace] = failure
            listeners = list(self._listeners) if before != failure else []
        for changed in listeners:
            changed(name)
        return before != failure

    def known(self, name: str, namespace: str) -> bool:
        """Whether an outcome of ``namespace`` for ``name`` was recorded."""
        with self._lock:
            return namespace in self._outcomes.get(name, {})

    def failures(self, name: str) -> list[Failure]:
        """Return the recorded failures of ``name``, by namespace."""
        with self._lock:
            table = dict(self._outcomes.get(name, {}))
        return [f for ns in sorted(table) if (f := table[ns]) is not None]

    def forget(self, name: str) -> None:
        """Drop everything recorded for ``name`` (the ClusterConfigBundle is gone)."""
        with self._lock:
            self._outcomes.pop(name, None)
