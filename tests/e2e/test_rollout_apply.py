"""The rollout write on a real control plane: the server-side apply rolls, and only once.

kube-controller-manager runs its deployment, replicaset, statefulset and daemonset
controllers in the control plane shared with test_rollout.py (``workload_control_plane``,
this module in a namespace of its own), so a pod template change really produces a new ReplicaSet
(Deployment) or ControllerRevision (StatefulSet, DaemonSet). No cbop process: the test
sends :func:`cbop.rollout.apply_body` with cbop's own :class:`cbop.kube.KubeClient`, as
the rollout reconciler does, and checks what docs/rollout.md promises:

- the baseline apply (the label ``cbop.dev/config-baseline`` alone) changes neither the
  generation nor the revisions, a Deployment's included (its annotations would);
- the apply under field manager ``cbop-rollout`` rolls the workload (one new revision);
- applying the same body again is a no-op: no new resourceVersion, no new revision;
- a GitOps tool that applies the workload with server-side apply (under its own field
  manager, with force, as Argo CD and Flux do) without the annotation leaves it alone;
- a tool that owns the annotation itself makes cbop's apply (without force) a 409
  Conflict naming that manager, instead of a fight.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cbop.kube import DAEMONSETS, DEPLOYMENTS, STATEFULSETS, ApiError, KubeClient, Resource
from cbop.rollout import (
    ANNOTATION_CONFIG_HASH,
    FIELD_MANAGER,
    LABEL_CONFIG_BASELINE,
    LABEL_ROLLOUT,
    apply_body,
)
from cbop_testing.envtest import ControlPlane

from .harness import wait_for
from .workloads import revisions

NAMESPACE = "rollout"
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
#: The field manager of a GitOps tool's server-side apply (Argo CD's name).
GITOPS_MANAGER = "argocd-controller"
WAIT = 90.0


@pytest.fixture(scope="module")
def kube(workload_control_plane: ControlPlane) -> Iterator[KubeClient]:
    """An admin client of the session's control plane with the workload controllers
    (shared with test_rollout.py), the module's namespace created."""
    config = str(workload_control_plane.kubeconfig_path)
    with KubeClient.from_config(kubeconfig=config, qps=0) as client:
        client.create(NAMESPACES, None, {"metadata": {"name": NAMESPACE}})
        yield client


def manifest(kind: str, name: str) -> dict[str, Any]:
    """A workload as a user keeps it in Git: opted in, reading a ConfigMap by volume."""
    labels = {"app": name}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels, "annotations": {"team": "web"}},
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "registry.invalid/app:1",
                        "volumeMounts": [{"name": "conf", "mountPath": "/etc/app"}],
                    }
                ],
                "volumes": [{"name": "conf", "configMap": {"name": f"{name}-conf"}}],
            },
        },
    }
    if kind != "DaemonSet":
        spec["replicas"] = 1
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {LABEL_ROLLOUT: "true"}},
        "spec": spec,
    }


def settled(kube: KubeClient, resource: Resource, name: str) -> None:
    """Wait until the workload's controller has seen its latest generation."""

    def seen() -> bool:
        obj = kube.get(resource, NAMESPACE, name)
        status = obj.get("status") or {}
        return bool(status.get("observedGeneration") == obj["metadata"]["generation"])

    wait_for(seen, WAIT, message=f"{resource.kind} {name} observed by its controller")


def unchanged_by(
    kube: KubeClient, resource: Resource, name: str, body: dict[str, Any], **apply: Any
) -> dict[str, Any]:
    """Apply ``body`` and return the result, which must carry the resourceVersion read
    just before. The workload's controller may write its status in between (a new
    resourceVersion that is not the apply's), so a few rounds are allowed; a write by
    the apply itself would change it every round."""
    rounds: list[tuple[str, str]] = []
    for _ in range(10):
        before = kube.get(resource, NAMESPACE, name)["metadata"]["resourceVersion"]
        after = kube.patch(resource, NAMESPACE, name, body, patch_type="apply", **apply)
        if after["metadata"]["resourceVersion"] == before:
            return after
        rounds.append((before, after["metadata"]["resourceVersion"]))
        time.sleep(0.5)
    raise AssertionError(f"every apply wrote a new resourceVersion: {rounds}")


def template_annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["spec"]["template"]["metadata"].get("annotations") or {})


@pytest.mark.parametrize(
    ("resource", "name"),
    [(DEPLOYMENTS, "web"), (STATEFULSETS, "db"), (DAEMONSETS, "agent")],
    ids=["deployment", "statefulset", "daemonset"],
)
def test_the_apply_rolls_once_and_survives_a_gitops_apply(
    kube: KubeClient, resource: Resource, name: str
) -> None:
    kind = resource.kind
    gitops = manifest(kind, name)
    created = kube.patch(
        resource,
        NAMESPACE,
        name,
        gitops,
        patch_type="apply",
        field_manager=GITOPS_MANAGER,
        force=True,
    )
    uid = created["metadata"]["uid"]
    first = wait_for(
        lambda: revisions(kube, NAMESPACE, kind, uid), WAIT, message=f"{kind}'s first revision"
    )
    assert len(first) == 1

    recorded = kube.patch(
        resource,
        NAMESPACE,
        name,
        apply_body(created, resource.api_version, kind, "sha256:" + "0" * 64, roll=False),
        patch_type="apply",
        field_manager=FIELD_MANAGER,
        force=False,
    )
    assert recorded["metadata"]["labels"][LABEL_CONFIG_BASELINE] == "0" * 40
    assert recorded["metadata"]["generation"] == created["metadata"]["generation"]
    assert template_annotations(recorded) == {"team": "web"}
    settled(kube, resource, name)
    assert revisions(kube, NAMESPACE, kind, uid) == first

    digest = "sha256:" + "1" * 64
    body = apply_body(created, resource.api_version, kind, digest)
    rolled = kube.patch(
        resource,
        NAMESPACE,
        name,
        body,
        patch_type="apply",
        field_manager=FIELD_MANAGER,
        force=False,
    )
    assert template_annotations(rolled) == {"team": "web", ANNOTATION_CONFIG_HASH: digest}
    assert rolled["metadata"]["generation"] == created["metadata"]["generation"] + 1
    second = wait_for(
        lambda: (got := revisions(kube, NAMESPACE, kind, uid)) != first and got,
        WAIT,
        message=f"{kind}'s revision for the new pod template",
    )
    assert len(second) == 2

    # The same body again, and the GitOps tool applying its manifest again (force, as
    # Argo CD and Flux do; it never owned the annotation): nothing changes, so nothing
    # is written: no new resourceVersion, no new generation.
    settled(kube, resource, name)
    again = unchanged_by(kube, resource, name, body, field_manager=FIELD_MANAGER, force=False)
    assert again["metadata"]["generation"] == rolled["metadata"]["generation"]
    synced = unchanged_by(kube, resource, name, gitops, field_manager=GITOPS_MANAGER, force=True)
    assert (
        template_annotations(synced)[ANNOTATION_CONFIG_HASH]
        == (template_annotations(rolled)[ANNOTATION_CONFIG_HASH])
    )
    owners = {
        entry["manager"]
        for entry in synced["metadata"]["managedFields"]
        if ANNOTATION_CONFIG_HASH in str(entry.get("fieldsV1"))
    }
    assert owners == {FIELD_MANAGER}
    assert revisions(kube, NAMESPACE, kind, uid) == second


def test_an_annotation_owned_by_another_manager_is_a_conflict_not_a_fight(
    kube: KubeClient,
) -> None:
    gitops = manifest("Deployment", "pinned")
    # A manifest that sets the annotation itself (a misconfiguration docs/rollout.md
    # warns about): the GitOps manager owns the field.
    annotations = gitops["spec"]["template"]["metadata"]["annotations"]
    annotations[ANNOTATION_CONFIG_HASH] = "sha256:" + "0" * 64
    created = kube.patch(
        DEPLOYMENTS,
        NAMESPACE,
        "pinned",
        copy.deepcopy(gitops),
        patch_type="apply",
        field_manager=GITOPS_MANAGER,
        force=True,
    )
    body = apply_body(created, "apps/v1", "Deployment", "sha256:" + "2" * 64)
    with pytest.raises(ApiError) as refused:
        kube.patch(
            DEPLOYMENTS,
            NAMESPACE,
            "pinned",
            body,
            patch_type="apply",
            field_manager=FIELD_MANAGER,
            force=False,
        )
    assert refused.value.is_conflict
    assert GITOPS_MANAGER in refused.value.message
    # Nothing was written: the manifest's value stands, the spec is as created, and
    # cbop owns no field (the Deployment controller may have written its status).
    after = kube.get(DEPLOYMENTS, NAMESPACE, "pinned")
    assert template_annotations(after)[ANNOTATION_CONFIG_HASH] == "sha256:" + "0" * 64
    assert after["metadata"]["generation"] == created["metadata"]["generation"]
    assert FIELD_MANAGER not in {m["manager"] for m in after["metadata"]["managedFields"]}
