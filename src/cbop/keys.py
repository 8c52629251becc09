"""Object keys and cache index names: how cbop addresses an object everywhere.

This module is the one home of the ``namespace/name`` key (``name`` alone for a
cluster-scoped object), as client-go's ``cache.MetaNamespaceKeyFunc`` and
``cache.SplitMetaNamespaceKey``: the informer caches file objects under it, event
handlers put it on workqueues, reconcilers parse it back, and ``cbop --once`` prints it.
It also names the caches' secondary indexes, so that the code registering an index and
the code querying it share one constant.

Pure functions on parsed-JSON dicts; no dependency on the rest of cbop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "BY_NAMESPACE",
    "CONFIGMAP_NAME_INDEX",
    "CONTROLLER_UID_INDEX",
    "ROLLOUT_CONFIGMAP_INDEX",
    "ROLLOUT_SECRET_INDEX",
    "key_of",
    "object_key",
    "split_key",
]

#: Name of every cache's built-in namespace index (value: the object's namespace, ``""``
#: for cluster-scoped objects).
BY_NAMESPACE: Final = "by_namespace"
#: Name of the index from the UID of an object's controller owner to the object
#: (``cbop.informers.index_by_controller_uid``).
CONTROLLER_UID_INDEX: Final = "controller-uid"
#: Name of the ConfigBundle cache's index from the key (``namespace/name``) of the
#: ConfigMap a bundle keeps to the bundle
#: (``cbop.configbundle.controller.index_by_configmap_name``).
CONFIGMAP_NAME_INDEX: Final = "configmap-name"
#: Name of the rollout workload caches' index from each ConfigMap a pod template
#: references (its key, ``namespace/name``) to the workload
#: (``cbop.rollout.index_by_configmap``).
ROLLOUT_CONFIGMAP_INDEX: Final = "rollout-configmap"
#: Name of the rollout workload caches' index from each Secret a pod template
#: references (its key, ``namespace/name``) to the workload
#: (``cbop.rollout.index_by_secret``).
ROLLOUT_SECRET_INDEX: Final = "rollout-secret"


def key_of(namespace: str | None, name: str) -> str:
    """Return the key of the object ``name`` in ``namespace``.

    Args:
        namespace: the namespace; ``None`` or ``""`` for a cluster-scoped object.
        name: the object's name.

    Returns:
        ``"<namespace>/<name>"``, or ``"<name>"`` without a namespace.
    """
    return f"{namespace}/{name}" if namespace else name


def object_key(obj: Mapping[str, Any]) -> str:
    """Return the key of an object dict from its ``metadata.namespace`` and ``name``.

    Raises:
        ValueError: the object has no ``metadata`` or no non-empty ``metadata.name``.
    """
    try:  # the common shape, without ABC isinstance checks (the informers' hot path)
        meta = obj["metadata"]
        name = meta["name"]
        namespace = meta.get("namespace")
        if type(name) is str and name and (namespace is None or type(namespace) is str):
            return f"{namespace}/{name}" if namespace else name
    except (KeyError, TypeError, AttributeError):
        pass
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise ValueError("object has no metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("object has no metadata.name")
    namespace = meta.get("namespace")
    return key_of(namespace if isinstance(namespace, str) else None, name)


def split_key(key: str) -> tuple[str | None, str]:
    """Split a key into ``(namespace, name)``; namespace is ``None`` for ``"name"``.

    Raises:
        ValueError: more than one ``/`` or an empty part.
    """
    parts = key.split("/")
    if len(parts) == 1 and parts[0]:
        return None, parts[0]
    if len(parts) == 2 and parts[0] and parts[1]:
        return parts[0], parts[1]
    raise ValueError(f"unexpected object key {key!r}")
