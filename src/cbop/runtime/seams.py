"""The seams every reconciler is built on: what it reads, writes through, reports to.

This module owns the protocols a reconciler of any controller package takes in its
constructor, so that no controller defines them again: a :class:`Lister` over an
informer cache (:class:`cbop.informers.MultiNamespaceLister` satisfies it), a
:class:`Client` for the API calls (:class:`cbop.kube.KubeClient`, fenced under leader
election, satisfies it), and an :class:`EventSink` for Events
(:class:`cbop.runtime.events.EventRecorder`). Tests build a reconciler from fakes of
these protocols and call it directly, as sample-controller's tests do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from cbop.kube import Resource

__all__ = ["Client", "EventSink", "EventType", "Lister"]

#: The two Event types of core/v1 Events.
EventType = Literal["Normal", "Warning"]


class Lister(Protocol):
    """Read-only view of an informer cache (objects are shared: never mutate them)."""

    def get(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """Return the cached object ``namespace/name`` (``name`` when cluster-scoped) or None."""
        ...

    def by_index(self, index_name: str, value: str) -> Sequence[Mapping[str, Any]]:
        """Return the cached objects whose index ``index_name`` yields ``value``.

        Raises:
            KeyError: the cache has no index ``index_name``.
        """
        ...


class Client(Protocol):
    """The API calls reconcilers make; each raises :class:`cbop.kube.ApiError` on failure.

    Writes carry ``field_manager``; ``dry_run`` sends ``dryRun=All`` (the API server
    validates and answers, and stores nothing). Under leader election a write may also
    raise :class:`cbop.kube.LeaseNotHeld` (the write fence is closed).
    """

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        """GET one object, ``managedFields`` included (``is_not_found`` on 404)."""
        ...

    def create(
        self,
        res: Resource,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """POST (``is_already_exists``, ``is_invalid``)."""
        ...

    def update(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        subresource: str | None = None,
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """PUT (``is_conflict``, ``is_not_found``, ``is_invalid``)."""
        ...

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool | None = None,
    ) -> dict[str, Any]:
        """PATCH with ``patch_type`` ``merge``, ``json``, ``strategic`` or ``apply``.

        ``apply`` is server-side apply; ``force`` takes fields other managers own.
        """
        ...

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        preconditions: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """DELETE (``is_not_found``; ``is_conflict`` when ``preconditions`` fail)."""
        ...


class EventSink(Protocol):
    """Where a reconciler records Events (:class:`cbop.runtime.events.EventRecorder`)."""

    def event(
        self,
        obj: Mapping[str, Any],
        type_: EventType,
        reason: str,
        message: str,
        *,
        routine: bool = False,
    ) -> None:
        """Record one Event about ``obj`` (its ``apiVersion``, ``kind`` and ``metadata``).

        ``routine`` marks a change the spec asked for, written only when the process
        records every Event (``--events all``). Never raises and never blocks on the
        API server.
        """
        ...
