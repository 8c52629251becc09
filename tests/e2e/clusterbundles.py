"""Helpers of the ClusterConfigBundle e2e modules: the kind's CRD, namespaces, the
ValidatingAdmissionPolicy resources, and reads and waits on ClusterConfigBundles.

Shared by tests/e2e/test_cluster_bundles.py, test_cluster_bundles_sharded.py and
test_sources.py, so that no test module imports another.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
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
from cbop_testing.envtest import ControlPlane

from .control_plane import START_TIMEOUT, _binaries
from .fixtures import install_crd
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


@contextlib.contextmanager
def bundle_plane(
    config: pytest.Config,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    *,
    audit_policy: str | None = None,
) -> Iterator[tuple[ControlPlane, KubeClient]]:
    """A control plane of its own serving both of cbop's CRDs, and a client of it.

    ``name`` names its working directory; ``audit_policy``, when given, is the API
    server's (its log at ``control.audit_log_path``). Stops the client and the control
    plane on the way out, whatever the module's fixture did with them.
    """
    control = ControlPlane(
        binaries=_binaries(config),
        workdir=tmp_path_factory.mktemp(f"{name}-control-plane"),
        audit_policy=audit_policy,
    )
    control.start(timeout=START_TIMEOUT)
    kube = KubeClient.from_config(kubeconfig=str(control.kubeconfig_path), qps=0)
    try:
        install_crd(control)
        install_cluster_crd(kube)
        yield control, kube
    finally:
        kube.close()
        control.stop()


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
