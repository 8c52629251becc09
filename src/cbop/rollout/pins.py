"""The pins: which revision ConfigMaps a pod template digest reads (docs/revisions.md).

One ConfigMap per namespace, :data:`cbop.api.revisions.PARAMS_NAME`, holds one entry per
template digest (:func:`cbop.api.revisions.pins_key`) whose value names, for each
managed ConfigMap the template reads whose bundle keeps revisions, the revision of the
content the digest covers (:func:`cbop.api.revisions.pins_value`). The rollout writes
an entry before it writes the template annotation, so the history
(:mod:`cbop.rollout.history`) and the admission policy find it for every ReplicaSet or
ControllerRevision of that template. This module is the only writer of the pins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cbop.api import LABEL_MANAGED_BY, MANAGED_BY_VALUE
from cbop.api.revisions import (
    LABEL_REVISION_OF,
    PARAMS_NAME,
    pins_key,
    pins_value,
    revision_name,
)
from cbop.kube import CONFIGMAPS, ApiError
from cbop.rollout.decision import ManagedConfigMap
from cbop.runtime.seams import Client, Lister

__all__ = ["pins_for", "write_pins"]


def pins_for(
    configmaps: Lister, namespace: str, managed: Iterable[ManagedConfigMap]
) -> dict[str, str]:
    """Return plain name -> revision name for the ``managed`` ConfigMaps that have one.

    Args:
        configmaps: the managed-ConfigMap cache (revisions carry cbop's label, so it
            holds them).
        namespace: the workload's namespace.
        managed: the managed ConfigMaps a template digest covers.

    Returns:
        The pairs whose revision (:func:`cbop.api.revisions.revision_name` of the name
        and content hash) is in the cache with the ``cbop.dev/revision-of`` label;
        empty when no bundle the template reads keeps revisions.
    """
    out = {}
    for cm in managed:
        try:
            name = revision_name(cm.name, cm.content_hash)
        except ValueError:
            continue
        revision = configmaps.get(namespace, name)
        labels = ((revision or {}).get("metadata") or {}).get("labels") or {}
        if LABEL_REVISION_OF in labels:
            out[cm.name] = name
    return out


def write_pins(
    client: Client, configmaps: Lister, namespace: str, digest: str, pins: Mapping[str, str]
) -> bool:
    """Make the pins ConfigMap of ``namespace`` hold ``pins`` under ``digest``'s key.

    Writes nothing when the cached pins ConfigMap has the entry already; else one
    merge patch of the entry, or, when the ConfigMap does not exist, one create
    (labelled ``app.kubernetes.io/managed-by: cbop``, so the managed-ConfigMap cache
    holds it). Other entries are never touched.

    Args:
        client: the API client.
        configmaps: the managed-ConfigMap cache.
        namespace: the namespace of the workload.
        digest: the template digest (``sha256:<hex>``).
        pins: plain name -> revision name (empty: nothing is written).

    Returns:
        Whether a request was sent.

    Raises:
        ApiError, ConnectionFailed: the write failed (a create that lost a race is
            answered with the patch instead).
    """
    key = pins_key(digest)
    if not pins or not key:
        return False
    value = pins_value(pins)
    cached = configmaps.get(namespace, PARAMS_NAME)
    if cached is not None and (cached.get("data") or {}).get(key) == value:
        return False
    body: dict[str, Any] = {"data": {key: value}}
    if cached is None:
        try:
            client.create(
                CONFIGMAPS,
                namespace,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": PARAMS_NAME,
                        "namespace": namespace,
                        "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE},
                    },
                    **body,
                },
            )
            return True
        except ApiError as err:
            if not err.is_already_exists:
                raise
    client.patch(CONFIGMAPS, namespace, PARAMS_NAME, body, patch_type="merge")
    return True
