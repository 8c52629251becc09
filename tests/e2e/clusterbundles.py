"""Helpers of the ClusterConfigBundle e2e modules: the kind's CRD, namespaces, the
ValidatingAdmissionPolicy resources, and reads and waits on ClusterConfigBundles.

Shared by tests/e2e/test_cluster_bundles.py, test_cluster_bundles_sharded.py and
test_sources.py, so that no test module imports another.
"""

from __future__ import annotations

from typing import Any

import yaml

from cbop.kube import (
    CLUSTERCONFIGBUNDLES,
    CONFIGMAPS,
    CUSTOM_RESOURCE_DEFINITIONS,
    NAMESPACES,
    ApiError,
    KubeClient,
    Resource,
)

from .harness import REPO, wait_for

#: Generous bound for anything garbage collection or a controller chain does.
WAIT = 30.0

POLICIES = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicies",
    "ValidatingAdmissionPolicy",
    namespaced=False,
)
BINDINGS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
    namespaced=False,
)


def install_cluster_crd(kube: KubeClient) -> None:
    """Create the ClusterConfigBundle CRD from manifests/crd and wait until it is served."""
    path = REPO / "manifests" / "crd" / "cbop.dev_clusterconfigbundles.yaml"
    body = yaml.safe_load(path.read_text())
    kube.create(CUSTOM_RESOURCE_DEFINITIONS, None, body)

    def served() -> bool:
        try:
            kube.list(CLUSTERCONFIGBUNDLES, None, limit=1)
        except ApiError:
            return False
        return True

    wait_for(served, WAIT, message="ClusterConfigBundle CRD served")


def make_namespace(kube: KubeClient, name: str, labels: dict[str, str] | None = None) -> str:
    kube.create(NAMESPACES, None, {"metadata": {"name": name, "labels": labels or {}}})
    return name


def relabel(kube: KubeClient, name: str, labels: dict[str, str | None]) -> None:
    kube.patch(NAMESPACES, None, name, {"metadata": {"labels": labels}})


def make_ccb(
    kube: KubeClient,
    name: str,
    selector: dict[str, Any],
    template: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body = {
        "apiVersion": CLUSTERCONFIGBUNDLES.api_version,
        "kind": CLUSTERCONFIGBUNDLES.kind,
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": selector,
            "template": template if template is not None else {"data": {"ca.crt": "CA-1"}},
        },
    }
    return kube.create(CLUSTERCONFIGBUNDLES, None, body)


def get(kube: KubeClient, res: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
    try:
        return kube.get(res, namespace, name)
    except ApiError as err:
        if err.is_not_found:
            return None
        raise


def configmap_data(kube: KubeClient, namespace: str, name: str) -> dict[str, str] | None:
    found = get(kube, CONFIGMAPS, namespace, name)
    return None if found is None else dict(found.get("data") or {})


def status(kube: KubeClient, name: str) -> dict[str, Any]:
    found = get(kube, CLUSTERCONFIGBUNDLES, None, name) or {}
    return dict(found.get("status") or {})


def wait_status(kube: KubeClient, name: str, **counts: int) -> dict[str, Any]:
    """Wait until the status, for the current generation, has these namespace counts."""

    def matches() -> dict[str, Any] | None:
        found = get(kube, CLUSTERCONFIGBUNDLES, None, name) or {}
        got = found.get("status") or {}
        if got.get("observedGeneration") != found.get("metadata", {}).get("generation"):
            return None
        have = got.get("namespaces") or {}
        return got if all(have.get(k) == v for k, v in counts.items()) else None

    result: dict[str, Any] = wait_for(matches, WAIT, message=f"status of {name}: {counts}")
    return result
