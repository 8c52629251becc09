"""Index functions and label selection: what the cache files an object under.

This module owns the functions of one object that the informer cache indexes and
selects by, as client-go's ``cache.IndexFunc`` s and equality label selectors: an
:data:`IndexFunc` maps an object to the index values it is filed under;
:func:`index_by_namespace` backs the ``by_namespace`` index every
:class:`cbop.informers.indexer.Indexer` has, :func:`index_by_controller_uid` files
objects under their controller owner's UID and :func:`index_by_label` under a label's
value; :func:`matches_labels` is the label selector of
:meth:`cbop.informers.listers.Lister.list`. Controllers pick their indexes from here
(through :mod:`cbop.informers`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "IndexFunc",
    "index_by_controller_uid",
    "index_by_label",
    "index_by_namespace",
    "matches_labels",
]

#: An index function: object -> the index values it is filed under (may be empty).
IndexFunc = Callable[[Mapping[str, Any]], list[str]]


def index_by_namespace(obj: Mapping[str, Any]) -> list[str]:
    """Index function: ``[metadata.namespace]`` (``[""]`` for cluster-scoped objects)."""
    meta = obj.get("metadata")
    if type(meta) is dict:
        namespace = meta.get("namespace")
        return [namespace if type(namespace) is str else ""]
    meta = meta or {}
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    return [namespace if isinstance(namespace, str) else ""]


def index_by_controller_uid(obj: Mapping[str, Any]) -> list[str]:
    """Index function: the UID of the owner reference with ``controller: true``, if any.

    Lets a controller find the objects it owns from the owner's UID (``by_index(name,
    owner_uid)``), as the ownerReference-based lookups of kube-controller-manager do.
    """
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return []
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return []
    for ref in refs:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            uid = ref.get("uid")
            if isinstance(uid, str) and uid:
                return [uid]
    return []


def index_by_label(label: str) -> IndexFunc:
    """Return an index function filing objects under the value of label ``label``."""

    def index(obj: Mapping[str, Any]) -> list[str]:
        meta = obj.get("metadata")
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        value = labels.get(label) if isinstance(labels, Mapping) else None
        return [value] if isinstance(value, str) else []

    return index


def matches_labels(obj: Mapping[str, Any], selector: Mapping[str, str] | None) -> bool:
    """Return whether every ``key: value`` of ``selector`` is among the object's labels.

    An empty or ``None`` selector matches everything (equality-based selectors only).
    """
    if not selector:
        return True
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(labels, Mapping):
        return False
    return all(labels.get(k) == v for k, v in selector.items())
