"""Event predicates: which informer events of a watch may enqueue keys at all.

As controller-runtime's ``predicate`` package: a :class:`Predicate` looks at an add,
an update (old and new object) or a delete before the watch's map function runs, and
a watch enqueues nothing for an event one of its predicates refuses. The builder takes
them per watch (``for_(..., predicates=...)``, ``owns``, ``watches``).

Provided, with controller-runtime's meaning:

- :data:`GENERATION_CHANGED`: updates pass only when ``metadata.generation`` changed
  (a spec change, for kinds with a status subresource); adds and deletes pass. It also
  drops resyncs, which re-deliver an object unchanged.
- :data:`LABELS_CHANGED` / :data:`ANNOTATIONS_CHANGED`: updates pass only when
  ``metadata.labels`` / ``metadata.annotations`` changed.
- :data:`RESOURCE_VERSION_CHANGED`: updates pass only when the object changed at all.
- :func:`any_of` / :func:`all_of`: combinations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

__all__ = [
    "ANNOTATIONS_CHANGED",
    "GENERATION_CHANGED",
    "LABELS_CHANGED",
    "RESOURCE_VERSION_CHANGED",
    "Predicate",
    "UpdatePredicate",
    "all_of",
    "any_of",
]


class Predicate(Protocol):
    """Filters the events of one watch (controller-runtime's ``predicate.Predicate``)."""

    def create(self, obj: Mapping[str, Any]) -> bool:
        """Whether an added object (initial list included) may enqueue keys."""
        ...

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        """Whether an update (resyncs included: ``old`` and ``new`` alike) may enqueue keys."""
        ...

    def delete(self, obj: Mapping[str, Any]) -> bool:
        """Whether a deleted object (the last state known) may enqueue keys."""
        ...


@dataclass(frozen=True, slots=True)
class UpdatePredicate:
    """A predicate that judges updates only: adds and deletes always pass.

    Attributes:
        changed: ``fn(old, new) -> bool``, whether the update passes.
        name: what it checks, for logs and ``repr``.
    """

    changed: Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
    name: str

    def create(self, obj: Mapping[str, Any]) -> bool:
        """Pass."""
        return True

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        """Pass when ``changed(old, new)``."""
        return self.changed(old, new)

    def delete(self, obj: Mapping[str, Any]) -> bool:
        """Pass."""
        return True


def _field_changed(field: str) -> Callable[[Mapping[str, Any], Mapping[str, Any]], bool]:
    def changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return bool(
            (old.get("metadata") or {}).get(field) != (new.get("metadata") or {}).get(field)
        )

    return changed


#: Updates pass only when ``metadata.generation`` changed.
GENERATION_CHANGED: Final = UpdatePredicate(_field_changed("generation"), "generation changed")
#: Updates pass only when ``metadata.labels`` changed.
LABELS_CHANGED: Final = UpdatePredicate(_field_changed("labels"), "labels changed")
#: Updates pass only when ``metadata.annotations`` changed.
ANNOTATIONS_CHANGED: Final = UpdatePredicate(_field_changed("annotations"), "annotations changed")
#: Updates pass only when ``metadata.resourceVersion`` changed (no resyncs).
RESOURCE_VERSION_CHANGED: Final = UpdatePredicate(
    _field_changed("resourceVersion"), "resourceVersion changed"
)


@dataclass(frozen=True, slots=True)
class _Combined:
    predicates: tuple[Predicate, ...]
    every: bool

    def _judge(self, answers: Any) -> bool:
        return all(answers) if self.every else any(answers)

    def create(self, obj: Mapping[str, Any]) -> bool:
        return self._judge(p.create(obj) for p in self.predicates)

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return self._judge(p.update(old, new) for p in self.predicates)

    def delete(self, obj: Mapping[str, Any]) -> bool:
        return self._judge(p.delete(obj) for p in self.predicates)


def any_of(*predicates: Predicate) -> Predicate:
    """Return a predicate that passes an event when any of ``predicates`` does (``Or``)."""
    return _Combined(predicates, every=False)


def all_of(*predicates: Predicate) -> Predicate:
    """Return a predicate that passes an event when all of ``predicates`` do (``And``)."""
    return _Combined(predicates, every=True)
