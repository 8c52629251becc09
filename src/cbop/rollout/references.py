"""What a workload's pod template reads, gathered for the rollout decision.

The decision (:mod:`cbop.rollout.decision`) is pure; this module reads for it. The
managed ConfigMaps come from cbop's cache. cbop caches only the ConfigMaps it manages,
so a required reference missing from the cache is either absent (the pods wait for it,
and start with what appears) or another owner's (the pods read it): only a GET tells
them apart, and it is asked only while a workload has no baseline yet.

Secrets are read with less (:class:`SecretReader`): only from the cache of the Secrets
cbop manages, never by a GET of a Secret cbop does not manage. A required Secret
missing from the cache counts as absent only while a ConfigBundle of the namespace
declares it as its target (it will be written, and the pods wait for it); else it is
another owner's, or none, and counts as nothing. Their digests are keyed with the
digest key, read only when a managed Secret is referenced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cbop.api import target_of
from cbop.keys import BY_NAMESPACE
from cbop.kube import CONFIGMAPS, ApiError
from cbop.rollout.decision import (
    SecretInputs,
    baseline,
    is_managed,
    referenced_configmaps,
    referenced_secrets,
    required_configmaps,
    required_secrets,
)
from cbop.runtime.seams import Client, Lister

__all__ = ["SecretReader", "absent_configmaps", "read_references"]


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


class SecretReader:
    """Reads what a workload's Secret references are, from caches only.

    Args:
        secrets: the lister of the managed-Secret cache (label
            ``app.kubernetes.io/managed-by=cbop``), over the namespaces cbop serves
            Secrets in.
        bundles: the ConfigBundle cache (the targets that will be written).
        serves: ``fn(namespace) -> bool``: whether cbop reads and writes Secrets there
            (:meth:`cbop.secretaccess.SecretsScope.serves`).
        key: ``fn() -> bytes``, the digest key (:meth:`cbop.secretaccess.DigestKey.key`),
            called only when a referenced Secret is managed.
    """

    def __init__(
        self,
        *,
        secrets: Lister,
        bundles: Lister,
        serves: Callable[[str], bool],
        key: Callable[[], bytes],
    ) -> None:
        self._secrets = secrets
        self._bundles = bundles
        self._serves = serves
        self._key = key

    def read(self, namespace: str | None, workload: Mapping[str, Any]) -> SecretInputs:
        """Return the :class:`cbop.rollout.decision.SecretInputs` of ``workload``.

        Nothing outside the namespaces served: there cbop has no Secret cache, and the
        references count as nothing.

        Raises:
            cbop.secretaccess.DigestKeyError, ApiError, ConnectionFailed: the digest
                key was needed and could not be read or made (the caller retries).
        """
        if namespace is None or not self._serves(namespace):
            return SecretInputs()
        cached = {}
        for name in referenced_secrets(workload):
            secret = self._secrets.get(namespace, name)
            if secret is not None:
                cached[name] = secret
        key = self._key() if any(is_managed(s) for s in cached.values()) else None
        absent: frozenset[str] = frozenset()
        if not baseline(workload):
            unknown = set(required_secrets(workload)) - set(cached)
            absent = frozenset(unknown & self._targets(namespace)) if unknown else frozenset()
        return SecretInputs(secrets=cached, absent=absent, key=key)

    def _targets(self, namespace: str) -> set[str]:
        """Return the names of the Secrets the live ConfigBundles of ``namespace`` keep."""
        names = set()
        for bundle in self._bundles.by_index(BY_NAMESPACE, namespace):
            if (bundle.get("metadata") or {}).get("deletionTimestamp"):
                continue
            target = target_of(bundle)
            if target is not None and target.is_secret:
                names.add(target.name)
        return names
