"""What a workload's pod template reads, gathered for the rollout decision.

The decision (:mod:`cbop.rollout.decision`) is pure; this module reads for it. The
managed ConfigMaps come from cbop's cache. cbop caches only the ConfigMaps it manages,
so a required reference missing from the cache is either absent (the pods wait for it,
and start with what appears) or another owner's (the pods read it): only a GET tells
them apart, and it is asked only while a workload has no baseline yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cbop.kube import CONFIGMAPS, ApiError
from cbop.rollout.decision import baseline, referenced_configmaps, required_configmaps
from cbop.runtime.seams import Client, Lister

__all__ = ["absent_configmaps", "read_references"]


def absent_configmaps(client: Client, namespace: str, names: Iterable[str]) -> frozenset[str]:
    """Return those of ``names`` that do not exist in ``namespace``: one GET each.

    Raises:
        ApiError, ConnectionFailed: any answer but 404 (the caller retries).
    """
    absent = set()
    for name in names:
        try:
            client.get(CONFIGMAPS, namespace, name)
        except ApiError as err:
            if not err.is_not_found:
                raise
            absent.add(name)
    return frozenset(absent)


def read_references(
    client: Client, configmaps: Lister, namespace: str | None, workload: Mapping[str, Any]
) -> tuple[dict[str, Mapping[str, Any]], frozenset[str]]:
    """Return the cached ConfigMaps ``workload`` references, and the required ones absent.

    Args:
        client: asked only for a workload without a baseline whose required references
            are not all in the cache (:func:`absent_configmaps`).
        configmaps: the lister of cbop's ConfigMap cache.
        namespace: the workload's namespace (None: none is asked for).
        workload: a Deployment, StatefulSet or DaemonSet dict, never mutated.

    Returns:
        ``(name -> ConfigMap, absent names)``, as :func:`cbop.rollout.decision.decide`
        takes them.
    """
    cached = {}
    for name in referenced_configmaps(workload):
        cm = configmaps.get(namespace, name)
        if cm is not None:
            cached[name] = cm
    if baseline(workload):
        return cached, frozenset()
    unknown = [name for name in required_configmaps(workload) if name not in cached]
    if not unknown or namespace is None:
        return cached, frozenset()
    return cached, absent_configmaps(client, namespace, unknown)
