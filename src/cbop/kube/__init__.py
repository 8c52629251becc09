"""cbop's Kubernetes client adapter: resources, errors and a raw-JSON client.

Everything above this package talks to the API server through :class:`KubeClient`
(dicts in, dicts out, no generated models), names collections with :class:`Resource`,
and handles failures through :class:`ApiError` / :class:`ConnectionFailed`. This package
may import only ``cbop.api``, ``cbop.clock`` and ``cbop.tokenbucket``.
"""

from cbop.kube.client import DEFAULT_USER_AGENT, KubeClient, RequestHook, WatchStream
from cbop.kube.errors import ApiError, ConfigError, ConnectionFailed, LeaseNotHeld
from cbop.kube.interface import KubeInterface, WatchInterface
from cbop.kube.metrics import RestClientMetrics
from cbop.kube.resources import (
    CLUSTERCONFIGBUNDLES,
    CONFIGBUNDLES,
    CONFIGMAPS,
    CONTROLLERREVISIONS,
    CUSTOM_RESOURCE_DEFINITIONS,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    LEASES,
    MUTATINGADMISSIONPOLICIES,
    MUTATINGADMISSIONPOLICYBINDINGS,
    NAMESPACES,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    Resource,
)

__all__ = [
    "CLUSTERCONFIGBUNDLES",
    "CONFIGBUNDLES",
    "CONFIGMAPS",
    "CONTROLLERREVISIONS",
    "CUSTOM_RESOURCE_DEFINITIONS",
    "DAEMONSETS",
    "DEFAULT_USER_AGENT",
    "DEPLOYMENTS",
    "EVENTS",
    "LEASES",
    "MUTATINGADMISSIONPOLICIES",
    "MUTATINGADMISSIONPOLICYBINDINGS",
    "NAMESPACES",
    "PODS",
    "REPLICASETS",
    "STATEFULSETS",
    "ApiError",
    "ConfigError",
    "ConnectionFailed",
    "KubeClient",
    "KubeInterface",
    "LeaseNotHeld",
    "RequestHook",
    "Resource",
    "RestClientMetrics",
    "WatchInterface",
    "WatchStream",
]
