"""Builders of the objects unit tests feed to cbop and to the fake API server.

One module for every unit test's objects, so that no test module imports another:

* watch-level pieces: :func:`cm` (a ConfigMap at a resourceVersion), :func:`ev` (a
  watch event), :func:`bookmark`, :func:`page` (a list answer);
* ConfigBundles and the ConfigMaps cbop writes for them: :func:`bundle`,
  :func:`named_bundle`, :func:`owned_configmap`, :func:`synced_status`, :func:`written`,
  :func:`decide_for`;
* workloads and ConfigMaps of the rollout controller: :func:`configmap`,
  :func:`workload`, :func:`with_annotation`, :func:`with_baseline`, :func:`rolled`.

Every builder returns a new dict the caller may change.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from cbop.api import content_hash, parse_spec
from cbop.configbundle.decision import Decision, decide
from cbop.configbundle.desired import render

__all__ = [
    "UID",
    "bookmark",
    "bundle",
    "cm",
    "configmap",
    "decide_for",
    "ev",
    "named_bundle",
    "owned_configmap",
    "page",
    "render",
    "rolled",
    "synced_status",
    "with_annotation",
    "with_baseline",
    "workload",
    "written",
]


def cm(name: str, rv: str, ns: str = "ns", **data: str) -> dict[str, Any]:
    """Return a ConfigMap ``ns/name`` at resourceVersion ``rv`` with ``data``.

    It carries one ``managedFields`` entry, as objects from a server do.
    """
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "resourceVersion": rv,
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        },
        "data": dict(data),
    }


def ev(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Return a watch event ``{"type": kind, "object": obj}``."""
    return {"type": kind, "object": obj}


def bookmark(rv: str) -> dict[str, Any]:
    """Return a BOOKMARK event of ConfigMaps at ``rv``."""
    return ev("BOOKMARK", {"kind": "ConfigMap", "metadata": {"resourceVersion": rv}})


def page(*items: dict[str, Any], rv: str, cont: str | None = None) -> dict[str, Any]:
    """Return one ConfigMap list page at ``rv`` (``cont``: its continue token)."""
    meta: dict[str, Any] = {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    return {"kind": "ConfigMapList", "metadata": meta, "items": list(items)}


def named_bundle(name: str, ns: str) -> dict[str, Any]:
    """Return a ConfigBundle with only a name, namespace and uid (``uid-<name>``)."""
    return {
        "apiVersion": "cbop.dev/v1alpha1",
        "kind": "ConfigBundle",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "1"},
    }


def owned_configmap(name: str, ns: str, bundle: str) -> dict[str, Any]:
    """Return a ConfigMap whose controller owner is the bundle ``bundle`` (uid ``uid-<bundle>``)."""
    obj = cm(name, "1", ns)
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "cbop.dev/v1alpha1",
            "kind": "ConfigBundle",
            "name": bundle,
            "uid": f"uid-{bundle}",
            "controller": True,
        }
    ]
    return obj


UID = "11111111-2222-3333-4444-555555555555"


def bundle(
    spec: dict[str, Any] | None = None,
    *,
    name: str = "app",
    namespace: str = "demo",
    generation: int = 1,
    status: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    """Return a ConfigBundle ``namespace/name`` (uid :data:`UID`, resourceVersion 100)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": UID,
        "generation": generation,
        "resourceVersion": "100",
    }
    if labels:
        meta["labels"] = labels
    if finalizers:
        meta["finalizers"] = finalizers
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj: dict[str, Any] = {
        "apiVersion": "cbop.dev/v1alpha1",
        "kind": "ConfigBundle",
        "metadata": meta,
        "spec": spec if spec is not None else {"data": {"a": "1"}},
    }
    if status is not None:
        obj["status"] = status
    return obj


def synced_status(generation: int = 1) -> dict[str, Any]:
    """Return a bundle status: ``Ready=True``, reason ``Synced``, at ``generation``."""
    return {
        "observedGeneration": generation,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Synced",
                "message": "ok",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }


def written(b: dict[str, Any], current: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return the ConfigMap as it stands after cbop wrote it for bundle ``b``."""
    d = decide(b, parse_spec(b), current)
    assert d.body is not None
    cm = copy.deepcopy(d.body)
    cm["metadata"].setdefault("uid", "cm-uid")
    cm["metadata"]["resourceVersion"] = "7"
    return cm


def decide_for(b: dict[str, Any], current: dict[str, Any] | None) -> Decision:
    """Return cbop's decision for bundle ``b`` and ConfigMap ``current`` (a bad spec too)."""
    try:
        spec: Any = parse_spec(b)
    except Exception as err:  # noqa: BLE001 - SpecError passes through to decide
        spec = err
    return decide(b, spec, current)


def configmap(
    name: str,
    data: dict[str, str] | None = None,
    *,
    bundle: str | None = None,
    managed: bool = True,
    namespace: str = "demo",
) -> dict[str, Any]:
    """Return a ConfigMap as cbop writes it (managed) or as anyone else would."""
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
    """Return a Deployment-shaped workload reading ``volumes`` and ``env_from`` ConfigMaps."""
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


def with_annotation(obj: Mapping[str, Any], digest: str) -> dict[str, Any]:
    """``obj`` with the pod template annotation ``digest`` (as cbop 0.1.0 left it)."""
    out = copy.deepcopy(dict(obj))
    out["spec"]["template"]["metadata"].setdefault("annotations", {})["cbop.dev/config-hash"] = (
        digest
    )
    return out


def with_baseline(obj: Mapping[str, Any], digest: str) -> dict[str, Any]:
    """``obj`` with the baseline label of ``digest`` (``sha256:<hex>``)."""
    out = copy.deepcopy(dict(obj))
    out["metadata"].setdefault("labels", {})["cbop.dev/config-baseline"] = digest.removeprefix(
        "sha256:"
    )[:40]
    return out


def rolled(obj: Mapping[str, Any], digest: str) -> dict[str, Any]:
    """``obj`` as a rollout to ``digest`` leaves it: the annotation and the baseline."""
    return with_baseline(with_annotation(obj, digest), digest)
