"""Kubernetes resource coordinates: group, version, plural, kind and REST paths.

This module owns :class:`Resource`, the value that every ``cbop.kube`` call takes to
say *which* collection it talks to, and the handful of resources cbop uses. Paths are
built as the API server routes them (``/api/v1/...`` for the legacy core group,
``/apis/<group>/<version>/...`` otherwise), with path segments percent-encoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from cbop.api import cluster as api_cluster
from cbop.api import types as api_types

__all__ = [
    "CLUSTERCONFIGBUNDLES",
    "CONFIGBUNDLES",
    "CONFIGMAPS",
    "CUSTOM_RESOURCE_DEFINITIONS",
    "DAEMONSETS",
    "DEPLOYMENTS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "STATEFULSETS",
    "Resource",
]


def _segment(value: str) -> str:
    """Percent-encode one path segment (``/`` included), rejecting empty segments."""
    if not value:
        raise ValueError("path segment must not be empty")
    return quote(value, safe="")


@dataclass(frozen=True)
class Resource:
    """One REST collection of the Kubernetes API.

    Attributes:
        group: API group, ``""`` for the legacy core group (``v1`` ConfigMaps, Events).
        version: API version within the group, e.g. ``"v1"``.
        plural: lower-case plural resource name used in URLs, e.g. ``"configmaps"``.
        kind: the object kind, e.g. ``"ConfigMap"``.
        namespaced: whether objects live in a namespace (``False`` for Namespaces).
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` field value: ``"v1"`` for core, else ``"<group>/<version>"``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """Return the URL path of the collection, an object, or an object's subresource.

        Args:
            namespace: namespace of a namespaced resource; ``None`` addresses the
                collection across all namespaces (list/watch only). Must be ``None`` for
                cluster-scoped resources.
            name: object name; ``None`` addresses the collection.
            subresource: e.g. ``"status"``; requires ``name``.

        Returns:
            e.g. ``/api/v1/namespaces/ns/configmaps/name`` or
            ``/apis/cbop.dev/v1beta1/configbundles``.

        Raises:
            ValueError: a namespace given for a cluster-scoped resource, a subresource
                without a name, or an empty segment.
        """
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [prefix]
        if namespace is not None:
            if not self.namespaced:
                raise ValueError(f"{self.plural} is cluster-scoped; got namespace {namespace!r}")
            parts.append(f"namespaces/{_segment(namespace)}")
        parts.append(self.plural)
        if name is not None:
            parts.append(_segment(name))
        if subresource is not None:
            if name is None:
                raise ValueError("a subresource needs an object name")
            parts.append(_segment(subresource))
        return "/".join(parts)

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


#: Core v1 ConfigMaps.
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
#: Core v1 Secrets: only with ``--secrets``, and only those labelled for cbop
#: (docs/secrets.md).
SECRETS = Resource("", "v1", "secrets", "Secret")
#: Core v1 Events (the legacy events API that ``kubectl describe`` shows).
EVENTS = Resource("", "v1", "events", "Event")
#: coordination.k8s.io/v1 Leases, used for leader election.
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
#: apiextensions.k8s.io/v1 CustomResourceDefinitions (cluster-scoped).
CUSTOM_RESOURCE_DEFINITIONS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)
#: Core v1 Namespaces (cluster-scoped).
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
#: cbop.dev ConfigBundles (the storage version, v1beta1), cbop's own custom resource.
CONFIGBUNDLES = Resource(
    api_types.GROUP, api_types.VERSION, api_types.PLURAL, api_types.KIND, namespaced=True
)
#: cbop.dev ClusterConfigBundles (cluster-scoped; docs/cluster-bundles.md).
CLUSTERCONFIGBUNDLES = Resource(
    api_types.GROUP,
    api_types.VERSION,
    api_cluster.CLUSTER_PLURAL,
    api_cluster.CLUSTER_KIND,
    namespaced=False,
)
#: apps/v1 workloads whose pod template cbop annotates to roll them (docs/rollout.md).
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet")
#: apps/v1 workload history, and core v1 pods: cbop caches those of pinned templates, to
#: keep the revisions they name and check that pods read them (docs/revisions.md).
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
CONTROLLERREVISIONS = Resource("apps", "v1", "controllerrevisions", "ControllerRevision")
PODS = Resource("", "v1", "pods", "Pod")
#: admissionregistration.k8s.io/v1 MutatingAdmissionPolicies and their bindings
#: (cluster-scoped; Kubernetes 1.36 serves them by default): cbop reads whether its
#: policy that points pods at revisions is installed (docs/revisions.md).
MUTATINGADMISSIONPOLICIES = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingadmissionpolicies",
    "MutatingAdmissionPolicy",
    namespaced=False,
)
MUTATINGADMISSIONPOLICYBINDINGS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingadmissionpolicybindings",
    "MutatingAdmissionPolicyBinding",
    namespaced=False,
)
