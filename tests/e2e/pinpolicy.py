"""Helpers for the e2e tests of the pod-pinning admission policy (docs/revisions.md).

* :data:`POLICY_FILE`: the shipped MutatingAdmissionPolicy and its binding
  (``manifests/revisions/pin_pods.yaml``); :func:`policy_docs`, its documents.
* :func:`install_policy`: creates them on a control plane unless they exist.
* :func:`create_pod`: creates a pod (as a ReplicaSet would, or with ``dryRun=All``) and
  returns it as the API server stored it, after admission.

Pods are API objects: admission needs no kubelet, and a pod no node ever runs stays
``Pending``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from cbop.kube import ApiError, KubeClient, Resource

POLICY_FILE = Path(__file__).parents[2] / "manifests/revisions/pin_pods.yaml"
#: 0.2.0's policy with ConfigMap params (the upgrade tests install it from that release).
LEGACY_POLICY_FILE = Path(__file__).parents[2] / "manifests/revisions/pin_revisions.yaml"
PODS = Resource("", "v1", "pods", "Pod")
POLICIES = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingadmissionpolicies",
    "MutatingAdmissionPolicy",
    namespaced=False,
)
BINDINGS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingadmissionpolicybindings",
    "MutatingAdmissionPolicyBinding",
    namespaced=False,
)


def _resource(doc: Mapping[str, Any]) -> Resource:
    return POLICIES if doc["kind"] == "MutatingAdmissionPolicy" else BINDINGS


def policy_docs() -> list[dict[str, Any]]:
    """Return the documents of :data:`POLICY_FILE`: the policy, then its binding."""
    return list(yaml.safe_load_all(POLICY_FILE.read_text()))


def install_policy(kube: KubeClient) -> None:
    """Create the shipped policy and binding unless they exist.

    The API server takes a new policy into account within moments, not at once: a
    caller retries its first pod until it is pinned.
    """
    for doc in policy_docs():
        try:
            kube.create(_resource(doc), None, doc)
        except ApiError as err:
            if not err.is_already_exists:
                raise


def create_pod(
    kube: KubeClient,
    namespace: str,
    metadata: Mapping[str, Any],
    spec: Mapping[str, Any],
    *,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Create a pod of ``metadata`` and ``spec`` (``generateName: pinned-``); return it.

    With ``dry_run`` the pod is admitted (mutated and defaulted) but not stored.
    """
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**metadata, "generateName": "pinned-"},
        "spec": spec,
    }
    return dict(kube.create(PODS, namespace, body, dry_run=dry_run))
