"""Revisions and the workloads' history, end to end (docs/revisions.md).

The session's control plane with kube-controller-manager's deployment, replicaset,
resource-quota and garbage-collector controllers (``workload_control_plane``, in a
namespace of its own), the shipped policy (``manifests/revisions/``), and one cbop
process with ``--rollout`` and ``--revision-grace 2``. Deployments have no replicas
unless a test scales them: the ReplicaSet controller then creates pods, which stay
``Pending`` without a node; what each reads is in its spec, as the policy wrote it.

- a revision a ReplicaSet in the history names is kept past ``keep`` with the bundle's
  owner reference only, and collected once the history limit drops that ReplicaSet;
- a new pod of a pinned template reads its revision in every kind of reference;
- one content change of one bundle read by one Deployment: at most 6 cbop writes, no
  garbage-collector write;
- ``kubectl replace`` of the Deployment without cbop's keys (case 28), revisions turned
  on after the last rollout, a Deployment opted in with revisions on: pinned once;
- ``cbop-revisions`` deleted by hand (case 29): nothing depends on it;
- a ResourceQuota full of ConfigMaps (case 31).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cbop.kube import (
    CONFIGBUNDLES,
    CONFIGMAPS,
    DEPLOYMENTS,
    NAMESPACES,
    REPLICASETS,
    ApiError,
    KubeClient,
    Resource,
)
from cbop.revisions.model import ANNOTATION_REVISIONS, LABEL_PINNED, mapping_of
from cbop.rollout import ANNOTATION_CONFIG_HASH, LABEL_CONFIG_BASELINE, LABEL_ROLLOUT
from cbop_testing.envtest import ControlPlane

from . import harness
from .harness import Operator, apiserver_writes, bundle, set_spec, wait_for
from .pinpolicy import create_pod
from .revisions import (
    configmap_volumes,
    install_pin_policy,
    pinned_condition,
    pods_by_replicaset,
    revision_of,
    settled_writes,
    write_requests,
)

NAMESPACE = "revision-history-e2e"
WAIT = 90.0
#: Longer than the rollout's coalescing (1 s), a reconcile and two resyncs (2 s each).
QUIET = 6.0
QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota")


@pytest.fixture(scope="module")
def plane(workload_control_plane: ControlPlane) -> ControlPlane:
    return workload_control_plane


@pytest.fixture(scope="module")
def kube(plane: ControlPlane) -> Iterator[KubeClient]:
    config = str(plane.kubeconfig_path)
    with KubeClient.from_config(kubeconfig=config, qps=0) as client:
        client.create(NAMESPACES, None, {"metadata": {"name": NAMESPACE}})
        install_pin_policy(client, f"{NAMESPACE}-probe", WAIT)
        yield client


@pytest.fixture(scope="module")
def cbop(
    plane: ControlPlane, kube: KubeClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    logs: Path = tmp_path_factory.mktemp("revision-history-cbop")
    op = Operator(
        plane.kubeconfig_path,
        [NAMESPACE],
        args=["--rollout", "--resync-period", "2s", "--revision-grace", "2"],
        log_path=logs / "cbop.log",
    ).wait_ready(WAIT)
    yield op
    for item in kube.list(CONFIGBUNDLES, NAMESPACE)["items"]:
        kube.delete(CONFIGBUNDLES, NAMESPACE, item["metadata"]["name"])
    wait_for(lambda: not kube.list(CONFIGBUNDLES, NAMESPACE)["items"], 30, message="bundles gone")
    code = op.stop()
    assert code in (0, -9), f"cbop did not stop cleanly ({code}):\n{op.logs()[-4000:]}"


# -- helpers ---------------------------------------------------------------------------


def deployment(
    name: str, plain: str, *, replicas: int = 0, every_kind: bool = False
) -> dict[str, Any]:
    """An opted-in Deployment (``revisionHistoryLimit: 1``) whose template mounts ``plain``
    and ``not-cbops``; with ``every_kind`` it also reads ``plain`` through ``envFrom``,
    ``env``, a projected volume and an init container's ``env``."""
    labels = {"app": name}
    out: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {LABEL_ROLLOUT: "true"}},
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                    "volumes": [
                        {"name": "conf", "configMap": {"name": plain}},
                        # Optional: a required ConfigMap that is not cbop's holds the
                        # baseline back until it exists (docs/rollout.md).
                        {"name": "other", "configMap": {"name": "not-cbops", "optional": True}},
                    ],
                },
            },
        },
    }
    if every_kind:
        spec: dict[str, Any] = out["spec"]["template"]["spec"]
        ref = {"valueFrom": {"configMapKeyRef": {"name": plain, "key": "v"}}}
        spec["containers"][0]["envFrom"] = [{"configMapRef": {"name": plain}}]
        spec["containers"][0]["env"] = [{"name": "V", **ref}, {"name": "W", "value": plain}]
        spec["initContainers"] = [{"name": "init", "image": "registry.invalid/app:1"}]
        spec["initContainers"][0]["env"] = [{"name": "V", **ref}]
        projected = {"sources": [{"configMap": {"name": plain}}, {"secret": {"name": plain}}]}
        spec["volumes"].append({"name": "proj", "projected": projected})
    return out


def start(kube: KubeClient, name: str, data: dict[str, str], **revisions: Any) -> dict[str, Any]:
    """Create bundle ``name`` (ConfigMap ``<name>-conf``) and wait for its ConfigMap (and
    revision, with revisions on); return its spec."""
    spec: dict[str, Any] = {"configMapName": f"{name}-conf", "revisions": revisions}
    kube.create(CONFIGBUNDLES, NAMESPACE, bundle(name, {**spec, "data": data}))
    wanted = revision_of(f"{name}-conf", data) if revisions.get("enabled") else f"{name}-conf"
    wait_for(lambda: exists(kube, wanted), WAIT, message=f"{wanted}")
    return spec


def change(kube: KubeClient, name: str, spec: dict[str, Any], data: dict[str, str]) -> None:
    time.sleep(1.1)  # creationTimestamp has whole seconds: the newest is unambiguous
    set_spec(kube, NAMESPACE, name, {**spec, "data": data})


def exists(kube: KubeClient, name: str) -> bool:
    try:
        kube.get(CONFIGMAPS, NAMESPACE, name)
    except ApiError as err:
        if err.is_not_found:
            return False
        raise
    return True


def owners(kube: KubeClient, name: str) -> list[tuple[str, str]]:
    refs = kube.get(CONFIGMAPS, NAMESPACE, name)["metadata"].get("ownerReferences") or ()
    return sorted((r["kind"], r["name"]) for r in refs)


def template(kube: KubeClient, name: str) -> dict[str, Any]:
    return dict(kube.get(DEPLOYMENTS, NAMESPACE, name)["spec"]["template"])


def pinned_to(kube: KubeClient, name: str, mapping: dict[str, str]) -> dict[str, Any]:
    """Wait until Deployment ``name``'s template names ``mapping``; return the template."""

    def pinned() -> dict[str, Any] | None:
        got = template(kube, name)
        return got if mapping_of({"spec": {"template": got}}) == mapping else None

    found: dict[str, Any] = wait_for(pinned, WAIT, message=f"{name} pinned to {mapping}")
    return found


def baseline(kube: KubeClient, name: str) -> None:
    wait_for(
        lambda: (
            LABEL_CONFIG_BASELINE in kube.get(DEPLOYMENTS, NAMESPACE, name)["metadata"]["labels"]
        ),
        WAIT,
        message=f"{name}'s baseline",
    )


def replicasets_of(kube: KubeClient, name: str) -> list[dict[str, Any]]:
    return [
        dict(rs)
        for rs in kube.list(REPLICASETS, NAMESPACE)["items"]
        if any(o["name"] == name for o in rs["metadata"].get("ownerReferences") or ())
    ]


def reads(kube: KubeClient, name: str) -> dict[str, list[str]]:
    """ReplicaSet -> what the ``conf`` volume of each of its live pods names."""
    got = pods_by_replicaset(kube, NAMESPACE, f"app={name}")
    return {rs: sorted(configmap_volumes(p)["conf"] for p in ps) for rs, ps in got.items()}


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None) -> str:
    return harness.kubectl(plane, *args, namespace=NAMESPACE, stdin=stdin, timeout=60)


# -- tests -----------------------------------------------------------------------------


def test_history_keeps_what_it_names_until_its_limit_drops_it(
    kube: KubeClient, cbop: Operator
) -> None:
    c1, c2, c3, c4 = ({"v": str(i)} for i in (1, 2, 3, 4))
    r1, r2, r3, r4 = (revision_of("web-conf", c) for c in (c1, c2, c3, c4))
    spec = start(kube, "web", c1, enabled=True, keep=1)
    kube.create(DEPLOYMENTS, NAMESPACE, deployment("web", "web-conf"))
    # Opted in with revisions on: rolled once, at the same content, to pin its template.
    pinned_to(kube, "web", {"web-conf": r1})
    change(kube, "web", spec, c2)
    pinned_to(kube, "web", {"web-conf": r2})
    change(kube, "web", spec, c3)
    pinned_to(kube, "web", {"web-conf": r3})
    # r2: past keep (1), named by the ReplicaSet the history limit (1) keeps: kept, and
    # held by nothing but its bundle (no workload adds an owner reference).
    wait_for(lambda: not exists(kube, r1), WAIT, message="r1 collected with its ReplicaSet")
    assert exists(kube, r2)
    assert owners(kube, r2) == [("ConfigBundle", "web")]
    named = {mapping_of(rs)["web-conf"] for rs in replicasets_of(kube, "web")}
    assert named == {r2, r3}
    change(kube, "web", spec, c4)
    pinned_to(kube, "web", {"web-conf": r4})
    # The history limit deletes r2's ReplicaSet; cbop deletes r2 after the grace.
    wait_for(lambda: not exists(kube, r2), WAIT, message="r2 collected")
    assert exists(kube, r3)
    assert exists(kube, r4)
    assert all(owners(kube, r) == [("ConfigBundle", "web")] for r in (r3, r4))


def test_a_new_pod_of_a_pinned_template_reads_its_revision_everywhere(
    plane: ControlPlane, kube: KubeClient, cbop: Operator
) -> None:
    d1 = {"v": "1"}
    revision = revision_of("api-conf", d1)
    start(kube, "api", d1, enabled=True)
    kube.create(DEPLOYMENTS, NAMESPACE, deployment("api", "api-conf", every_kind=True))
    pinned = pinned_to(kube, "api", {"api-conf": revision})
    assert pinned["metadata"]["labels"][LABEL_PINNED] == "true"
    pod = create_pod(kube, NAMESPACE, pinned["metadata"], pinned["spec"])
    assert configmap_volumes(pod) == {"conf": revision, "other": "not-cbops"}
    app, init = pod["spec"]["containers"][0], pod["spec"]["initContainers"][0]
    assert app["envFrom"] == [{"configMapRef": {"name": revision}}]
    ref = {"valueFrom": {"configMapKeyRef": {"name": revision, "key": "v"}}}
    assert app["env"] == [{"name": "V", **ref}, {"name": "W", "value": "api-conf"}]
    assert init["env"] == [{"name": "V", **ref}]
    projected = next(v for v in pod["spec"]["volumes"] if v["name"] == "proj")["projected"]
    assert projected["sources"] == [
        {"configMap": {"name": revision}},
        {"secret": {"name": "api-conf"}},
    ]
    assert pod["metadata"]["annotations"][ANNOTATION_REVISIONS] == f"api-conf={revision}"
    # cbop verifies it: Pinned=True, naming the Deployment.
    wait_for(
        lambda: (
            (c := pinned_condition(kube, NAMESPACE, "api"))
            and c["status"] == "True"
            and "Deployment/api" in c["message"]
        ),
        WAIT,
        message="Pinned=True naming Deployment/api",
    )
    # `kubectl get` shows the condition in a column of its own.
    header, row = kubectl(plane, "get", "configbundle", "api").splitlines()
    # Columns by the header's positions: an empty cell (no Secret target) has no text.
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    ends = [*starts[1:], None]
    columns = {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, ends, strict=True)}
    assert (columns["READY"], columns["PINNED"]) == ("True", "True"), columns


def test_one_change_of_one_bundle_costs_at_most_six_writes_and_none_of_the_collector(
    kube: KubeClient, cbop: Operator
) -> None:
    c1, c2, c3, c4 = ({"v": str(i)} for i in (1, 2, 3, 4))
    spec = start(kube, "cost", c1, enabled=True, keep=2)
    kube.create(DEPLOYMENTS, NAMESPACE, deployment("cost", "cost-conf"))
    pinned_to(kube, "cost", {"cost-conf": revision_of("cost-conf", c1)})
    for data in (c2, c3):
        change(kube, "cost", spec, data)
        pinned_to(kube, "cost", {"cost-conf": revision_of("cost-conf", data)})
    # The grace of what the last changes left, and resyncs: waited out, not slept.
    before = settled_writes(cbop, QUIET, WAIT)
    by_label, gc_before = write_requests(cbop), apiserver_writes(kube, ("configmaps",))
    change(kube, "cost", spec, c4)
    pinned_to(kube, "cost", {"cost-conf": revision_of("cost-conf", c4)})
    wait_for(lambda: not exists(kube, revision_of("cost-conf", c2)), WAIT, message="c2 collected")
    written = settled_writes(cbop, QUIET, WAIT) - before
    # The revision, the plain ConfigMap, the status, the Deployment, the Event, the delete.
    new = {k: v - by_label.get(k, 0) for k, v in write_requests(cbop).items()}
    assert written <= 6, {k: v for k, v in new.items() if v}
    after = apiserver_writes(kube, ("configmaps",))
    patches = after.get(("PATCH", "configmaps"), 0) - gc_before.get(("PATCH", "configmaps"), 0)
    assert patches == 0, "a ConfigMap was patched: no owner reference is there to remove"


def test_a_replaced_deployment_reads_the_current_content_and_is_pinned_once(
    kube: KubeClient, cbop: Operator, plane: ControlPlane
) -> None:
    """Case 28: ``kubectl replace`` from a manifest without cbop's keys, a new image."""
    v1, v2 = {"v": "1"}, {"v": "2"}
    r1, r2 = revision_of("rep-conf", v1), revision_of("rep-conf", v2)
    spec = start(kube, "rep", v1, enabled=True)
    kube.create(DEPLOYMENTS, NAMESPACE, deployment("rep", "rep-conf", replicas=1))
    pinned_to(kube, "rep", {"rep-conf": r1})
    change(kube, "rep", spec, v2)
    pinned_to(kube, "rep", {"rep-conf": r2})
    wait_for(lambda: list(reads(kube, "rep").values()) == [[r2]], WAIT, message="v2's pod")
    manifest = deployment("rep", "rep-conf", replicas=1)
    manifest["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.invalid/app:2"
    kubectl(plane, "replace", "-f", "-", stdin=json.dumps(manifest))
    # Every pod from now reads v2: by its plain name at first (right for its template),
    # then its revision once cbop pinned the replaced template; never v1's revision.
    seen: set[str] = set()

    def settled() -> bool:
        got = reads(kube, "rep")
        seen.update(n for names in got.values() for n in names)
        return list(got.values()) == [[r2]] and mapping_of(
            {"spec": {"template": template(kube, "rep")}}
        ) == {"rep-conf": r2}

    wait_for(settled, WAIT, message="the replaced Deployment pinned to v2")
    assert r1 not in seen
    assert seen <= {"rep-conf", r2}
    image = template(kube, "rep")["spec"]["containers"][0]["image"]
    assert image == "registry.invalid/app:2"


def test_revisions_turned_on_after_the_last_rollout_pin_the_template_once(
    kube: KubeClient, cbop: Operator
) -> None:
    v1, v2 = {"v": "1"}, {"v": "2"}
    spec = start(kube, "late", v1)
    kube.create(DEPLOYMENTS, NAMESPACE, deployment("late", "late-conf", replicas=1))
    baseline(kube, "late")
    change(kube, "late", spec, v2)
    wait_for(
        lambda: (
            ANNOTATION_CONFIG_HASH in (template(kube, "late")["metadata"].get("annotations") or {})
        ),
        WAIT,
        message="rolled",
    )
    digest = template(kube, "late")["metadata"]["annotations"][ANNOTATION_CONFIG_HASH]
    set_spec(kube, NAMESPACE, "late", {**spec, "data": v2, "revisions": {"enabled": True}})
    pinned = pinned_to(kube, "late", {"late-conf": revision_of("late-conf", v2)})
    assert pinned["metadata"]["annotations"][ANNOTATION_CONFIG_HASH] == digest  # same content
    wait_for(
        lambda: list(reads(kube, "late").values()) == [[revision_of("late-conf", v2)]],
        WAIT,
        message="the pinned pod",
    )


def test_cbop_revisions_deleted_by_hand_changes_nothing(
    kube: KubeClient, cbop: Operator, plane: ControlPlane
) -> None:
    """Case 29: after a rollout, ``kubectl delete cm cbop-revisions``, then a scale-up."""
    v1, v2 = {"v": "1"}, {"v": "2"}
    r2 = revision_of("scale-conf", v2)
    spec = start(kube, "scale", v1, enabled=True)
    kube.create(DEPLOYMENTS, NAMESPACE, deployment("scale", "scale-conf", replicas=1))
    change(kube, "scale", spec, v2)
    pinned_to(kube, "scale", {"scale-conf": r2})
    wait_for(lambda: list(reads(kube, "scale").values()) == [[r2]], WAIT, message="v2's pod")
    kubectl(plane, "delete", "configmap", "cbop-revisions", "--ignore-not-found")
    kube.patch(DEPLOYMENTS, NAMESPACE, "scale", {"spec": {"replicas": 3}})
    wait_for(
        lambda: list(reads(kube, "scale").values()) == [[r2, r2, r2]], WAIT, message="3 pods on r2"
    )


def test_a_configmap_quota_full_of_collectable_revisions_leaves_room_for_the_new_one(
    kube: KubeClient, cbop: Operator
) -> None:
    """Case 31: ``count/configmaps`` at what is in use; ``keep`` 3 -> 1 with a change.

    Last in the module: the quota holds the whole namespace while it is there.
    """
    c1, c2, c3, c4, c5 = ({"v": str(i)} for i in (1, 2, 3, 4, 5))
    spec = start(kube, "quota", c1, enabled=True, keep=3)
    for data in (c2, c3):
        change(kube, "quota", spec, data)
        name = revision_of("quota-conf", data)
        wait_for(lambda: exists(kube, name), WAIT, message=f"{name} made")  # noqa: B023
    time.sleep(QUIET)  # past the grace: c1 and c2 are collectable once keep drops
    used = len(kube.list(CONFIGMAPS, NAMESPACE)["items"])
    quota = {"metadata": {"name": "cm"}, "spec": {"hard": {"count/configmaps": str(used)}}}
    kube.create(QUOTAS, NAMESPACE, quota)
    try:
        wait_for(
            lambda: (kube.get(QUOTAS, NAMESPACE, "cm").get("status") or {}).get("used"),
            WAIT,
            message="the quota's usage counted",
        )
        time.sleep(1.1)
        set_spec(
            kube,
            NAMESPACE,
            "quota",
            {**spec, "data": c4, "revisions": {"enabled": True, "keep": 1}},
        )
        # The two collectable revisions go first; the new one fits.
        wait_for(lambda: exists(kube, revision_of("quota-conf", c4)), WAIT, message="c4's revision")
        assert not exists(kube, revision_of("quota-conf", c1))
        assert not exists(kube, revision_of("quota-conf", c2))
        wait_for(
            lambda: (
                (kube.get(CONFIGBUNDLES, NAMESPACE, "quota").get("status") or {}).get("revision")
                == revision_of("quota-conf", c4)
            ),
            WAIT,
            message="status.revision of c4",
        )
        # Now nothing is collectable in time (c3 was current a moment ago): the create
        # is refused, Ready=False says why, the plain ConfigMap has the content.
        quota_full = {
            "spec": {
                "hard": {"count/configmaps": str(len(kube.list(CONFIGMAPS, NAMESPACE)["items"]))}
            }
        }
        kube.patch(QUOTAS, NAMESPACE, "cm", quota_full, patch_type="merge")
        time.sleep(1.1)
        set_spec(
            kube,
            NAMESPACE,
            "quota",
            {**spec, "data": c5, "revisions": {"enabled": True, "keep": 2}},
        )

        def refused() -> dict[str, Any] | None:
            for c in (kube.get(CONFIGBUNDLES, NAMESPACE, "quota").get("status") or {}).get(
                "conditions"
            ) or ():
                if c["type"] == "Ready" and c["reason"] == "RevisionNotCreated":
                    return dict(c)
            return None

        cond: dict[str, Any] = wait_for(refused, WAIT, message="Ready=False, RevisionNotCreated")
        assert cond["status"] == "False"
        assert "exceeded quota" in cond["message"]
        assert kube.get(CONFIGMAPS, NAMESPACE, "quota-conf")["data"] == c5
        # The quota raised: converges at the next try of the backoff.
        kube.patch(
            QUOTAS,
            NAMESPACE,
            "cm",
            {"spec": {"hard": {"count/configmaps": "100"}}},
            patch_type="merge",
        )
        wait_for(lambda: exists(kube, revision_of("quota-conf", c5)), WAIT, message="c5's revision")
        wait_for(lambda: refused() is None, WAIT, message="Ready again")
    finally:
        kube.delete(QUOTAS, NAMESPACE, "cm")
