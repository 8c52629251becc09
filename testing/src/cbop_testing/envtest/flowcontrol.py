"""API Priority and Fairness objects that throttle one ServiceAccount (issue 18).

The e2e fault test and the benchmark's ``apf`` scenario both send every request of an
operator's ServiceAccount to a priority level with one nominal concurrency share, no
lending or borrowing and ``limitResponse: Reject``, so kube-apiserver answers 429 with its
own ``Retry-After`` once the level's few seats (about 3 on the local control plane) are
taken. Bodies are ``flowcontrol.apiserver.k8s.io/v1`` objects as plain dicts.
"""

from __future__ import annotations

from typing import Any

from cbop.kube import Resource

__all__ = ["FLOW_SCHEMAS", "PRIORITY_LEVELS", "rejecting_flow_schema", "rejecting_priority_level"]

_GROUP = "flowcontrol.apiserver.k8s.io"
#: Cluster-scoped PriorityLevelConfigurations.
PRIORITY_LEVELS = Resource(
    _GROUP, "v1", "prioritylevelconfigurations", "PriorityLevelConfiguration", False
)
#: Cluster-scoped FlowSchemas.
FLOW_SCHEMAS = Resource(_GROUP, "v1", "flowschemas", "FlowSchema", False)


def rejecting_priority_level(name: str) -> dict[str, Any]:
    """Return a ``Limited`` PriorityLevelConfiguration: 1 share, no lending or borrowing, Reject.

    Args:
        name: metadata.name.

    Returns:
        The object body (dict) for a create.
    """
    return {
        "metadata": {"name": name},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 1,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    }


def rejecting_flow_schema(name: str, namespace: str, service_account: str) -> dict[str, Any]:
    """Return a FlowSchema (precedence 100) sending one ServiceAccount's requests to ``name``.

    Every verb, API group, resource (namespaced and cluster-scoped) and non-resource URL
    matches; flows are distinguished by user.

    Args:
        name: metadata.name of the FlowSchema and of the priority level it points to.
        namespace: the ServiceAccount's namespace.
        service_account: the ServiceAccount's name.

    Returns:
        The object body (dict) for a create.
    """
    return {
        "metadata": {"name": name},
        "spec": {
            "matchingPrecedence": 100,
            "priorityLevelConfiguration": {"name": name},
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "serviceAccount": {"name": service_account, "namespace": namespace},
                        }
                    ],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "namespaces": ["*"],
                            "clusterScope": True,
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }
