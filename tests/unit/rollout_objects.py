"""Workloads and ConfigMaps for the rollout unit tests."""

from __future__ import annotations

import copy
from typing import Any

from cbop.api import content_hash


def configmap(
    name: str,
    data: dict[str, str] | None = None,
    *,
    bundle: str | None = None,
    managed: bool = True,
    namespace: str = "demo",
) -> dict[str, Any]:
    """A ConfigMap as cbop writes it (managed) or as anyone else would."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": "1"}
    if managed:
        meta["labels"] = {"app.kubernetes.io/managed-by": "cbop", "cbop.dev/bundle": bundle or name}
        meta["ownerReferences"] = [
            {
                "apiVersion": "cbop.dev/v1alpha1",
                "kind": "ConfigBundle",
                "name": bundle or name,
                "uid": f"uid-{bundle or name}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    body = {"metadata": meta, "data": dict(data if data is not None else {"k": "v"})}
    meta.setdefault("annotations", {})["cbop.dev/content-hash"] = content_hash(body["data"], {})
    return body


def workload(
    name: str = "web",
    *,
    volumes: list[str] = (),  # type: ignore[assignment]
    env_from: list[str] = (),  # type: ignore[assignment]
    annotation: str | None = None,
    baseline: str | None = None,
    opted_in: bool = True,
    paused: bool = False,
    namespace: str = "demo",
    generation: int = 1,
) -> dict[str, Any]:
    """A Deployment-shaped workload reading ``volumes`` and ``env_from`` ConfigMaps."""
    template_meta: dict[str, Any] = {"labels": {"app": name}}
    if annotation is not None:
        template_meta["annotations"] = {"cbop.dev/config-hash": annotation}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": template_meta,
            "spec": {
                "containers": [
                    {"name": "app", "envFrom": [{"configMapRef": {"name": n}} for n in env_from]}
                ],
                "volumes": [{"name": v, "configMap": {"name": v}} for v in volumes],
            },
        },
    }
    if paused:
        spec["paused"] = True
    labels = {"cbop.dev/rollout": "true"} if opted_in else {}
    if baseline is not None:
        labels["cbop.dev/config-baseline"] = baseline
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "generation": generation,
            "resourceVersion": "10",
            "labels": labels,
        },
        "spec": spec,
    }


def with_annotation(obj: dict[str, Any], digest: str) -> dict[str, Any]:
    """``obj`` with the pod template annotation ``digest`` (as cbop 0.1.0 left it)."""
    out = copy.deepcopy(obj)
    out["spec"]["template"]["metadata"].setdefault("annotations", {})["cbop.dev/config-hash"] = (
        digest
    )
    return out


def with_baseline(obj: dict[str, Any], digest: str) -> dict[str, Any]:
    """``obj`` with the baseline label of ``digest`` (``sha256:<hex>``)."""
    out = copy.deepcopy(obj)
    out["metadata"].setdefault("labels", {})["cbop.dev/config-baseline"] = digest.removeprefix(
        "sha256:"
    )[:40]
    return out


def rolled(obj: dict[str, Any], digest: str) -> dict[str, Any]:
    """``obj`` as a rollout to ``digest`` leaves it: the annotation and the baseline."""
    return with_baseline(with_annotation(obj, digest), digest)
