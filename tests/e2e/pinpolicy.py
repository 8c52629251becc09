"""Helpers for the e2e tests of the pod-pinning admission policy (docs/revisions.md).

* :data:`POLICY_FILE`: the shipped MutatingAdmissionPolicy and its binding
  (``manifests/revisions/pin_revisions.yaml``).
* :func:`install_policy`: creates them on a control plane, once (they stay: see there).
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

POLICY_FILE = Path(__file__).parents[2] / "manifests/revisions/pin_revisions.yaml"
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


def install_policy(kube: KubeClient) -> None:
    """Create the shipped policy and binding unless they exist; never remove them.

    They stay until the control plane stops: on Kubernetes 1.36.3, once no binding
    names the ConfigMap param kind, kube-apiserver stops its informer of ConfigMap
    params for good (kubernetes/kubernetes#130887), and a binding created afterwards
    never sees params created since. The API server takes a new policy into account
    within moments, not at once: a caller retries its first pod until it is pinned.
    """
    for doc in yaml.safe_load_all(POLICY_FILE.read_text()):
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
