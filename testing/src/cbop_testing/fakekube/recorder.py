"""An Event sink that only remembers, as client-go's ``record.FakeRecorder``.

This module owns :class:`FakeRecorder`, what reconcilers get as their
:class:`cbop.runtime.seams.EventSink` in unit tests: every Event is kept, and rendered
as client-go's fake renders it (``"Warning ConfigMapConflict message"``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FakeRecorder", "RecordedEvent"]


@dataclass(frozen=True)
class RecordedEvent:
    """One Event recorded: about which object, its type, reason, message and routineness."""

    kind: str
    namespace: str | None
    name: str
    type: str
    reason: str
    message: str
    routine: bool


class FakeRecorder:
    """Keeps every Event in memory; thread-safe; never writes to any server.

    Attributes:
        recorded: the :class:`RecordedEvent` s, in order.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.recorded: list[RecordedEvent] = []

    def event(
        self,
        obj: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        *,
        routine: bool = False,
    ) -> None:
        """Record an Event about ``obj`` (as :meth:`cbop.runtime.events.EventRecorder.event`)."""
        meta = obj.get("metadata") or {}
        event = RecordedEvent(
            str(obj.get("kind", "")),
            meta.get("namespace"),
            str(meta.get("name", "")),
            type_,
            reason,
            message,
            routine,
        )
        with self._lock:
            self.recorded.append(event)

    def clear(self) -> None:
        """Forget the Events recorded so far."""
        with self._lock:
            self.recorded.clear()

    @property
    def events(self) -> list[str]:
        """The Events as client-go's FakeRecorder renders them: ``"<type> <reason> <message>"``."""
        with self._lock:
            return [f"{e.type} {e.reason} {e.message}" for e in self.recorded]

    @property
    def reasons(self) -> list[str]:
        """The reasons, in order."""
        with self._lock:
            return [e.reason for e in self.recorded]
