"""Helpers for the e2e tests of revisions and the pods pinned to them (docs/revisions.md).

* :data:`POLICY_FILE`, :func:`install_pin_policy`: the shipped
  MutatingAdmissionPolicy and its binding (``manifests/revisions/``), left installed.
* :func:`wait_policy_effective`: until the policy pins a probe pod (it takes effect
  within moments of its creation, not at once).
* :func:`configmap_volumes`: a pod's ``volumes[].configMap`` names, by volume.
* :func:`revision_of`: the revision name of a content.
* :func:`pods_by_replicaset`: a workload's live pods, by the ReplicaSet that owns them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from cbop.api import content_hash
from cbop.api.revisions import PARAMS_NAME, revision_name
from cbop.kube import CONFIGMAPS, NAMESPACES, ApiError, KubeClient, Resource
from cbop.rollout import ANNOTATION_CONFIG_HASH

from .harness import wait_for
from .pinpolicy import BINDINGS, LEGACY_POLICY_FILE, PODS, POLICIES, POLICY_FILE


def _policy_docs() -> list[dict[str, Any]]:
    return [
        *yaml.safe_load_all(LEGACY_POLICY_FILE.read_text()),
        *yaml.safe_load_all(POLICY_FILE.read_text()),
    ]


def _resource(doc: Mapping[str, Any]) -> Resource:
    return POLICIES if doc["kind"] == "MutatingAdmissionPolicy" else BINDINGS


def install_pin_policy(kube: KubeClient) -> None:
    """Create the shipped policy and binding (``manifests/revisions/pin_revisions.yaml``)
    unless they exist; never removed.

    They stay for the control plane's life, because kube-apiserver 1.36 stops reading a
    built-in ``paramKind`` (ConfigMap) for good once no binding names it for a second
    (kubernetes/kubernetes#130887): a policy deleted and made again pins no pod until
    kube-apiserver restarts. Left in place, the policy acts only on pods of a namespace
    with cbop's pins, so the other tests of the control plane see no change.

    Raises:
        ApiError: the API server refused one for another reason than its existence.
    """
    for doc in _policy_docs():
        try:
            kube.create(_resource(doc), None, doc)
        except ApiError as err:
            if not err.is_already_exists:
                raise


def configmap_volumes(pod: Mapping[str, Any]) -> dict[str, str]:
    """Return volume name -> ``configMap.name`` for the pod's ``configMap`` volumes."""
    return {
        v["name"]: v["configMap"]["name"]
        for v in pod["spec"].get("volumes") or ()
        if "configMap" in v
    }


def wait_policy_effective(kube: KubeClient, namespace: str, timeout: float) -> None:
    """Wait until the installed policy pins a new pod; leave ``namespace`` deleting.

    In ``namespace`` (created here; it must not exist, and no cbop may watch it) a pins
    ConfigMap of our own maps the digest ``sha256:0...0`` to ``probe=probe-0123456789``; a
    pod with that digest and a ``probe`` volume is created with ``dryRun`` (admitted,
    mutated, never stored) until its volume names ``probe-0123456789``.

    Raises:
        AssertionError: no pod was pinned within ``timeout`` seconds.
    """
    kube.create(NAMESPACES, None, {"metadata": {"name": namespace}})
    kube.create(
        CONFIGMAPS,
        namespace,
        {"metadata": {"name": PARAMS_NAME}, "data": {"0" * 40: "probe=probe-0123456789"}},
    )
    body = {
        "metadata": {
            "generateName": "probe-",
            "annotations": {ANNOTATION_CONFIG_HASH: "sha256:" + "0" * 64},
        },
        "spec": {
            "containers": [{"name": "c", "image": "registry.invalid/probe:1"}],
            "volumes": [{"name": "probe", "configMap": {"name": "probe"}}],
        },
    }

    def pinned() -> bool:
        pod = kube.create(PODS, namespace, body, dry_run=True)
        return configmap_volumes(pod)["probe"] == "probe-0123456789"

    try:
        wait_for(pinned, timeout, interval=0.5, message="the pin policy to take effect")
    finally:
        kube.delete(NAMESPACES, None, namespace)


def revision_of(plain: str, data: Mapping[str, str]) -> str:
    """Return the name of the revision of ConfigMap ``plain`` holding ``data``."""
    return revision_name(plain, content_hash(data, {}))


def pods_by_replicaset(
    kube: KubeClient, namespace: str, selector: str
) -> dict[str, list[dict[str, Any]]]:
    """Return ReplicaSet name -> its pods matching ``selector`` that are not being
    deleted (a pod without a ReplicaSet as controller is left out)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for pod in kube.list(PODS, namespace, label_selector=selector)["items"]:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        for ref in pod["metadata"].get("ownerReferences") or ():
            if ref.get("controller") and ref["kind"] == "ReplicaSet":
                out.setdefault(ref["name"], []).append(dict(pod))
    return out
