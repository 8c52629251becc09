"""Pods of rolled workloads read their own revisions, end to end (docs/revisions.md).

The session's control plane with kube-controller-manager's deployment, replicaset and
garbage-collector controllers (``workload_control_plane``, in a namespace of its own),
the shipped MutatingAdmissionPolicy (``manifests/revisions/``: no params, it reads each
pod's own ``cbop.dev/revisions``), and one cbop process with ``--rollout``. The
ReplicaSet controller creates the pods; they are never scheduled (no node), so they
stay ``Pending`` and never become available: a rolling
update with ``maxUnavailable: 0`` stops midway, with pods of the old and the new
ReplicaSet side by side, and a pod deleted leaves at once. What each pod reads is read
from its spec, as the admission policy wrote it: ``volumes[].configMap.name``.

Each test has its own bundle and Deployment. cbop's writes to workloads are counted
with the API server's ``apiserver_request_total`` (verb ``APPLY`` on deployments): in
this module, only cbop applies workloads, except where a test applies as Flux does,
and then it counts after that apply.
"""

from __future__ import annotations

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
)
from cbop.revisions.model import mapping_of
from cbop.rollout import ANNOTATION_CONFIG_HASH, FIELD_MANAGER, LABEL_CONFIG_BASELINE, LABEL_ROLLOUT
from cbop_testing.envtest import ControlPlane

from . import harness
from .harness import Operator, apiserver_writes, bundle, events, set_spec, wait_for
from .pinpolicy import BINDINGS, PODS, POLICIES, install_policy, policy_docs
from .revisions import (
    configmap_volumes,
    install_pin_policy,
    pinned_condition,
    pods_by_replicaset,
    revision_of,
)

NAMESPACE = "revision-rollouts-e2e"
WAIT = 90.0
#: Longer than the rollout's coalescing window (1 s) plus a reconcile and two resyncs
#: (2 s each) on a busy machine: a write that was going to happen has happened by then.
QUIET = 6.0
#: Flux's kustomize-controller applies with this field manager, with force.
FLUX = "kustomize-controller"


class Cbop:
    """The module's cbop process; :meth:`stop` and :meth:`start` replace it."""

    def __init__(self, kubeconfig: Path, logs: Path) -> None:
        self._kubeconfig = kubeconfig
        self._logs = logs
        self.starts = 0
        self.op: Operator | None = None
        self.start()

    def start(self) -> None:
        self.starts += 1
        self.op = Operator(
            self._kubeconfig,
            [NAMESPACE],
            args=["--rollout", "--resync-period", "2s"],
            log_path=self._logs / f"cbop-{self.starts}.log",
        ).wait_ready(WAIT)

    def stop(self) -> None:
        assert self.op is not None
        code = self.op.stop()
        assert code == 0, f"cbop did not stop cleanly ({code}):\n{self.op.logs()[-4000:]}"
        self.op = None


@pytest.fixture(scope="module")
def plane(workload_control_plane: ControlPlane) -> ControlPlane:
    return workload_control_plane


@pytest.fixture(scope="module")
def kube(plane: ControlPlane) -> Iterator[KubeClient]:
    with KubeClient.from_config(kubeconfig=str(plane.kubeconfig_path), qps=0) as client:
        client.create(NAMESPACES, None, {"metadata": {"name": NAMESPACE}})
        yield client


@pytest.fixture(scope="module")
def cbop(
    plane: ControlPlane, kube: KubeClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cbop]:
    install_pin_policy(kube, f"{NAMESPACE}-probe", WAIT)
    running = Cbop(plane.kubeconfig_path, tmp_path_factory.mktemp("revision-rollouts"))
    yield running
    if running.op is None:
        running.start()
    for item in kube.list(CONFIGBUNDLES, NAMESPACE)["items"]:
        kube.delete(CONFIGBUNDLES, NAMESPACE, item["metadata"]["name"])
    wait_for(lambda: not kube.list(CONFIGBUNDLES, NAMESPACE)["items"], 30, message="bundles gone")
    running.stop()


# -- helpers ---------------------------------------------------------------------------


def deployment(name: str, *, replicas: int, rolling: bool) -> dict[str, Any]:
    """An opted-in Deployment mounting ConfigMap ``<name>-conf``.

    ``rolling``: a rolling update that keeps every old pod until a new one is available
    (``maxSurge: 1``, ``maxUnavailable: 0``), else ``Recreate``.
    """
    labels = {"app": name}
    strategy: dict[str, Any] = (
        {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
        if rolling
        else {"type": "Recreate"}
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {LABEL_ROLLOUT: "true"}},
        "spec": {
            "replicas": replicas,
            "strategy": strategy,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
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
        },
    }


def start(kube: KubeClient, name: str, data: dict[str, str], **revisions: Any) -> None:
    """Create bundle ``name`` (ConfigMap ``<name>-conf``, revisions on) and wait for the
    revision of ``data``."""
    spec = {"configMapName": f"{name}-conf", "revisions": {"enabled": True, **revisions}}
    kube.create(CONFIGBUNDLES, NAMESPACE, bundle(name, {**spec, "data": data}))
    wait_for(lambda: owners(kube, revision_of(f"{name}-conf", data)), WAIT, message="revision")


def change(kube: KubeClient, name: str, data: dict[str, str]) -> None:
    spec = kube.get(CONFIGBUNDLES, NAMESPACE, name)["spec"]
    set_spec(kube, NAMESPACE, name, {**spec, "data": data})


def baseline(kube: KubeClient, name: str) -> None:
    """Wait until cbop has recorded the Deployment's baseline (opting in rolls nothing)."""
    wait_for(
        lambda: (
            LABEL_CONFIG_BASELINE in kube.get(DEPLOYMENTS, NAMESPACE, name)["metadata"]["labels"]
        ),
        WAIT,
        message=f"{name}'s baseline",
    )


def config_hash(kube: KubeClient, name: str) -> str:
    template = kube.get(DEPLOYMENTS, NAMESPACE, name)["spec"]["template"]
    return str((template["metadata"].get("annotations") or {}).get(ANNOTATION_CONFIG_HASH, ""))


def rolled(kube: KubeClient, name: str, old: set[str]) -> str:
    """Wait for a ``cbop.dev/config-hash`` on the template that is not in ``old``."""
    got: str = wait_for(
        lambda: (h := config_hash(kube, name)) not in old and h,
        WAIT,
        message=f"{name} rolled to a new config-hash",
    )
    return got


def pods(kube: KubeClient, name: str) -> dict[str, list[dict[str, Any]]]:
    """The Deployment's live pods by ReplicaSet name."""
    return pods_by_replicaset(kube, NAMESPACE, f"app={name}")


def reads(pods_of_rs: list[dict[str, Any]]) -> list[str]:
    """The ConfigMap each pod's ``conf`` volume names, in pod order."""
    return [configmap_volumes(p)["conf"] for p in pods_of_rs]


def pods_reading(kube: KubeClient, name: str, *want: tuple[int, str]) -> dict[str, list[str]]:
    """Wait until the Deployment's live pods are ``want``: per ReplicaSet, (how many
    pods, the ConfigMap each of them reads); return ReplicaSet -> its pods' UIDs."""

    def seen() -> dict[str, list[str]] | None:
        got = pods(kube, name)
        shape = sorted((len(ps), sorted(set(reads(ps)))) for ps in got.values())
        if shape != sorted((n, [cm]) for n, cm in want):
            return None
        return {rs: sorted(p["metadata"]["uid"] for p in ps) for rs, ps in got.items()}

    try:
        found: dict[str, list[str]] = wait_for(seen, WAIT, message=f"{name}'s pods: {want}")
    except AssertionError as err:
        raise AssertionError(f"{err}; pods by ReplicaSet: {pods_summary(kube, name)}") from None
    return found


def pods_summary(kube: KubeClient, name: str) -> dict[str, list[str]]:
    return {rs: reads(ps) for rs, ps in pods(kube, name).items()}


def replicaset_of(kube: KubeClient, name: str, revision: str) -> str:
    """The one ReplicaSet whose live pods read ``revision``."""
    (rs,) = [rs for rs, ps in pods(kube, name).items() if revision in reads(ps)]
    return rs


def names(kube: KubeClient, replicaset: str) -> str:
    """The revision of ConfigMap ``<app>-conf`` ReplicaSet ``replicaset``'s template names."""
    rs = kube.get(REPLICASETS, NAMESPACE, replicaset)
    (revision,) = mapping_of(rs).values()
    return revision


def owners(kube: KubeClient, configmap: str) -> list[tuple[str, str]] | None:
    """(kind, name) of the ConfigMap's owners, sorted; None when it does not exist."""
    try:
        cm = kube.get(CONFIGMAPS, NAMESPACE, configmap)
    except ApiError as err:
        if err.is_not_found:
            return None
        raise
    return sorted((r["kind"], r["name"]) for r in cm["metadata"].get("ownerReferences") or ())


def applies(kube: KubeClient) -> float:
    """Server-side applies of Deployments the API server has served."""
    writes = apiserver_writes(kube, ("deployments",))
    return sum(n for (verb, _), n in writes.items() if verb == "APPLY")


def managed_fields(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(manager, operation, time) of the object's managedFields entries, sorted; the
    entries of status writes left out."""
    return sorted(
        (e["manager"], e["operation"], e.get("time", ""))
        for e in obj["metadata"]["managedFields"]
        if e.get("subresource") != "status"
    )


def assert_quiet(kube: KubeClient, name: str) -> dict[str, Any]:
    """Over :data:`QUIET` seconds, nobody writes the Deployment (its controller's status
    aside) and the API server serves no apply of a Deployment; return the Deployment."""
    before = kube.get(DEPLOYMENTS, NAMESPACE, name)
    count = applies(kube)
    time.sleep(QUIET)
    after = kube.get(DEPLOYMENTS, NAMESPACE, name)
    assert applies(kube) == count
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    assert after["spec"] == before["spec"]
    assert managed_fields(after) == managed_fields(before)
    return dict(after)


def rollouts(cbop: Cbop) -> float:
    """cbop's ``cbop_rollouts_total`` for Deployments (0 before its first rollout)."""
    assert cbop.op is not None
    return cbop.op.metrics().get('cbop_rollouts_total{kind="Deployment"}', 0.0)


def flux_apply(kube: KubeClient, manifest: dict[str, Any]) -> dict[str, Any]:
    """Apply ``manifest`` as Flux's kustomize-controller does (its field manager, force)."""
    return kube.patch(
        DEPLOYMENTS,
        NAMESPACE,
        manifest["metadata"]["name"],
        manifest,
        patch_type="apply",
        field_manager=FLUX,
        force=True,
    )


def flux_apply_unchanged(kube: KubeClient, manifest: dict[str, Any]) -> dict[str, Any]:
    """Apply ``manifest`` as Flux does and return the result, which must carry the
    resourceVersion read just before: no write. The Deployment controller may write the
    status in between, so a few rounds are allowed; a write by the apply itself would
    change it every round."""
    rounds: list[tuple[str, str]] = []
    for _ in range(10):
        before = kube.get(DEPLOYMENTS, NAMESPACE, manifest["metadata"]["name"])
        after = flux_apply(kube, manifest)
        if after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]:
            return after
        rounds.append((before["metadata"]["resourceVersion"], after["metadata"]["resourceVersion"]))
        time.sleep(0.5)
    raise AssertionError(f"every apply wrote a new resourceVersion: {rounds}")


def kubectl(plane: ControlPlane, *args: str) -> str:
    return harness.kubectl(plane, *args, namespace=NAMESPACE, timeout=60)


def delete_pod(kube: KubeClient, uid: str) -> None:
    (pod,) = [p for p in kube.list(PODS, NAMESPACE)["items"] if p["metadata"]["uid"] == uid]
    kube.delete(PODS, NAMESPACE, pod["metadata"]["name"])


# -- tests -----------------------------------------------------------------------------


def test_old_and_new_pods_read_their_own_revisions_during_a_rollout(
    kube: KubeClient, cbop: Cbop
) -> None:
    c1, c2, c3 = ({"v": str(i)} for i in (1, 2, 3))
    r2, r3 = revision_of("roll-conf", c2), revision_of("roll-conf", c3)
    start(kube, "roll", c1)
    kube.create(DEPLOYMENTS, NAMESPACE, deployment("roll", replicas=0, rolling=True))
    baseline(kube, "roll")
    # Opted in with revisions on: pinned at once (a roll at the same content).
    h1 = rolled(kube, "roll", {""})
    change(kube, "roll", c2)
    h2 = rolled(kube, "roll", {"", h1})
    kube.patch(DEPLOYMENTS, NAMESPACE, "roll", {"spec": {"replicas": 2}})
    pods_reading(kube, "roll", (2, r2))

    change(kube, "roll", c3)
    rolled(kube, "roll", {"", h1, h2})
    # One surge pod of the new ReplicaSet; the old ones stay, since none is available.
    midway = pods_reading(kube, "roll", (2, r2), (1, r3))
    old_rs, new_rs = replicaset_of(kube, "roll", r2), replicaset_of(kube, "roll", r3)
    assert kube.get(CONFIGMAPS, NAMESPACE, "roll-conf")["data"] == c3
    # An old pod deleted midway: its ReplicaSet makes another, which reads the old revision.
    delete_pod(kube, midway[old_rs][0])
    after = pods_reading(kube, "roll", (2, r2), (1, r3))
    assert set(after[old_rs]) - set(midway[old_rs]), "the deleted pod was not replaced"
    assert after[new_rs] == midway[new_rs]
    # Each ReplicaSet's template names the revision its pods read; the revisions have
    # no owner but their bundle.
    assert (names(kube, old_rs), names(kube, new_rs)) == (r2, r3)
    assert owners(kube, r2) == owners(kube, r3) == [("ConfigBundle", "roll")]


def test_rollout_undo_restores_the_old_revision_and_is_not_rolled_forward(
    kube: KubeClient, cbop: Cbop, plane: ControlPlane
) -> None:
    c1, c2, c3, c4 = ({"v": str(i)} for i in (1, 2, 3, 4))
    r2, r3, r4 = (revision_of("undo-conf", c) for c in (c2, c3, c4))
    start(kube, "undo", c1, keep=1)
    kube.create(DEPLOYMENTS, NAMESPACE, deployment("undo", replicas=1, rolling=False))
    baseline(kube, "undo")
    h1 = rolled(kube, "undo", {""})  # pinned once at opt-in
    change(kube, "undo", c2)
    h2 = rolled(kube, "undo", {"", h1})
    pods_reading(kube, "undo", (1, r2))
    rs2 = replicaset_of(kube, "undo", r2)
    change(kube, "undo", c3)
    h3 = rolled(kube, "undo", {"", h1, h2})
    pods_reading(kube, "undo", (1, r3))
    # Beyond keep (1), r2 is kept: rs2, in the history, names it (docs/revisions.md).
    time.sleep(QUIET)
    assert owners(kube, r2) == [("ConfigBundle", "undo")]
    assert names(kube, rs2) == r2

    kubectl(plane, "rollout", "undo", "deployment/undo")
    wait_for(lambda: config_hash(kube, "undo") == h2, WAIT, message="the undo")
    # The old template's new pod reads the old revision, which still exists.
    pods_reading(kube, "undo", (1, r2))
    assert replicaset_of(kube, "undo", r2) == rs2
    assert owners(kube, r2) == [("ConfigBundle", "undo")]
    # cbop does not answer the undo: the content has not changed since the last rollout.
    undone = assert_quiet(kube, "undo")
    assert config_hash(kube, "undo") == h2
    assert undone["metadata"]["labels"][LABEL_CONFIG_BASELINE] == h3[7:47]

    # The next content change rolls as usual.
    change(kube, "undo", c4)
    rolled(kube, "undo", {"", h1, h2, h3})
    pods_reading(kube, "undo", (1, r4))


def test_a_forced_gitops_apply_fights_nothing_and_pods_keep_their_revision(
    kube: KubeClient, cbop: Cbop
) -> None:
    c1, c2 = {"v": "1"}, {"v": "2"}
    r2 = revision_of("flux-conf", c2)
    start(kube, "flux", c1)
    manifest = deployment("flux", replicas=1, rolling=False)
    flux_apply(kube, manifest)
    baseline(kube, "flux")
    h1 = rolled(kube, "flux", {""})
    change(kube, "flux", c2)
    h2 = rolled(kube, "flux", {"", h1})
    pods_reading(kube, "flux", (1, r2))
    rs2 = replicaset_of(kube, "flux", r2)
    cbop_entry = [
        w for w in managed_fields(kube.get(DEPLOYMENTS, NAMESPACE, "flux")) if w[0] == FIELD_MANAGER
    ]
    rolled_before = rollouts(cbop)
    assert rolled_before >= 1

    # Flux applies its manifest again (no annotation in it; force): nothing is written.
    synced = flux_apply_unchanged(kube, manifest)
    assert config_hash(kube, "flux") == h2
    # Then a new image in Git: a new ReplicaSet, whose template keeps cbop's annotations
    # (Flux's apply does not own them), so its pods read the same revision.
    manifest["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.invalid/app:2"
    updated = flux_apply(kube, manifest)
    assert updated["metadata"]["generation"] == synced["metadata"]["generation"] + 1
    assert config_hash(kube, "flux") == h2

    def new_replicaset() -> str | None:
        got = pods(kube, "flux")
        fresh = [rs for rs, ps in got.items() if rs != rs2 and reads(ps) == [r2]]
        return fresh[0] if fresh and rs2 not in got else None

    rs2b: str = wait_for(new_replicaset, WAIT, message=f"flux's new ReplicaSet reading {r2}")
    assert names(kube, rs2b) == r2
    # cbop writes nothing to the workload: no apply, its own managedFields entry as before.
    quiet = assert_quiet(kube, "flux")
    assert [w for w in managed_fields(quiet) if w[0] == FIELD_MANAGER] == cbop_entry
    assert rollouts(cbop) == rolled_before
    assert not [
        e
        for e in events(kube, NAMESPACE, "RolloutConflict")
        if e["involvedObject"]["name"] == "flux"
    ]
    assert config_hash(kube, "flux") == h2


def test_with_cbop_stopped_new_pods_still_read_their_revision(
    kube: KubeClient, cbop: Cbop, plane: ControlPlane
) -> None:
    c1, c2, c3 = ({"v": str(i)} for i in (1, 2, 3))
    r2, r3 = revision_of("down-conf", c2), revision_of("down-conf", c3)
    start(kube, "down", c1)
    kube.create(DEPLOYMENTS, NAMESPACE, deployment("down", replicas=1, rolling=False))
    baseline(kube, "down")
    h1 = rolled(kube, "down", {""})
    change(kube, "down", c2)
    h2 = rolled(kube, "down", {"", h1})
    pods_reading(kube, "down", (1, r2))
    change(kube, "down", c3)
    h3 = rolled(kube, "down", {"", h1, h2})
    pods_reading(kube, "down", (1, r3))

    cbop.stop()
    # The admission policy runs in kube-apiserver and reads each pod's own mapping:
    # scaling up, a deleted pod's replacement and an undo all get their revision.
    kube.patch(DEPLOYMENTS, NAMESPACE, "down", {"spec": {"replicas": 3}})
    scaled = pods_reading(kube, "down", (3, r3))
    (rs3,) = scaled
    delete_pod(kube, scaled[rs3][0])
    replaced = pods_reading(kube, "down", (3, r3))
    assert set(replaced[rs3]) - set(scaled[rs3])
    kubectl(plane, "rollout", "undo", "deployment/down")
    pods_reading(kube, "down", (3, r2))

    # Started again, cbop leaves the undone Deployment alone.
    cbop.start()
    assert_quiet(kube, "down")
    assert config_hash(kube, "down") == h2
    assert (
        kube.get(DEPLOYMENTS, NAMESPACE, "down")["metadata"]["labels"][LABEL_CONFIG_BASELINE]
        == h3[7:47]
    )


def warnings_on(kube: KubeClient, name: str, reason: str) -> list[dict[str, Any]]:
    """Warning Events of ``reason`` on Deployment ``name``."""
    return [
        e
        for e in events(kube, NAMESPACE, reason)
        if e["involvedObject"]["kind"] == "Deployment" and e["involvedObject"]["name"] == name
    ]


def test_a_revision_deleted_by_hand_that_an_undo_needs_is_reported(
    kube: KubeClient, cbop: Cbop, plane: ControlPlane
) -> None:
    """Case 30: v1 -> v2 -> v3 rolled; v2's revision deleted by hand; an undo to v2.

    The content is this test's own: no other revision of the namespace holds v2 (cbop
    would make the revision again from it: tests/unit/test_revisions.py).
    """
    c1, c2, c3 = ({"miss": str(i)} for i in (1, 2, 3))
    r2, r3 = revision_of("miss-conf", c2), revision_of("miss-conf", c3)
    start(kube, "miss", c1)
    kube.create(DEPLOYMENTS, NAMESPACE, deployment("miss", replicas=1, rolling=False))
    baseline(kube, "miss")
    h1 = rolled(kube, "miss", {""})
    change(kube, "miss", c2)
    h2 = rolled(kube, "miss", {"", h1})
    change(kube, "miss", c3)
    rolled(kube, "miss", {"", h1, h2})
    pods_reading(kube, "miss", (1, r3))
    kube.delete(CONFIGMAPS, NAMESPACE, r2)
    kubectl(plane, "rollout", "undo", "deployment/miss")
    wait_for(lambda: config_hash(kube, "miss") == h2, WAIT, message="the undo")

    def missing() -> dict[str, Any] | None:
        cond = pinned_condition(kube, NAMESPACE, "miss")
        return cond if cond and cond["reason"] == "RevisionMissing" else None

    cond: dict[str, Any] = wait_for(missing, WAIT, message="Pinned=False, RevisionMissing")
    assert cond["status"] == "False"
    assert cond["message"].startswith("Deployment/miss: ")
    assert r2 in cond["message"]
    (ready,) = [
        c
        for c in kube.get(CONFIGBUNDLES, NAMESPACE, "miss")["status"]["conditions"]
        if c["type"] == "Ready"
    ]
    assert ready["status"] == "True"  # the ConfigMap is right
    wait_for(lambda: warnings_on(kube, "miss", "RevisionMissing"), WAIT, message="the Event")
    (event,) = warnings_on(kube, "miss", "RevisionMissing")
    assert event["type"] == "Warning"
    assert r2 in event["message"]


def test_the_policy_deleted_and_made_again_is_seen_in_pods_a_gauge_and_events(
    kube: KubeClient, cbop: Cbop
) -> None:
    """Pinning is verified: a pod created while the policy is gone reads the plain name,
    and cbop says so; the policy made again (no kube-apiserver restart) pins again."""
    c1 = {"v": "1"}
    r1 = revision_of("gone-conf", c1)
    start(kube, "gone", c1)
    kube.create(DEPLOYMENTS, NAMESPACE, deployment("gone", replicas=1, rolling=False))
    baseline(kube, "gone")
    rolled(kube, "gone", {""})
    pods_reading(kube, "gone", (1, r1))
    wait_for(
        lambda: (
            (c := pinned_condition(kube, NAMESPACE, "gone")) is not None and c["status"] == "True"
        ),
        WAIT,
        message="Pinned=True",
    )
    assert cbop.op is not None
    for doc in reversed(policy_docs()):
        kube.delete(BINDINGS if doc["kind"].endswith("Binding") else POLICIES, None,
                    doc["metadata"]["name"])  # fmt: skip
    try:
        # A new pod while the policy is gone (its effect ends within moments).
        def unpinned_pod() -> bool:
            return not pods_rolled_to(kube, "gone", r1)

        wait_for(unpinned_pod, WAIT, message="a pod created without the policy")

        def reported() -> dict[str, Any] | None:
            cond = pinned_condition(kube, NAMESPACE, "gone")
            return cond if cond and cond["status"] == "False" else None

        cond: dict[str, Any] = wait_for(reported, WAIT, message="Pinned=False")
        assert cond["reason"] in ("PodNotPinned", "PolicyMissing")
        metrics = cbop.op.metrics()
        assert metrics["cbop_revision_pods_unpinned{}"] >= 1
        wait_for(
            lambda: (
                warnings_on(kube, "gone", "PodNotPinned")
                or warnings_on(kube, "gone", "PolicyMissing")
            ),
            WAIT,
            message="a Warning on the Deployment",
        )
    finally:
        install_policy(kube)
    # Made again: the next pod is pinned, and the condition and the gauge follow.
    wait_for(lambda: pods_rolled_to(kube, "gone", r1), WAIT, message="a pinned pod again")
    wait_for(
        lambda: (
            (c := pinned_condition(kube, NAMESPACE, "gone")) is not None and c["status"] == "True"
        ),
        WAIT,
        message="Pinned=True again",
    )
    assert cbop.op.metrics()["cbop_revision_pods_unpinned{}"] == 0


def pods_rolled_to(kube: KubeClient, name: str, revision: str) -> bool:
    """Scale ``name`` to 0 and back to 1; whether its new pod reads ``revision``."""
    kube.patch(DEPLOYMENTS, NAMESPACE, name, {"spec": {"replicas": 0}})
    wait_for(lambda: not pods(kube, name), WAIT, message="scaled to 0")
    kube.patch(DEPLOYMENTS, NAMESPACE, name, {"spec": {"replicas": 1}})
    found: list[dict[str, Any]] = wait_for(
        lambda: [p for ps in pods(kube, name).values() for p in ps], WAIT, message="a pod"
    )
    return bool(configmap_volumes(found[0])["conf"] == revision)
