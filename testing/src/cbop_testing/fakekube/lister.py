"""A lister over a cache the test fills, for reconcilers that read through listers.

This module owns :class:`CacheLister`: cbop's own :class:`cbop.informers.Lister` over an
:class:`cbop.informers.Indexer` (as client-go tests fill an informer's indexer by hand),
filled by the test with :meth:`CacheLister.add` or copied from an
:class:`~cbop_testing.fakekube.ObjectTracker` with :meth:`CacheLister.sync`, so a
test can make the cache lag behind the server on purpose.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cbop.informers import Indexer, IndexFunc, Lister
from cbop.kube import Resource
from cbop_testing.fakekube.tracker import ObjectTracker

__all__ = ["CacheLister"]


class CacheLister(Lister):
    """A :class:`Lister` whose cache the test controls.

    Args:
        objects: objects to cache at once.
        indexers: named index functions (``by_namespace`` is always there).
    """

    def __init__(
        self,
        objects: Iterable[Mapping[str, Any]] = (),
        *,
        indexers: Mapping[str, IndexFunc] | None = None,
    ) -> None:
        self.indexer = Indexer(indexers, detect_mutations=False)
        super().__init__(self.indexer)
        for obj in objects:
            self.indexer.update(obj)

    def add(self, *objects: Mapping[str, Any]) -> None:
        """Cache (or replace) objects."""
        for obj in objects:
            self.indexer.update(obj)

    def delete(self, *objects: Mapping[str, Any] | str) -> None:
        """Drop objects (or ``namespace/name`` keys) from the cache."""
        for obj in objects:
            self.indexer.delete(obj)

    def sync(
        self, tracker: ObjectTracker, res: Resource, namespace: str | None = None
    ) -> CacheLister:
        """Make the cache hold exactly what ``tracker`` stores of ``res``; return self."""
        self.indexer.replace(tracker.objects(res, namespace), tracker.resource_version)
        return self
