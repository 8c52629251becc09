"""Helpers for the e2e tests of revisions and the pods pinned to them (docs/revisions.md).

* :func:`install_pin_policy`: the shipped MutatingAdmissionPolicy and its binding
  (``manifests/revisions/``), installed and effective.
* :func:`wait_policy_effective`: until the policy pins a probe pod (it takes effect
  within moments of its creation, not at once).
* :func:`configmap_volumes`: a pod's ``volumes[].configMap`` names, by volume.
* :func:`revision_of`: the revision name of a content.
* :func:`pods_by_replicaset`: a workload's live pods, by the ReplicaSet that owns them.
* :func:`pinned_condition`: a bundle's ``Pinned`` condition.
* :func:`cbop_writes`: the writes a cbop process has sent, from its own metrics.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from cbop.api import content_hash
from cbop.api.revisions import revision_name
from cbop.kube import CONFIGBUNDLES, NAMESPACES, KubeClient
from cbop.revisions.model import ANNOTATION_REVISIONS, LABEL_PINNED

from .harness import Operator, wait_for
from .pinpolicy import PODS, install_policy

#: The HTTP methods of writes, in cbop's ``rest_client_requests_total``.
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def install_pin_policy(kube: KubeClient, namespace: str, timeout: float) -> None:
    """Install the shipped policy and binding unless there, and wait until they pin.

    ``namespace`` (made here, deleted after; it must not exist) holds the probe pods.
    """
    install_policy(kube)
    wait_policy_effective(kube, namespace, timeout)


def configmap_volumes(pod: Mapping[str, Any]) -> dict[str, str]:
    """Return volume name -> ``configMap.name`` for the pod's ``configMap`` volumes."""
    return {
        v["name"]: v["configMap"]["name"]
        for v in pod["spec"].get("volumes") or ()
        if "configMap" in v
    }


def wait_policy_effective(kube: KubeClient, namespace: str, timeout: float) -> None:
    """Wait until the installed policy pins a new pod; leave ``namespace`` deleting.

    In ``namespace`` (created here; it must not exist) a pod labelled and annotated as a
    pinned template's (``probe=probe-0123456789``) with a ``probe`` volume is created with
    ``dryRun`` (admitted, mutated, never stored) until its volume names the revision.

    Raises:
        AssertionError: no pod was pinned within ``timeout`` seconds.
    """
    kube.create(NAMESPACES, None, {"metadata": {"name": namespace}})
    body = {
        "metadata": {
            "generateName": "probe-",
            "labels": {LABEL_PINNED: "true"},
            "annotations": {ANNOTATION_REVISIONS: "probe=probe-0123456789"},
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


def pinned_condition(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    """Return bundle ``name``'s ``Pinned`` condition, or None."""
    for cond in (kube.get(CONFIGBUNDLES, namespace, name).get("status") or {}).get(
        "conditions"
    ) or ():
        if cond["type"] == "Pinned":
            return dict(cond)
    return None


def cbop_writes(op: Operator) -> float:
    """The write requests ``op`` has sent (``rest_client_requests_total``, POST, PUT,
    PATCH, DELETE), whatever their answer."""
    return sum(
        value
        for name, value in op.metrics().items()
        if name.startswith("rest_client_requests_total{")
        and any(f'method="{m}"' in name for m in WRITE_METHODS)
    )


def settled_writes(op: Operator, quiet: float, timeout: float) -> float:
    """Wait until ``op`` has sent no write for ``quiet`` seconds; return its write count.

    A fixed sleep after a change counts late writes of that change (a grace period
    running out, a verification that waited for pods) in the next change's window when
    the machine is loaded; this waits them out. Raises AssertionError when the writes
    do not stop within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    last, since = cbop_writes(op), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cbop_writes(op)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return last
    raise AssertionError(f"cbop kept writing for {timeout} s (last count {last})")


def write_requests(op: Operator) -> dict[str, float]:
    """``op``'s write requests by their ``rest_client_requests_total`` labels."""
    return {
        name: value
        for name, value in op.metrics().items()
        if name.startswith("rest_client_requests_total{")
        and any(f'method="{m}"' in name for m in WRITE_METHODS)
    }
