"""Helpers for the e2e tests of the pod-pinning admission policy (docs/revisions.md).

* :data:`POLICY_FILE`: the shipped MutatingAdmissionPolicy and its binding
  (``manifests/revisions/pin_revisions.yaml``).
* :func:`installed_policy`: a context manager that creates them on a control plane and
  deletes them afterwards (the policy is cluster-wide: one module at a time).
* :func:`create_pod`: creates a pod (as a ReplicaSet would, or with ``dryRun=All``) and
  returns it as the API server stored it, after admission.

Pods are API objects: admission needs no kubelet, and a pod no node ever runs stays
``Pending``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from cbop.kube import KubeClient, Resource

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


@contextlib.contextmanager
def installed_policy(kube: KubeClient) -> Iterator[None]:
    """Create the shipped policy and binding; delete them when the block ends.

    The API server takes a new policy into account within moments, not at once: a
    caller retries its first pod until it is pinned.
    """
    docs = list(yaml.safe_load_all(POLICY_FILE.read_text()))
    for doc in docs:
        kube.create(_resource(doc), None, doc)
    try:
        yield
    finally:
        for doc in docs:
            kube.delete(_resource(doc), None, doc["metadata"]["name"])


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
