"""A list/watch fake with one collection per (resource, namespace), for informer factories.

Unlike ``test_informer.FakeListWatch`` (one scripted queue of answers), it answers every
list from the objects it holds, so any number of informers can run against it at once.
Watches get a :class:`~tests.unit.test_informer.FakeStream` the test can push events to.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from typing import Any

from cbop.kube import Resource
from tests.unit.test_informer import FakeStream

Scope = tuple[str, str | None]  # (plural, namespace)


class FakeApi:
    """Objects by (plural, namespace); refusals and watch failures set by the test."""

    def __init__(self) -> None:
        self.objects: dict[Scope, list[dict[str, Any]]] = {}
        self.refusals: dict[Scope, BaseException] = {}
        self.watch_error: BaseException | None = None
        self.lists: list[tuple[str, str | None, str | None]] = []
        self.streams: dict[Scope, list[FakeStream]] = {}
        self._lock = threading.Lock()

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        resource_version: str | None = None,
        item_hook: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        shard_selector: str | None = None,
    ) -> dict[str, Any]:
        with self._lock:
            self.lists.append((res.plural, namespace, label_selector))
            refusal = self.refusals.get((res.plural, namespace))
            objects = copy.deepcopy(self.objects.get((res.plural, namespace), []))
        if refusal is not None:
            raise refusal
        hook = item_hook or (lambda obj: obj)
        return {"metadata": {"resourceVersion": "1"}, "items": [hook(o) for o in objects]}

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int,
        allow_bookmarks: bool = True,
        read_timeout: float,
        shard_selector: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        if self.watch_error is not None:
            raise self.watch_error
        stream = FakeStream()
        with self._lock:
            self.streams.setdefault((res.plural, namespace), []).append(stream)
        return stream

    def stream(self, plural: str, namespace: str | None) -> FakeStream:
        """Return the newest watch stream of a collection."""
        with self._lock:
            return self.streams[(plural, namespace)][-1]

    def watching(self, plural: str, namespace: str | None) -> bool:
        """Whether a watch of the collection has been opened."""
        with self._lock:
            return bool(self.streams.get((plural, namespace)))
