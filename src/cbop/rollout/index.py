"""The workload informer's indexes from referenced ConfigMap and Secret to workload. Pure.

A ConfigMap or Secret change must wake exactly the workloads whose pod template reads
it. The workload informers carry the :data:`CONFIGMAP_INDEX` and :data:`SECRET_INDEX`
indexes (``indexers=INDEXERS``); the watches' map functions
(:func:`cbop.rollout.coalesce.configmap_mapper`, :func:`cbop.rollout.coalesce.secret_mapper`)
look the object's :func:`configmap_index_value` up in the index of its kind. Index
values carry the namespace, so one cluster-wide informer never mixes up two namespaces'
objects of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from cbop.keys import ROLLOUT_CONFIGMAP_INDEX, ROLLOUT_SECRET_INDEX, key_of
from cbop.rollout.decision import referenced_configmaps, referenced_secrets

__all__ = [
    "CONFIGMAP_INDEX",
    "INDEXERS",
    "SECRET_INDEX",
    "configmap_index_value",
    "index_by_configmap",
    "index_by_secret",
]

#: Name of the workload informers' index: ``namespace/configmap`` -> workloads.
CONFIGMAP_INDEX: Final = ROLLOUT_CONFIGMAP_INDEX
#: Name of the workload informers' index: ``namespace/secret`` -> workloads.
SECRET_INDEX: Final = ROLLOUT_SECRET_INDEX


def configmap_index_value(namespace: str, name: str) -> str:
    """Return the index value of object ``name`` in ``namespace``: ``namespace/name``.

    The same for a ConfigMap and a Secret; each kind has its own index.
    """
    return key_of(namespace, name)


def _namespace(workload: Mapping[str, Any]) -> str:
    return str((workload.get("metadata") or {}).get("namespace") or "")


def index_by_configmap(workload: Mapping[str, Any]) -> list[str]:
    """Index function: a workload -> ``namespace/name`` of every ConfigMap it references.

    All references count, managed or not (whether a ConfigMap is managed can change
    without the workload changing); see
    :func:`cbop.rollout.decision.referenced_configmaps`.
    """
    namespace = _namespace(workload)
    return [configmap_index_value(namespace, n) for n in referenced_configmaps(workload)]


def index_by_secret(workload: Mapping[str, Any]) -> list[str]:
    """Index function: a workload -> ``namespace/name`` of every Secret it references.

    As :func:`index_by_configmap`, from :func:`cbop.rollout.decision.referenced_secrets`.
    """
    namespace = _namespace(workload)
    return [configmap_index_value(namespace, n) for n in referenced_secrets(workload)]


#: The indexes of the rollout's workload informers.
INDEXERS: Final = {CONFIGMAP_INDEX: index_by_configmap, SECRET_INDEX: index_by_secret}
