"""Helpers for the e2e tests of rolled workloads (Deployments, StatefulSets, DaemonSets).

* :data:`WORKLOAD_CONTROLLERS`: kube-controller-manager's ``--controllers`` with the
  controllers that turn a pod template change into a new revision (and the one that
  keeps a ResourceQuota's usage, which the revisions' quota test needs).
* :func:`revisions`: the ReplicaSets (Deployment) or ControllerRevisions (StatefulSet,
  DaemonSet) a workload owns, by name.
"""

from __future__ import annotations

from cbop.kube import KubeClient, Resource
from cbop_testing.envtest.components import DEFAULT_CONTROLLERS

REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
CONTROLLER_REVISIONS = Resource("apps", "v1", "controllerrevisions", "ControllerRevision")
#: What each kind's controller makes of a new pod template.
REVISIONS = {
    "Deployment": REPLICASETS,
    "StatefulSet": CONTROLLER_REVISIONS,
    "DaemonSet": CONTROLLER_REVISIONS,
}
WORKLOAD_CONTROLLERS = (
    *DEFAULT_CONTROLLERS,
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "daemonset-controller",
    "resourcequota-controller",
)


def revisions(kube: KubeClient, namespace: str, kind: str, owner_uid: str) -> list[str]:
    """Return the sorted names of the revisions of the ``kind`` workload ``owner_uid``."""
    items = kube.list(REVISIONS[kind], namespace)["items"]
    return sorted(
        item["metadata"]["name"]
        for item in items
        if any(r.get("uid") == owner_uid for r in item["metadata"].get("ownerReferences") or ())
    )
