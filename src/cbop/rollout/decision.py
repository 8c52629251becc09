"""The rollout decision: a workload and the managed ConfigMaps it reads -> one action.

Pure functions on parsed-JSON dicts; no client, no threads (an import-linter contract
says so). The act layer (:mod:`cbop.rollout.reconcile`) performs what they decide.

- :func:`referenced_configmaps`: the ConfigMap names a Deployment, StatefulSet or
  DaemonSet's pod template reads (volumes, projected volume sources, ``envFrom``,
  ``env[].valueFrom``; in containers, init containers and ephemeral containers).
- :func:`is_managed`: whether a ConfigMap is one cbop keeps (its managed-by label and a
  controller owner reference to a ConfigBundle, as :mod:`cbop.reconciler.desired` writes
  them). References to other ConfigMaps are ignored.
- :func:`config_digest`: ``sha256:<hex>`` over the sorted (ConfigMap name, content hash)
  pairs, the value of the pod template annotation ``cbop.dev/config-hash``. The content
  hash is the reconciler's own :func:`cbop.reconciler.desired.content_hash` of the data
  and binaryData as they are in the cluster (what pods read), so it equals the
  ConfigMap's ``cbop.dev/content-hash`` annotation whenever the ConfigMap is in sync.
- :func:`decide`: none, skip (paused Deployment) or apply, in that order of checks:
  not opted in or being deleted -> none; no managed reference -> none (the annotation,
  if any, stays: removing it would roll the workload for nothing); digest equal to the
  annotation -> none; paused Deployment -> skip; else apply.
- :func:`apply_body`: the server-side apply body that sets only that annotation.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from cbop.api import LABEL_MANAGED_BY, MANAGED_BY_VALUE
from cbop.reconciler.desired import (
    content_hash,
    controller_reference,
    decode_binary,
    is_bundle_reference,
)

__all__ = [
    "ANNOTATION_CONFIG_HASH",
    "FIELD_MANAGER",
    "LABEL_ROLLOUT",
    "ROLLOUT_SELECTOR",
    "Action",
    "Decision",
    "ManagedConfigMap",
    "apply_body",
    "config_digest",
    "current_digest",
    "decide",
    "is_managed",
    "managed_references",
    "referenced_configmaps",
]

#: Label that opts a workload in (value ``"true"``).
LABEL_ROLLOUT: Final = "cbop.dev/rollout"
#: The server-side label selector of the workload informers: only opted-in workloads.
ROLLOUT_SELECTOR: Final = f"{LABEL_ROLLOUT}=true"
#: Pod template annotation cbop writes; a new value makes the workload's controller roll.
ANNOTATION_CONFIG_HASH: Final = "cbop.dev/config-hash"
#: Field manager of the server-side apply (its own, apart from the ConfigMap writes).
FIELD_MANAGER: Final = "cbop-rollout"

_CONTAINER_LISTS: Final = ("initContainers", "containers", "ephemeralContainers")


class Action(enum.StrEnum):
    """What the rollout reconcile does to the workload."""

    NONE = "none"
    SKIP = "skip"
    APPLY = "apply"


@dataclass(frozen=True, slots=True)
class ManagedConfigMap:
    """A referenced ConfigMap that cbop manages.

    Attributes:
        name: the ConfigMap's name.
        bundle: the name of the ConfigBundle that controls it (same namespace).
        content_hash: ``sha256:<hex>`` of its data and binaryData.
    """

    name: str
    bundle: str
    content_hash: str


@dataclass(frozen=True, slots=True)
class Decision:
    """One rollout decision.

    Attributes:
        action: what to do.
        digest: the digest the annotation should carry (``""`` when there is no managed
            reference).
        current: the annotation's value now (``""`` when absent).
        configmaps: the managed ConfigMaps the digest covers, sorted by name.
        message: a sentence for the user (for SKIP: the Event message).
    """

    action: Action
    digest: str = ""
    current: str = ""
    configmaps: tuple[ManagedConfigMap, ...] = ()
    message: str = ""


def _pod_spec(workload: Mapping[str, Any]) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = (
        ((workload.get("spec") or {}).get("template") or {}).get("spec")
    ) or {}
    return spec


def _names(pod_spec: Mapping[str, Any]) -> Iterator[str]:
    for volume in pod_spec.get("volumes") or ():
        yield (volume.get("configMap") or {}).get("name", "")
        for source in (volume.get("projected") or {}).get("sources") or ():
            yield (source.get("configMap") or {}).get("name", "")
    for field in _CONTAINER_LISTS:
        for container in pod_spec.get(field) or ():
            for env_from in container.get("envFrom") or ():
                yield (env_from.get("configMapRef") or {}).get("name", "")
            for env in container.get("env") or ():
                value_from = env.get("valueFrom") or {}
                yield (value_from.get("configMapKeyRef") or {}).get("name", "")


def referenced_configmaps(workload: Mapping[str, Any]) -> list[str]:
    """Return the sorted, distinct ConfigMap names ``workload``'s pod template references.

    Args:
        workload: a Deployment, StatefulSet or DaemonSet dict (``spec.template.spec``).

    Returns:
        Names from ``volumes[].configMap``, ``volumes[].projected.sources[].configMap``,
        and ``envFrom[].configMapRef`` and ``env[].valueFrom.configMapKeyRef`` of every
        container, init container and ephemeral container. ``optional`` references count
        too. Empty names are dropped.
    """
    return sorted({name for name in _names(_pod_spec(workload)) if name})


def is_managed(configmap: Mapping[str, Any]) -> bool:
    """Whether cbop manages ``configmap``.

    True when it carries ``app.kubernetes.io/managed-by: cbop`` (what cbop's ConfigMap
    informer selects on) and a controller owner reference to a ConfigBundle (group and
    kind; any version), both as :func:`cbop.reconciler.desired.render` writes them. A
    ConfigMap released with ``deletionPolicy: Orphan`` has neither.
    """
    labels = configmap.get("metadata", {}).get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY_VALUE:
        return False
    ref = controller_reference(configmap)
    return ref is not None and is_bundle_reference(ref)


def _configmap_hash(configmap: Mapping[str, Any]) -> str | None:
    binary = decode_binary(configmap.get("binaryData"))
    if binary is None:
        return None
    return content_hash(configmap.get("data") or {}, binary)


def managed_references(
    workload: Mapping[str, Any], configmaps: Mapping[str, Mapping[str, Any]]
) -> tuple[ManagedConfigMap, ...]:
    """Return the managed ConfigMaps among ``workload``'s references, sorted by name.

    Args:
        workload: the workload dict.
        configmaps: name -> ConfigMap, for the ConfigMaps of the workload's namespace
            that are at hand (a referenced name missing here is not managed, or does
            not exist: either way it is ignored). Objects are never mutated.
    """
    out = []
    for name in referenced_configmaps(workload):
        cm = configmaps.get(name)
        if cm is None or not is_managed(cm):
            continue
        digest = _configmap_hash(cm)
        ref = controller_reference(cm)
        if digest is None or ref is None:  # binaryData the API server would not store
            continue
        out.append(ManagedConfigMap(name, str(ref.get("name", "")), digest))
    return tuple(out)


def config_digest(configmaps: Iterable[ManagedConfigMap]) -> str:
    """Return ``sha256:<hex>`` of the sorted (name, content hash) pairs.

    Each pair is framed by the 8-byte big-endian lengths of its parts, so no two lists
    of pairs share a byte stream. The order of ``configmaps`` does not matter.
    """
    digest = hashlib.sha256()
    for name, value in sorted((cm.name, cm.content_hash) for cm in configmaps):
        for part in (name.encode(), value.encode()):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return "sha256:" + digest.hexdigest()


def current_digest(workload: Mapping[str, Any]) -> str:
    """Return the pod template's ``cbop.dev/config-hash`` annotation, ``""`` if absent."""
    meta = ((workload.get("spec") or {}).get("template") or {}).get("metadata") or {}
    return str((meta.get("annotations") or {}).get(ANNOTATION_CONFIG_HASH, ""))


def decide(workload: Mapping[str, Any], configmaps: Mapping[str, Mapping[str, Any]]) -> Decision:
    """Decide whether to write ``workload``'s ``cbop.dev/config-hash`` annotation.

    Args:
        workload: a Deployment, StatefulSet or DaemonSet dict (``kind`` set or not),
            never mutated.
        configmaps: name -> ConfigMap of the workload's namespace (see
            :func:`managed_references`).

    Returns:
        A :class:`Decision`; see the module docstring for the order of the checks.
    """
    meta = workload.get("metadata") or {}
    if (meta.get("labels") or {}).get(LABEL_ROLLOUT) != "true":
        return Decision(Action.NONE, message=f"no {LABEL_ROLLOUT}: true label")
    if meta.get("deletionTimestamp"):
        return Decision(Action.NONE, message="the workload is being deleted")
    current = current_digest(workload)
    managed = managed_references(workload, configmaps)
    if not managed:
        return Decision(
            Action.NONE, current=current, message="the pod template reads no managed ConfigMap"
        )
    digest = config_digest(managed)
    if digest == current:
        return Decision(Action.NONE, digest, current, managed)
    if (workload.get("spec") or {}).get("paused"):
        bundles = ", ".join(sorted({cm.bundle for cm in managed}))
        return Decision(
            Action.SKIP,
            digest,
            current,
            managed,
            message=(
                f"the Deployment is paused; cbop rolls it for ConfigBundle(s) {bundles} "
                "once it is resumed"
            ),
        )
    return Decision(Action.APPLY, digest, current, managed)


def apply_body(
    workload: Mapping[str, Any], api_version: str, kind: str, digest: str
) -> dict[str, Any]:
    """Return the server-side apply body that sets only the config-hash annotation.

    Args:
        workload: the workload (its ``metadata.name`` and ``namespace`` are used).
        api_version: e.g. ``"apps/v1"``.
        kind: ``Deployment``, ``StatefulSet`` or ``DaemonSet``.
        digest: the annotation's value.

    Returns:
        ``apiVersion``, ``kind``, ``metadata.name/namespace`` and
        ``spec.template.metadata.annotations`` with the one key: the field manager that
        sends it owns that key and nothing else, so other managers' fields are neither
        claimed nor removed.
    """
    meta = workload["metadata"]
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "spec": {"template": {"metadata": {"annotations": {ANNOTATION_CONFIG_HASH: digest}}}},
    }
