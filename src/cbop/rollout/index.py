"""The workload informer's index from referenced ConfigMap to workload. Pure.

A ConfigMap change must wake exactly the workloads whose pod template reads it. The
workload informers carry the :data:`CONFIGMAP_INDEX` index (add it with
``indexers={CONFIGMAP_INDEX: index_by_configmap}``); the ConfigMap watch's map function
(:func:`cbop.rollout.coalesce.configmap_mapper`) looks the ConfigMap's
:func:`configmap_index_value` up in it. Index values carry the namespace, so one
cluster-wide informer never mixes up two namespaces' ConfigMaps of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from cbop.keys import ROLLOUT_CONFIGMAP_INDEX, key_of
from cbop.rollout.decision import referenced_configmaps

__all__ = ["CONFIGMAP_INDEX", "configmap_index_value", "index_by_configmap"]

#: Name of the workload informers' index: ``namespace/configmap`` -> workloads.
CONFIGMAP_INDEX: Final = ROLLOUT_CONFIGMAP_INDEX


def configmap_index_value(namespace: str, name: str) -> str:
    """Return the index value of ConfigMap ``name`` in ``namespace``: ``namespace/name``."""
    return key_of(namespace, name)


def index_by_configmap(workload: Mapping[str, Any]) -> list[str]:
    """Index function: a workload -> ``namespace/name`` of every ConfigMap it references.

    All references count, managed or not (whether a ConfigMap is managed can change
    without the workload changing); see
    :func:`cbop.rollout.decision.referenced_configmaps`.
    """
    namespace = str((workload.get("metadata") or {}).get("namespace") or "")
    return [configmap_index_value(namespace, n) for n in referenced_configmaps(workload)]
