"""The rollout controllers end to end: a real cbop process rolls real workloads.

The session's control plane with kube-controller-manager's deployment, replicaset,
statefulset and daemonset controllers (``workload_control_plane``, shared with
test_rollout_apply.py, each module in a namespace of its own), so a new
``cbop.dev/config-hash`` really produces a new ReplicaSet (Deployment) or
ControllerRevision (StatefulSet, DaemonSet). One cbop process (``--rollout``, 2 s
resyncs) scoped to the module's namespace serves every test; the last test restarts it.
cbop's writes to workloads are counted with the API server's own
``apiserver_request_total``: while these tests run, cbop is the only client in that
control plane that applies (verb ``APPLY``) apps resources (test_rollout_apply.py's
applies come before or after, never during), so each test's count is cbop's rollout
writes and nothing else.

Workloads from earlier tests stay in place, so the quiet checks at the end cover
every workload of the module. The upgrade test runs release 0.2.0's operator (from the
tag, as tests/e2e/test_upgrade.py does) and this checkout's, one at a time, in a
namespace of their own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cbop.kube import (
    CONFIGBUNDLES,
    CONFIGMAPS,
    DAEMONSETS,
    DEPLOYMENTS,
    NAMESPACES,
    STATEFULSETS,
    KubeClient,
    Resource,
)
from cbop.rollout import (
    ANNOTATION_CONFIG_HASH,
    FIELD_MANAGER,
    LABEL_CONFIG_BASELINE,
    LABEL_ROLLOUT,
    Action,
    baseline,
    config_digest,
    decide,
)
from cbop.rollout.decision import baseline_value
from cbop_testing.envtest import ControlPlane

from . import harness
from .harness import Operator, apiserver_writes, bundle, events, ready, set_spec, wait_for
from .releases import release_tree
from .workloads import revisions

NAMESPACE = "rollout-e2e"
APPS = ("deployments", "statefulsets", "daemonsets")
WAIT = 90.0
#: Longer than the coalescing window (1 s) plus a reconcile on a busy machine: a write
#: that was going to happen has happened by then.
QUIET = 6.0


class Cbop:
    """The module's cbop process; :meth:`restart` replaces it."""

    def __init__(self, kubeconfig: Path, logs: Path) -> None:
        self._kubeconfig = kubeconfig
        self._logs = logs
        self.starts = 0
        self.op = self._start()

    def _start(self) -> Operator:
        self.starts += 1
        op = Operator(
            self._kubeconfig,
            [NAMESPACE],
            args=["--rollout", "--resync-period", "2s"],
            log_path=self._logs / f"cbop-{self.starts}.log",
        )
        return op.wait_ready(WAIT)

    def restart(self) -> None:
        code = self.op.stop()
        assert code == 0, f"cbop did not stop cleanly ({code}):\n{self.op.logs()[-4000:]}"
        self.op = self._start()

    def rollouts(self, kind: str) -> float:
        return self.op.metrics()[f'cbop_rollouts_total{{kind="{kind}"}}']


@pytest.fixture(scope="module")
def plane(workload_control_plane: ControlPlane) -> ControlPlane:
    """The session's control plane with the workload controllers (tests/e2e/fixtures.py)."""
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
    running = Cbop(plane.kubeconfig_path, tmp_path_factory.mktemp("rollout-cbop"))
    yield running
    code = running.op.stop()
    assert code in (0, -9), f"cbop did not stop cleanly ({code}):\n{running.op.logs()[-4000:]}"


# -- helpers ---------------------------------------------------------------------------


def new_bundle(kube: KubeClient, name: str, data: dict[str, str], **spec: Any) -> None:
    kube.create(CONFIGBUNDLES, NAMESPACE, bundle(name, {"data": data, **spec}))
    wait_for(lambda: ready(kube, NAMESPACE, name, 1), WAIT, message=f"bundle {name} Ready")


def change_bundle(kube: KubeClient, name: str, data: dict[str, str], **spec: Any) -> int:
    """Replace the bundle's spec; return the new generation (not waited for)."""
    return set_spec(kube, NAMESPACE, name, {"data": data, **spec})


def workload(kind: str, name: str, configmaps: list[str]) -> dict[str, Any]:
    """An opted-in workload: the first ConfigMap as a volume, the others as envFrom."""
    labels = {"app": name}
    container: dict[str, Any] = {
        "name": "app",
        "image": "registry.invalid/app:1",
        "volumeMounts": [{"name": "conf", "mountPath": "/etc/app"}],
        "envFrom": [{"configMapRef": {"name": cm}} for cm in configmaps[1:]],
    }
    spec: dict[str, Any] = {
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "containers": [container],
                "volumes": [{"name": "conf", "configMap": {"name": configmaps[0]}}],
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
        "metadata": {"name": name, "labels": {LABEL_ROLLOUT: "true"}},
        "spec": spec,
    }


def config_hash(kube: KubeClient, resource: Resource, name: str) -> str:
    obj = kube.get(resource, NAMESPACE, name)
    return str(
        (obj["spec"]["template"]["metadata"].get("annotations") or {}).get(
            ANNOTATION_CONFIG_HASH, ""
        )
    )


def in_sync(kube: KubeClient, resource: Resource, name: str) -> bool:
    """Whether the workload's baseline is the digest of the ConfigMaps in the cluster now
    (cbop has recorded it, or rolled the workload to it)."""
    obj = kube.get(resource, NAMESPACE, name)
    configmaps = {cm["metadata"]["name"]: cm for cm in kube.list(CONFIGMAPS, NAMESPACE)["items"]}
    return decide(obj, configmaps).action is Action.NONE and bool(baseline(obj))


def settled(kube: KubeClient, resource: Resource, name: str) -> str:
    """Wait until cbop's baseline is current and the workload's controller has seen the
    workload's latest generation; return the workload's UID."""
    wait_for(lambda: in_sync(kube, resource, name), WAIT, message=f"{name}'s baseline")

    def seen() -> str | None:
        obj = kube.get(resource, NAMESPACE, name)
        status = obj.get("status") or {}
        if status.get("observedGeneration") != obj["metadata"]["generation"]:
            return None
        return str(obj["metadata"]["uid"])

    uid: str = wait_for(seen, WAIT, message=f"{resource.kind} {name} observed by its controller")
    return uid


def applies(kube: KubeClient) -> float:
    """Server-side applies of apps resources the API server has served (cbop's writes)."""
    return sum(n for (verb, _), n in apiserver_writes(kube, APPS).items() if verb == "APPLY")


def workload_events(kube: KubeClient, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in events(kube, NAMESPACE, reason) if e["involvedObject"]["name"] == name]


def kubectl(plane: ControlPlane, *args: str) -> str:
    return harness.kubectl(plane, *args, namespace=NAMESPACE, timeout=60)


def annotation_owners(kube: KubeClient, resource: Resource, name: str) -> dict[str, str]:
    """Field manager -> operation, for the managers owning the template annotation."""
    obj = kube.get(resource, NAMESPACE, name)
    return {
        entry["manager"]: entry["operation"]
        for entry in obj["metadata"]["managedFields"]
        if f"f:{ANNOTATION_CONFIG_HASH}" in json.dumps(entry.get("fieldsV1"))
    }


def rolled_to_new_hash(kube: KubeClient, name: str, old: set[str]) -> str:
    """Wait for a config-hash not in ``old`` and for the Deployment to have seen it."""
    got: str = wait_for(
        lambda: (h := config_hash(kube, DEPLOYMENTS, name)) not in old and h,
        WAIT,
        message=f"{name} rolled to a new config-hash",
    )
    settled(kube, DEPLOYMENTS, name)
    return got


# -- tests -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "name"),
    [(DEPLOYMENTS, "web"), (STATEFULSETS, "db"), (DAEMONSETS, "agent")],
    ids=["deployment", "statefulset", "daemonset"],
)
def test_a_bundle_change_rolls_the_workload_once(
    kube: KubeClient, cbop: Cbop, resource: Resource, name: str
) -> None:
    """A new ReplicaSet or ControllerRevision, one apply, an Event naming the bundle,
    and ``cbop_rollouts_total{kind}`` counting it."""
    kind = resource.kind
    conf = f"{name}-settings"
    new_bundle(kube, conf, {"level": "info"})
    kube.create(resource, NAMESPACE, workload(kind, name, [conf]))
    uid = settled(kube, resource, name)
    before = wait_for(
        lambda: revisions(kube, NAMESPACE, kind, uid), WAIT, message=f"{kind}'s revisions"
    )
    first = config_hash(kube, resource, name)
    writes, counted = applies(kube), cbop.rollouts(kind)

    change_bundle(kube, conf, {"level": "debug"})
    wait_for(lambda: config_hash(kube, resource, name) != first, WAIT, message="a new config-hash")
    after = wait_for(
        lambda: (got := revisions(kube, NAMESPACE, kind, uid)) != before and got,
        WAIT,
        message=f"{kind}'s revision for the new pod template",
    )
    assert len(after) == len(before) + 1
    settled(kube, resource, name)
    time.sleep(QUIET)
    assert applies(kube) - writes == 1
    assert revisions(kube, NAMESPACE, kind, uid) == after
    assert cbop.rollouts(kind) - counted == 1
    changed = wait_for(
        lambda: [
            e
            for e in workload_events(kube, name, "ConfigChanged")
            if config_hash(kube, resource, name) in e["message"]
        ],
        WAIT,
        message="a ConfigChanged Event for the new digest",
    )
    assert f"ConfigBundle(s) {conf} changed" in changed[0]["message"]
    assert changed[0]["involvedObject"]["kind"] == kind


@pytest.mark.parametrize("later", [False, True], ids=["at-creation", "label-added-later"])
def test_opting_in_is_no_reason_to_roll(kube: KubeClient, cbop: Cbop, later: bool) -> None:
    """Case 17 (wave#111): a workload that opts in, at creation or by a label added
    later, keeps its pod template (generation 1, one ReplicaSet): its pods already read
    the content. cbop records the baseline label; the next content change rolls once."""
    name = "optin-later" if later else "optin"
    conf = f"{name}-cfg"
    new_bundle(kube, conf, {"LEVEL": "info"})
    manifest = workload("Deployment", name, [conf])
    if later:
        del manifest["metadata"]["labels"][LABEL_ROLLOUT]
    writes = applies(kube)
    uid = kube.create(DEPLOYMENTS, NAMESPACE, manifest)["metadata"]["uid"]
    if later:
        wait_for(lambda: revisions(kube, NAMESPACE, "Deployment", uid), WAIT, message="RS")
        kube.patch(DEPLOYMENTS, NAMESPACE, name, {"metadata": {"labels": {LABEL_ROLLOUT: "true"}}})
    settled(kube, DEPLOYMENTS, name)
    first = wait_for(
        lambda: revisions(kube, NAMESPACE, "Deployment", uid), WAIT, message="the ReplicaSet"
    )
    time.sleep(QUIET)
    obj = kube.get(DEPLOYMENTS, NAMESPACE, name)
    assert obj["metadata"]["generation"] == 1
    assert config_hash(kube, DEPLOYMENTS, name) == ""
    assert obj["metadata"]["labels"][LABEL_CONFIG_BASELINE]
    assert revisions(kube, NAMESPACE, "Deployment", uid) == first
    assert len(first) == 1
    assert applies(kube) - writes == 1  # the baseline label, and nothing else
    assert workload_events(kube, name, "ConfigChanged") == []

    change_bundle(kube, conf, {"LEVEL": "debug"})
    rolled_to_new_hash(kube, name, {""})
    assert kube.get(DEPLOYMENTS, NAMESPACE, name)["metadata"]["generation"] == 2
    wait_for(
        lambda: len(revisions(kube, NAMESPACE, "Deployment", uid)) == 2,
        WAIT,
        message="one new ReplicaSet",
    )
    time.sleep(QUIET)
    assert applies(kube) - writes == 2
    assert len(revisions(kube, NAMESPACE, "Deployment", uid)) == 2


def test_an_optional_reference_that_appears_later_rolls_once(kube: KubeClient, cbop: Cbop) -> None:
    """Case 32: ``d-opt`` reads ``optcfg`` through an optional ``envFrom`` and is created
    while no ``optcfg`` exists, so its pods start without it. cbop records the baseline
    of nothing at first sight (one apply, generation 1); the bundle that then creates
    ``optcfg`` rolls the Deployment once, and nothing more is written."""
    name, conf = "d-opt", "optcfg"
    labels = {"app": name}
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {LABEL_ROLLOUT: "true"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.invalid/app:1",
                            "envFrom": [{"configMapRef": {"name": conf, "optional": True}}],
                        }
                    ]
                },
            },
        },
    }
    writes = applies(kube)
    uid = kube.create(DEPLOYMENTS, NAMESPACE, manifest)["metadata"]["uid"]
    first = wait_for(
        lambda: revisions(kube, NAMESPACE, "Deployment", uid), WAIT, message="the ReplicaSet"
    )
    time.sleep(QUIET)
    obj = kube.get(DEPLOYMENTS, NAMESPACE, name)
    nothing = baseline_value(config_digest(()))
    assert obj["metadata"]["labels"].get(LABEL_CONFIG_BASELINE) == nothing, (
        "no baseline recorded for a workload that reads no managed ConfigMap yet"
    )
    assert obj["metadata"]["generation"] == 1
    assert config_hash(kube, DEPLOYMENTS, name) == ""
    assert applies(kube) - writes == 1  # the baseline label, and nothing else

    new_bundle(kube, conf, {"LEVEL": "debug"})
    digest = rolled_to_new_hash(kube, name, {""})
    assert kube.get(DEPLOYMENTS, NAMESPACE, name)["metadata"]["generation"] == 2
    wait_for(
        lambda: len(revisions(kube, NAMESPACE, "Deployment", uid)) == len(first) + 1,
        WAIT,
        message="one new ReplicaSet",
    )
    time.sleep(QUIET)
    assert applies(kube) - writes == 2
    assert len(revisions(kube, NAMESPACE, "Deployment", uid)) == len(first) + 1
    changed = wait_for(
        lambda: [e for e in workload_events(kube, name, "ConfigChanged") if digest in e["message"]],
        WAIT,
        message="the ConfigChanged Event",
    )
    assert f"ConfigMap(s) {conf} now managed by ConfigBundle(s) {conf}" in changed[0]["message"]


def test_a_required_configmap_created_after_its_workload_rolls_nothing(
    kube: KubeClient, cbop: Cbop
) -> None:
    """A chart that creates a labelled Deployment before its ConfigBundle (Helm applies
    custom resources last): the pods wait for the required ConfigMap and start with it,
    so its arrival is the baseline. cbop writes nothing while it is absent, the baseline
    label once it exists, and never rolls the Deployment for it; the next content
    change rolls it once."""
    name, conf = "d-req", "reqcfg"
    kube.create(DEPLOYMENTS, NAMESPACE, workload("Deployment", name, [conf]))
    writes = applies(kube)
    time.sleep(QUIET)
    assert applies(kube) == writes, "a write for a workload waiting for its ConfigMap"
    assert LABEL_CONFIG_BASELINE not in kube.get(DEPLOYMENTS, NAMESPACE, name)["metadata"].get(
        "labels", {}
    )
    new_bundle(kube, conf, {"a": "1"})
    wait_for(
        lambda: (
            LABEL_CONFIG_BASELINE in kube.get(DEPLOYMENTS, NAMESPACE, name)["metadata"]["labels"]
        ),
        WAIT,
        message="the baseline at the ConfigMap's arrival",
    )
    time.sleep(QUIET)
    obj = kube.get(DEPLOYMENTS, NAMESPACE, name)
    assert obj["metadata"]["generation"] == 1
    assert config_hash(kube, DEPLOYMENTS, name) == ""
    assert applies(kube) - writes == 1  # the baseline label alone
    change_bundle(kube, conf, {"a": "2"})
    rolled_to_new_hash(kube, name, {""})
    assert kube.get(DEPLOYMENTS, NAMESPACE, name)["metadata"]["generation"] == 2


def test_a_rollback_an_edit_or_a_restart_never_switches_rollouts_off(
    plane: ControlPlane, kube: KubeClient, cbop: Cbop
) -> None:
    """Case 18 (kubernetes#112911, kubectl#1297): ``kubectl rollout undo`` brings back
    the old annotation under manager ``kubectl`` (Update). The undo itself is
    not answered (its pods read today's content); the next content change rolls, the
    annotation taken back from that plain update. The same after a ``rollout
    restart`` and after an edit of the annotation itself."""
    conf = "undo-cfg"
    new_bundle(kube, conf, {"a": "0"})
    kube.create(DEPLOYMENTS, NAMESPACE, workload("Deployment", "undo", [conf]))
    uid = settled(kube, DEPLOYMENTS, "undo")
    change_bundle(kube, conf, {"a": "1"})
    h1 = rolled_to_new_hash(kube, "undo", {""})
    change_bundle(kube, conf, {"a": "2"})
    h2 = rolled_to_new_hash(kube, "undo", {"", h1})
    wait_for(
        lambda: len(revisions(kube, NAMESPACE, "Deployment", uid)) == 3,
        WAIT,
        message="three ReplicaSets",
    )
    writes = applies(kube)

    kubectl(plane, "rollout", "undo", "deployment/undo")
    wait_for(lambda: config_hash(kube, DEPLOYMENTS, "undo") == h1, WAIT, message="the undo")
    assert annotation_owners(kube, DEPLOYMENTS, "undo") == {"kubectl": "Update"}
    settled(kube, DEPLOYMENTS, "undo")
    time.sleep(QUIET)
    assert applies(kube) - writes == 0  # the undo is not answered with another rollout
    assert config_hash(kube, DEPLOYMENTS, "undo") == h1

    change_bundle(kube, conf, {"a": "3"})
    h3 = rolled_to_new_hash(kube, "undo", {h1, h2})
    assert annotation_owners(kube, DEPLOYMENTS, "undo") == {FIELD_MANAGER: "Apply"}
    taken = wait_for(
        lambda: [e for e in workload_events(kube, "undo", "ConfigChanged") if h3 in e["message"]],
        WAIT,
        message="the ConfigChanged Event of the take-back",
    )
    assert "taken back from kubectl," in taken[0]["message"]
    assert workload_events(kube, "undo", "RolloutConflict") == []

    # A restart (another template annotation) and an edit of cbop's own annotation:
    # neither is answered; each next content change rolls.
    kubectl(plane, "rollout", "restart", "deployment/undo")
    settled(kube, DEPLOYMENTS, "undo")
    writes = applies(kube)
    time.sleep(QUIET)
    assert applies(kube) - writes == 0
    change_bundle(kube, conf, {"a": "4"})
    h4 = rolled_to_new_hash(kube, "undo", {h1, h2, h3})
    edited = "sha256:" + "e" * 64
    kube.patch(
        DEPLOYMENTS,
        NAMESPACE,
        "undo",
        {"spec": {"template": {"metadata": {"annotations": {ANNOTATION_CONFIG_HASH: edited}}}}},
        field_manager="kubectl-edit",
    )
    settled(kube, DEPLOYMENTS, "undo")
    writes = applies(kube)
    time.sleep(QUIET)
    assert applies(kube) - writes == 0
    assert config_hash(kube, DEPLOYMENTS, "undo") == edited
    change_bundle(kube, conf, {"a": "5"})
    rolled_to_new_hash(kube, "undo", {h1, h2, h3, h4, edited})
    assert annotation_owners(kube, DEPLOYMENTS, "undo") == {FIELD_MANAGER: "Apply"}


def test_two_bundles_changed_together_give_one_rollout(kube: KubeClient, cbop: Cbop) -> None:
    new_bundle(kube, "pair-a", {"a": "1"})
    new_bundle(kube, "pair-b", {"b": "1"})
    kube.create(DEPLOYMENTS, NAMESPACE, workload("Deployment", "pair", ["pair-a", "pair-b"]))
    uid = settled(kube, DEPLOYMENTS, "pair")
    before = wait_for(
        lambda: revisions(kube, NAMESPACE, "Deployment", uid), WAIT, message="ReplicaSets"
    )
    writes = applies(kube)

    gen_a = change_bundle(kube, "pair-a", {"a": "2"})
    gen_b = change_bundle(kube, "pair-b", {"b": "2"})
    wait_for(lambda: ready(kube, NAMESPACE, "pair-a", gen_a), WAIT, message="pair-a applied")
    wait_for(lambda: ready(kube, NAMESPACE, "pair-b", gen_b), WAIT, message="pair-b applied")
    settled(kube, DEPLOYMENTS, "pair")  # the digest of both new contents
    time.sleep(QUIET)
    assert applies(kube) - writes == 1
    after = revisions(kube, NAMESPACE, "Deployment", uid)
    assert len(after) == len(before) + 1
    changed = workload_events(kube, "pair", "ConfigChanged")
    assert any("ConfigBundle(s) pair-a, pair-b changed" in e["message"] for e in changed)


def test_an_immutable_bundle_replaced_rolls_once(kube: KubeClient, cbop: Cbop) -> None:
    """The ConfigMap is deleted and recreated: both events are coalesced into one write."""
    new_bundle(kube, "frozen", {"v": "1"}, immutable=True)
    kube.create(DEPLOYMENTS, NAMESPACE, workload("Deployment", "frozen-app", ["frozen"]))
    uid = settled(kube, DEPLOYMENTS, "frozen-app")
    before = wait_for(
        lambda: revisions(kube, NAMESPACE, "Deployment", uid), WAIT, message="ReplicaSets"
    )
    old_uid = kube.get(CONFIGMAPS, NAMESPACE, "frozen")["metadata"]["uid"]
    writes = applies(kube)

    generation = change_bundle(kube, "frozen", {"v": "2"}, immutable=True)
    wait_for(lambda: ready(kube, NAMESPACE, "frozen", generation), WAIT, message="replaced")
    assert kube.get(CONFIGMAPS, NAMESPACE, "frozen")["metadata"]["uid"] != old_uid
    settled(kube, DEPLOYMENTS, "frozen-app")
    time.sleep(QUIET)
    assert applies(kube) - writes == 1
    assert len(revisions(kube, NAMESPACE, "Deployment", uid)) == len(before) + 1


def test_a_paused_deployment_is_not_touched_until_resumed(kube: KubeClient, cbop: Cbop) -> None:
    new_bundle(kube, "held", {"v": "1"})
    kube.create(DEPLOYMENTS, NAMESPACE, workload("Deployment", "held-app", ["held"]))
    settled(kube, DEPLOYMENTS, "held-app")
    first = config_hash(kube, DEPLOYMENTS, "held-app")
    kube.patch(DEPLOYMENTS, NAMESPACE, "held-app", {"spec": {"paused": True}})
    writes = applies(kube)

    generation = change_bundle(kube, "held", {"v": "2"})
    wait_for(lambda: ready(kube, NAMESPACE, "held", generation), WAIT, message="held applied")
    paused = wait_for(
        lambda: workload_events(kube, "held-app", "RolloutPaused"), WAIT, message="RolloutPaused"
    )
    assert "ConfigBundle(s) held" in paused[0]["message"]
    time.sleep(QUIET)
    assert config_hash(kube, DEPLOYMENTS, "held-app") == first
    assert applies(kube) - writes == 0

    kube.patch(DEPLOYMENTS, NAMESPACE, "held-app", {"spec": {"paused": False}})
    settled(kube, DEPLOYMENTS, "held-app")
    assert config_hash(kube, DEPLOYMENTS, "held-app") != first
    assert applies(kube) - writes == 1


def test_removing_the_label_stops_rollouts_and_leaves_the_annotation(
    kube: KubeClient, cbop: Cbop
) -> None:
    new_bundle(kube, "leaving", {"v": "1"})
    kube.create(DEPLOYMENTS, NAMESPACE, workload("Deployment", "leaving-app", ["leaving"]))
    uid = settled(kube, DEPLOYMENTS, "leaving-app")
    first = config_hash(kube, DEPLOYMENTS, "leaving-app")
    before = revisions(kube, NAMESPACE, "Deployment", uid)
    kube.patch(
        DEPLOYMENTS, NAMESPACE, "leaving-app", {"metadata": {"labels": {LABEL_ROLLOUT: None}}}
    )
    writes = applies(kube)

    generation = change_bundle(kube, "leaving", {"v": "2"})
    wait_for(lambda: ready(kube, NAMESPACE, "leaving", generation), WAIT, message="applied")
    time.sleep(QUIET)
    assert config_hash(kube, DEPLOYMENTS, "leaving-app") == first
    assert applies(kube) - writes == 0
    assert revisions(kube, NAMESPACE, "Deployment", uid) == before


def _deployment(name: str, *, volume: str | None = None, optional: str | None = None) -> Any:
    """A labelled Deployment mounting ConfigMap ``volume`` and reading ConfigMap
    ``optional`` through an optional ``envFrom`` (each only when given)."""
    container: dict[str, Any] = {"name": "app", "image": "registry.invalid/app:1"}
    pod: dict[str, Any] = {"containers": [container]}
    if volume:
        pod["volumes"] = [{"name": "conf", "configMap": {"name": volume}}]
    if optional:
        container["envFrom"] = [{"configMapRef": {"name": optional, "optional": True}}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {LABEL_ROLLOUT: "true"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
        },
    }


def test_an_upgrade_from_0_2_0_rolls_nothing_and_records_each_missing_baseline_once(
    plane: ControlPlane, kube: KubeClient, cbop: Cbop, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Release 0.2.0's operator baselines ``seen`` and rolls ``rolled``, and writes
    nothing to ``later`` and ``back`` (an optional ConfigMap not there yet) nor to
    ``bare`` (no ConfigMap at all). This checkout's operator, in its place, writes the
    baseline of nothing on those three (three applies), nothing to the other two and
    nothing after a restart; the ConfigMap that then appears rolls ``later`` once. Rolled
    back to 0.2.0, the operator rolls ``back`` when its ConfigMap appears.

    In a namespace of its own, with the module's cbop quiet (its workloads are settled)."""
    ns = "rollout-upgrade"
    old_src = release_tree("v0.2.0", tmp_path_factory.mktemp("v0.2.0")) / "src"
    logs = tmp_path_factory.mktemp("upgrade-logs")
    runs = iter(range(1, 10))

    def start(release: str) -> Operator:
        env = {"PYTHONPATH": str(old_src)} if release == "0.2.0" else {}
        op = Operator(
            plane.kubeconfig_path,
            [ns],
            args=["--rollout", "--resync-period", "2s"],
            log_path=logs / f"cbop-{release}-{next(runs)}.log",
            env=env,
        )
        return op.wait_ready(WAIT)

    def stop(op: Operator) -> None:
        assert op.stop() == 0, op.logs()[-4000:]

    def get(name: str) -> dict[str, Any]:
        return kube.get(DEPLOYMENTS, ns, name)

    def hash_of(name: str) -> str:
        return str((get(name)["spec"]["template"]["metadata"].get("annotations") or {}).get(
            ANNOTATION_CONFIG_HASH, ""
        ))  # fmt: skip

    def label(name: str) -> str:
        return str(get(name)["metadata"]["labels"].get(LABEL_CONFIG_BASELINE, ""))

    def bundle_ready(name: str, data: dict[str, str]) -> None:
        kube.create(CONFIGBUNDLES, ns, bundle(name, {"data": data}))
        wait_for(lambda: ready(kube, ns, name, 1), WAIT, message=f"bundle {name} Ready")

    kube.create(NAMESPACES, None, {"metadata": {"name": ns}})
    old = start("0.2.0")
    bundle_ready("up-seen", {"v": "1"})
    bundle_ready("up-roll", {"v": "1"})
    for manifest in (
        _deployment("seen", volume="up-seen"),
        _deployment("rolled", volume="up-roll"),
        _deployment("later", optional="up-later"),
        _deployment("back", optional="up-back"),
        _deployment("bare"),
    ):
        kube.create(DEPLOYMENTS, ns, manifest)
    wait_for(lambda: label("seen") and label("rolled"), WAIT, message="0.2.0's baselines")
    set_spec(kube, ns, "up-roll", {"data": {"v": "2"}})
    wait_for(lambda: hash_of("rolled"), WAIT, message="0.2.0 rolling 'rolled'")
    time.sleep(QUIET)
    stop(old)
    unseen = ("later", "back", "bare")
    assert [label(n) for n in unseen] == ["", "", ""]  # 0.2.0 recorded none of them
    before = {n: (label(n), hash_of(n), get(n)["metadata"]["generation"]) for n in
              ("seen", "rolled", *unseen)}  # fmt: skip
    assert before["rolled"][2] == 2
    writes = applies(kube)

    new = start("new")
    nothing = baseline_value(config_digest(()))
    wait_for(
        lambda: all(label(n) == nothing for n in unseen), WAIT, message="the baselines of nothing"
    )
    time.sleep(QUIET)
    assert applies(kube) - writes == 3  # one label each, nothing to 'seen' and 'rolled'
    for name, (was_label, was_hash, generation) in before.items():
        assert get(name)["metadata"]["generation"] == generation, name
        assert hash_of(name) == was_hash, name
        if name not in unseen:
            assert label(name) == was_label, name
    stop(new)
    new = start("new")
    time.sleep(QUIET)
    assert applies(kube) - writes == 3  # a restart writes nothing
    assert new.metrics()['cbop_rollouts_total{kind="Deployment"}'] == 0

    bundle_ready("up-later", {"LEVEL": "debug"})
    wait_for(lambda: hash_of("later"), WAIT, message="'later' rolled")
    time.sleep(QUIET)
    assert applies(kube) - writes == 4
    assert get("later")["metadata"]["generation"] == 2
    stop(new)

    old = start("0.2.0")
    bundle_ready("up-back", {"LEVEL": "debug"})
    wait_for(lambda: hash_of("back"), WAIT, message="'back' rolled by 0.2.0")
    time.sleep(QUIET)
    stop(old)
    assert applies(kube) - writes == 5
    assert get("back")["metadata"]["generation"] == 2
    assert [get(n)["metadata"]["generation"] for n in ("seen", "rolled", "bare")] == [1, 2, 1]


def test_resyncs_and_a_restart_write_nothing_to_workloads(kube: KubeClient, cbop: Cbop) -> None:
    """Every workload of the module is in sync: three resyncs (2 s), a restart of cbop
    and its initial list give no apply; the debug log shows they were reconciled."""
    deployments = [d["metadata"]["name"] for d in kube.list(DEPLOYMENTS, NAMESPACE)["items"]]
    assert len(deployments) >= 4
    for resource in (DEPLOYMENTS, STATEFULSETS, DAEMONSETS):
        for item in kube.list(resource, NAMESPACE)["items"]:
            labels = item["metadata"].get("labels") or {}
            if labels.get(LABEL_ROLLOUT) == "true" and not item["spec"].get("paused"):
                settled(kube, resource, item["metadata"]["name"])
    writes = applies(kube)
    time.sleep(QUIET)
    assert applies(kube) - writes == 0

    cbop.restart()

    def reconciled() -> set[str]:
        return {
            f"{r.get('controller')}:{r.get('name')}"
            for r in cbop.op.log_records()
            if r.get("event") == "rollout: nothing to do"
        }

    expected = {"rollout-deployment:web", "rollout-statefulset:db", "rollout-daemonset:agent"}
    wait_for(lambda: expected <= reconciled(), WAIT, message="the restart's reconciles")
    time.sleep(QUIET)
    assert applies(kube) - writes == 0
    assert cbop.rollouts("Deployment") == 0
