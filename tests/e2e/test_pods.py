"""cbop as real pods: the shipped manifests on a real node, scraped by a real Prometheus.

A control plane made for nodes and one :class:`cbop_testing.envtest.node.Node` (kubelet,
containerd 2, runc, in a network namespace of its own) run ``kubectl apply -k`` of a
kustomization whose only change to ``manifests/`` is the image (``cbop:dev``, built by
``make image``). Everything else is the shipped Deployment: two replicas, the
securityContext, the resource limits, the probes the kubelet acts on, and in-cluster
configuration from the projected service-account token.

Then Debian's Prometheus, inside the node's network namespace, scrapes both pods with a
scrape configuration derived from ``manifests/monitoring/service_monitor.yaml`` (HTTPS
with the token of a ServiceAccount bound to ``cbop-metrics-reader``, as the shipped
``--metrics-secure`` needs), loads the rules of ``prometheus_rule.yaml`` and answers
every query of the shipped dashboard.

The tests of this module share the cluster and run in file order.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch
from urllib3.exceptions import ProtocolError

from cbop.kube import KubeClient
from cbop.metrics.secure import self_signed_certificate
from cbop_testing.envtest import ControlPlane
from cbop_testing.envtest.node import Node
from tests.e2e.helm import CHART, helm_binary
from tests.e2e.images import BUILD_TIMEOUT, cbop_image, pause_image, podman_env
from tests.e2e.revisions import configmap_volumes, revision_of, wait_policy_effective

pytestmark = pytest.mark.node

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
NAMESPACE = "cbop-system"
SELECTOR = "app.kubernetes.io/name=cbop,app.kubernetes.io/component=controller"
#: The shipped Lease duration (cbop's --leader-election-lease-duration default), seconds.
LEASE_DURATION = 15.0
#: The shipped retry period (--leader-election-retry-period default), seconds.
RETRY_PERIOD = 2.0
#: The port of /metrics (HTTPS with --metrics-secure) in the shipped Deployment.
METRICS_PORT = 8080
#: Where the scrapers' ServiceAccounts live.
SCRAPERS = "monitoring"
#: Generous bounds for waits on a shared two-core machine (seconds).
WAIT = 180.0
SETUP_TIMEOUT = BUILD_TIMEOUT + 600

#: What the tests measured, printed at the end of the module (``-s`` or a failure shows it).
MEASURED: dict[str, float] = {}


class Cluster:
    """The control plane, the node, and kubectl against them."""

    def __init__(self, control_plane: ControlPlane, node: Node, workdir: Path) -> None:
        self.cp = control_plane
        self.node = node
        self.workdir = workdir

    def kubectl(self, *args: str, check: bool = True, stdin: str | None = None) -> str:
        result = subprocess.run(
            [str(self.cp.binaries.kubectl), f"--kubeconfig={self.cp.kubeconfig_path}", *args],
            capture_output=True,
            text=True,
            input=stdin,
            timeout=120,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def apply_manifests(self, tag: str) -> None:
        """``kubectl apply -k`` of manifests/ with only the image's tag changed."""
        overlay = self.workdir / f"overlay-{tag}"
        overlay.mkdir(exist_ok=True)
        (overlay / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": [os.path.relpath(MANIFESTS, overlay)],
                    "images": [{"name": "cbop", "newName": "cbop", "newTag": tag}],
                }
            )
        )
        self.kubectl("apply", "-k", str(overlay))

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get("pods", "-n", NAMESPACE, "-l", SELECTOR)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def ready_pods(self) -> list[dict[str, Any]]:
        return [p for p in self.pods() if _ready(p)]

    def lease_holder(self) -> str:
        lease = self.get("lease", "-n", NAMESPACE, "cbop-leader")
        return str(lease["spec"].get("holderIdentity") or "")

    def leader_pod(self) -> str:
        """The name of the pod whose identity holds the Lease (``<pod>_<suffix>``)."""
        holder = self.lease_holder()
        names = [p["metadata"]["name"] for p in self.pods()]
        owners = [n for n in names if holder == n or holder.startswith(n + "_")]
        return owners[0] if owners else ""

    def logs(self) -> str:
        parts = []
        for pod in self.get("pods", "-n", NAMESPACE, "-l", SELECTOR)["items"]:
            name = pod["metadata"]["name"]
            parts.append(f"--- {name}\n{self.node.pod_log(NAMESPACE, name, 'manager')[-4000:]}")
        return "\n".join(parts)


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return pod.get("status", {}).get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions
    )


def wait_until(probe: Any, timeout: float, what: str, cluster: Cluster | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{cluster.logs()}\n{cluster.node.tail_logs(20)}" if cluster else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{extra}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    image = cbop_image()
    pause = pause_image()
    workdir = tmp_path_factory.mktemp("pods")
    with (
        ControlPlane(for_nodes=True, workdir=workdir / "cp") as cp,
        Node(cp, images=[image], pause_image=pause, workdir=tmp_path_factory.mktemp("n")) as node,
    ):
        MEASURED["node start: images loaded (s)"] = node.startup_phases["images"]
        MEASURED["node start: kubelet to Ready node (s)"] = node.startup_phases["kubelet"]
        yield Cluster(cp, node, workdir)
    for key, value in MEASURED.items():
        print(f"measured: {key}: {value:.1f}")


@pytest.fixture(scope="module")
def deployed(cluster: Cluster) -> Cluster:
    began = time.monotonic()
    cluster.apply_manifests("dev")
    wait_until(lambda: len(cluster.ready_pods()) == 2, WAIT, "two Ready cbop pods", cluster)
    MEASURED["apply -k to two Ready pods (s)"] = time.monotonic() - began
    return cluster


# ------------------------------------------------------------------ the pods


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_apply_gives_two_ready_pods_running_the_shipped_pod_spec(deployed: Cluster) -> None:
    shipped = yaml.safe_load((MANIFESTS / "deployment.yaml").read_text())
    container = shipped["spec"]["template"]["spec"]["containers"][0]
    pods = deployed.ready_pods()
    assert len(pods) == 2
    for pod in pods:
        (running,) = pod["spec"]["containers"]
        assert running["image"] == "cbop:dev"
        assert running["securityContext"] == container["securityContext"]
        assert running["resources"] == container["resources"]
        status = pod["status"]["containerStatuses"][0]
        assert status["ready"] is True
        assert status["restartCount"] == 0, deployed.logs()
        # The projected service-account token volume that in-cluster config reads.
        mounts = {m["mountPath"] for m in running["volumeMounts"]}
        assert "/var/run/secrets/kubernetes.io/serviceaccount" in mounts


def _container_pid(cluster: Cluster, pod: dict[str, Any]) -> int:
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    for line in cluster.node.ctr("tasks", "ls").splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == container_id:
            return int(pid)
    raise AssertionError(f"no task for container {container_id}")


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_the_kernel_enforces_the_shipped_security_context_and_limits(deployed: Cluster) -> None:
    for pod in deployed.ready_pods():
        pid = _container_pid(deployed, pod)
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        assert status["Uid"].split()[:2] == ["65532", "65532"]
        assert status["Gid"].split()[:2] == ["65532", "65532"]
        assert int(status["CapEff"], 16) == 0
        assert int(status["CapBnd"], 16) == 0
        assert status["NoNewPrivs"].strip() == "1"
        assert status["Seccomp"].strip() == "2"  # filter mode: RuntimeDefault
        root = next(
            line.split()
            for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
            if line.split()[4] == "/"
        )
        assert "ro" in root[5].split(","), root
        # Memory and CPU limits from the cgroup the kubelet made (cgroup v1 or v2).
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        memory = next(
            (line.split(":", 2)[2] for line in cgroup.splitlines() if ":memory:" in line), None
        )
        if memory is not None:
            limit = Path(f"/sys/fs/cgroup/memory{memory}/memory.limit_in_bytes").read_text()
            assert int(limit) == 256 * 1024 * 1024
        else:
            path = cgroup.strip().split(":", 2)[2]
            assert Path(f"/sys/fs/cgroup{path}/memory.max").read_text().strip() == "268435456"


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_one_pod_holds_the_lease_and_reconciles_a_bundle(deployed: Cluster) -> None:
    leader = wait_until(deployed.leader_pod, WAIT, "a pod holding the Lease", deployed)
    assert leader in {p["metadata"]["name"] for p in deployed.ready_pods()}
    _create_bundle(deployed, "first", {"key": "v1"})
    wait_until(lambda: _configmap_data(deployed, "first-cm") == {"key": "v1"}, WAIT, "a CM")


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_kubectl_logs_and_exec_reach_the_pods_through_the_api_server(deployed: Cluster) -> None:
    """kube-apiserver dials the kubelet inside the node's namespace (its egress proxy),
    authenticated by its kubelet client certificate and authorized by the kubelet."""
    for pod in deployed.ready_pods():
        name = pod["metadata"]["name"]
        logs = deployed.kubectl("logs", "-n", NAMESPACE, name, "-c", "manager")
        # What the kubelet wrote to the container's log file, line by line.
        written = deployed.node.pod_log(NAMESPACE, name, "manager")
        assert logs.splitlines(), f"no log from {name}"
        assert all(line in written for line in logs.splitlines()[:20])
        version = deployed.kubectl(
            "exec", "-n", NAMESPACE, name, "-c", "manager", "--", "cbop", "--version"
        )
        assert version.startswith("cbop "), version
        echoed = deployed.kubectl(
            "exec",
            "-i",
            "-n",
            NAMESPACE,
            name,
            "-c",
            "manager",
            "--",
            "python3",
            "-c",
            "import sys; print(sys.stdin.read().upper())",
            stdin="through the api server",
        )
        assert echoed == "THROUGH THE API SERVER\n"


def _create_bundle(cluster: Cluster, name: str, data: dict[str, str]) -> None:
    cluster.kubectl("create", "namespace", "apps", check=False)
    bundle = {
        "apiVersion": "cbop.dev/v1beta1",
        "kind": "ConfigBundle",
        "metadata": {"name": name, "namespace": "apps"},
        "spec": {"configMapName": f"{name}-cm", "data": data},
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(bundle))


def _configmap_data(cluster: Cluster, name: str, namespace: str = "apps") -> dict[str, str] | None:
    out = cluster.kubectl("get", "configmap", "-n", namespace, name, "-o", "json", check=False)
    return json.loads(out).get("data") if out else None


# ------------------------------------------------------------------ rollout

#: The namespace of the rolled workload (its own, so the other tests see nothing of it).
ROLLOUT_NAMESPACE = "rollout-pods"
#: What the rolled container runs: the bundle's value as an environment variable and as a
#: mounted file, each printed once at start; then it sleeps until SIGTERM (PID 1 has no
#: default SIGTERM action, so it installs one).
ROLLOUT_PROGRAM = """\
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("env greeting=" + os.environ["GREETING"], flush=True)
with open("/etc/app/greeting") as f:
    print("file greeting=" + f.read(), flush=True)
while True:
    time.sleep(3600)
"""
RESTRICTED_CONTAINER = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _rollout_objects(greeting: str) -> list[dict[str, Any]]:
    """A ConfigBundle and a Deployment labelled for rollout that reads its ConfigMap."""
    bundle = {
        "apiVersion": "cbop.dev/v1beta1",
        "kind": "ConfigBundle",
        "metadata": {"name": "greeting", "namespace": ROLLOUT_NAMESPACE},
        "spec": {"configMapName": "greeting-cm", "data": {"greeting": greeting}},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "greeter",
            "namespace": ROLLOUT_NAMESPACE,
            "labels": {"cbop.dev/rollout": "true"},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "greeter"}},
            "template": {
                "metadata": {"labels": {"app": "greeter"}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {
                            "name": "greeter",
                            # Loaded into the node's containerd; there is no registry.
                            "image": "cbop:dev",
                            "imagePullPolicy": "Never",
                            "command": ["python3", "-c", ROLLOUT_PROGRAM],
                            "env": [
                                {
                                    "name": "GREETING",
                                    "valueFrom": {
                                        "configMapKeyRef": {
                                            "name": "greeting-cm",
                                            "key": "greeting",
                                        }
                                    },
                                }
                            ],
                            "volumeMounts": [{"name": "app", "mountPath": "/etc/app"}],
                            "securityContext": RESTRICTED_CONTAINER,
                            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                        }
                    ],
                    "volumes": [{"name": "app", "configMap": {"name": "greeting-cm"}}],
                },
            },
        },
    }
    return [bundle, deployment]


class Greeter:
    """Reads the rolled Deployment, its ReplicaSets and its pods."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def config_hash(self) -> str:
        deployment = self.cluster.get("deployment", "-n", ROLLOUT_NAMESPACE, "greeter")
        annotations = deployment["spec"]["template"]["metadata"].get("annotations") or {}
        return str(annotations.get("cbop.dev/config-hash", ""))

    def baseline(self) -> str:
        deployment = self.cluster.get("deployment", "-n", ROLLOUT_NAMESPACE, "greeter")
        return str((deployment["metadata"].get("labels") or {}).get("cbop.dev/config-baseline", ""))

    def settled(self) -> bool:
        """The Deployment controller has rolled out the current template to one pod."""
        deployment = self.cluster.get("deployment", "-n", ROLLOUT_NAMESPACE, "greeter")
        status = deployment.get("status", {})
        return (
            status.get("observedGeneration") == deployment["metadata"]["generation"]
            and status.get("replicas") == 1
            and status.get("updatedReplicas") == 1
            and status.get("availableReplicas") == 1
            and len(self.pods()) == 1
        )

    def replicasets(self) -> set[str]:
        items = self.cluster.get("replicasets", "-n", ROLLOUT_NAMESPACE, "-l", "app=greeter")
        return {r["metadata"]["name"] for r in items["items"]}

    def pods(self) -> list[dict[str, Any]]:
        """Every pod of the Deployment, terminating ones included."""
        items: list[dict[str, Any]] = self.cluster.get(
            "pods", "-n", ROLLOUT_NAMESPACE, "-l", "app=greeter"
        )["items"]
        return items

    def running(self) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods()
            if not p["metadata"].get("deletionTimestamp")
            and p.get("status", {}).get("phase") == "Running"
        ]

    def log(self, pod: dict[str, Any]) -> str:
        return self.cluster.node.pod_log(ROLLOUT_NAMESPACE, pod["metadata"]["name"], "greeter")

    def greets(self, pod: dict[str, Any], greeting: str) -> bool:
        log = self.log(pod)
        return f"env greeting={greeting}" in log and f"file greeting={greeting}" in log


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_a_bundle_change_restarts_the_pods_of_a_labelled_deployment_with_the_new_content(
    deployed: Cluster,
) -> None:
    cluster = deployed
    # Pods here must meet the restricted Pod Security Standard, as in cbop-system.
    cluster.kubectl("create", "namespace", ROLLOUT_NAMESPACE)
    cluster.kubectl(
        "label", "namespace", ROLLOUT_NAMESPACE, "pod-security.kubernetes.io/enforce=restricted"
    )
    greeter = Greeter(cluster)
    try:
        bundle, deployment = _rollout_objects("hello-v1")
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(bundle))
        wait_until(
            lambda: (
                _configmap_data(cluster, "greeting-cm", ROLLOUT_NAMESPACE)
                == {"greeting": "hello-v1"}
            ),
            WAIT,
            "the bundle's ConfigMap",
            cluster,
        )
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(deployment))
        # cbop records the new Deployment's baseline, a label, and does not roll it (its
        # pod starts with the first content); wait until it has settled on one running
        # pod that started with the first content.
        wait_until(greeter.baseline, WAIT, "the baseline label", cluster)
        wait_until(greeter.settled, WAIT, "the Deployment to settle on one pod", cluster)
        (old,) = wait_until(greeter.running, WAIT, "the first pod Running", cluster)
        wait_until(lambda: greeter.greets(old, "hello-v1"), WAIT, "the first pod's greeting")
        first_hash = greeter.config_hash()
        assert first_hash == ""
        old_replicasets = greeter.replicasets()
        assert len(old_replicasets) == 1

        began = time.monotonic()
        patch = json.dumps({"spec": {"data": {"greeting": "hello-v2"}}})
        cluster.kubectl(
            "patch", "configbundle", "-n", ROLLOUT_NAMESPACE, "greeting", "--type=merge", "-p",
            patch,
        )  # fmt: skip
        new_hash = wait_until(
            lambda: (h := greeter.config_hash()) != first_hash and h,
            WAIT,
            "cbop to write a new config-hash",
            cluster,
        )
        MEASURED["rollout: bundle change to new config-hash (s)"] = time.monotonic() - began
        assert new_hash.startswith("sha256:"), new_hash
        wait_until(
            lambda: greeter.replicasets() - old_replicasets, WAIT, "a new ReplicaSet", cluster
        )

        def new_pod() -> dict[str, Any] | None:
            fresh = [p for p in greeter.running() if p["metadata"]["uid"] != old["metadata"]["uid"]]
            return fresh[0] if fresh else None

        new = wait_until(new_pod, WAIT, "a new pod Running", cluster)
        MEASURED["rollout: bundle change to new pod Running (s)"] = time.monotonic() - began
        assert new["metadata"]["annotations"]["cbop.dev/config-hash"] == new_hash
        wait_until(lambda: greeter.greets(new, "hello-v2"), WAIT, "the new pod's greeting")
        old_uid = old["metadata"]["uid"]
        wait_until(
            lambda: all(p["metadata"]["uid"] != old_uid for p in greeter.pods()),
            WAIT,
            "the old pod to go",
            cluster,
        )
        wait_until(greeter.settled, WAIT, "the Deployment to settle on the new pod", cluster)
        (pod,) = greeter.running()
        assert pod["metadata"]["uid"] == new["metadata"]["uid"]
        assert "hello-v1" not in greeter.log(new)
        events = cluster.get(
            "events", "-n", ROLLOUT_NAMESPACE, "--field-selector",
            "involvedObject.kind=Deployment,involvedObject.name=greeter,reason=ConfigChanged",
        )["items"]  # fmt: skip
        assert any("greeting" in e["message"] for e in events), events
    finally:
        cluster.kubectl("delete", "namespace", ROLLOUT_NAMESPACE, "--wait=false", check=False)


# ------------------------------------------------------------------ revisions

#: The namespace of the Deployment whose pods read revisions.
REVISIONS_NAMESPACE = "revision-pods"
#: What the reading container runs: nothing but waiting for SIGTERM; the test reads its
#: files with `kubectl exec`.
WAIT_PROGRAM = """\
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(3600)
"""
READ_PROGRAM = "import sys; print(open(sys.argv[1]).read(), end='')"


def _reader_deployment() -> dict[str, Any]:
    """A labelled Deployment of no replicas mounting ConfigMap ``pinned-cm`` (a bundle's,
    with revisions) at /etc/pinned and ``control-cm`` (not cbop's) at /etc/control.

    ``minReadySeconds`` keeps a new pod unavailable for longer than the test, and
    ``maxUnavailable: 0`` keeps every old pod until a new one is available: during a
    rollout, one pod of each ReplicaSet runs.
    """
    labels = {"app": "reader"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "reader",
            "namespace": REVISIONS_NAMESPACE,
            "labels": {"cbop.dev/rollout": "true"},
        },
        "spec": {
            "replicas": 0,
            "minReadySeconds": 600,
            "progressDeadlineSeconds": 1200,
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {
                            "name": "reader",
                            "image": "cbop:dev",
                            "imagePullPolicy": "Never",
                            "command": ["python3", "-c", WAIT_PROGRAM],
                            "volumeMounts": [
                                {"name": "pinned", "mountPath": "/etc/pinned"},
                                {"name": "control", "mountPath": "/etc/control"},
                            ],
                            "securityContext": RESTRICTED_CONTAINER,
                            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                        }
                    ],
                    "volumes": [
                        {"name": "pinned", "configMap": {"name": "pinned-cm"}},
                        # Optional: cbop's rollout cannot see that a required ConfigMap
                        # of someone else's exists, and records no baseline until it does.
                        {"name": "control", "configMap": {"name": "control-cm", "optional": True}},
                    ],
                },
            },
        },
    }


class Reader:
    """Reads the Deployment ``reader``, its pods, and the files they mount."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def config_hash(self) -> str:
        deployment = self.cluster.get("deployment", "-n", REVISIONS_NAMESPACE, "reader")
        annotations = deployment["spec"]["template"]["metadata"].get("annotations") or {}
        return str(annotations.get("cbop.dev/config-hash", ""))

    def running(self) -> list[dict[str, Any]]:
        items = self.cluster.get("pods", "-n", REVISIONS_NAMESPACE, "-l", "app=reader")["items"]
        return [
            p
            for p in items
            if not p["metadata"].get("deletionTimestamp")
            and p.get("status", {}).get("phase") == "Running"
        ]

    def read(self, pod: dict[str, Any], path: str) -> str:
        return self.cluster.kubectl(
            "exec", "-n", REVISIONS_NAMESPACE, pod["metadata"]["name"], "-c", "reader", "--",
            "python3", "-c", READ_PROGRAM, path,
        )  # fmt: skip

    def patch_bundle(self, greeting: str) -> None:
        self.cluster.kubectl(
            "patch", "configbundle", "-n", REVISIONS_NAMESPACE, "pinned", "--type=merge", "-p",
            json.dumps({"spec": {"data": {"greeting": greeting}}}),
        )  # fmt: skip

    def rolled(self, old: set[str]) -> str:
        found: str = wait_until(
            lambda: (h := self.config_hash()) not in old and h, WAIT, "a rollout", self.cluster
        )
        return found


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_old_pods_read_the_old_revision_while_new_pods_read_the_new(deployed: Cluster) -> None:
    """With the shipped admission policy (``manifests/revisions/``), a pod of the old
    ReplicaSet keeps reading the content its template was made for, while the kubelet
    updates the files of a plain ConfigMap in the same pod; a pod of the new ReplicaSet
    reads the new content; and after ``kubectl rollout undo`` a new pod of the old
    template reads the old content again."""
    cluster = deployed
    began = time.monotonic()
    cluster.kubectl("apply", "-k", str(MANIFESTS / "revisions"))
    with KubeClient.from_config(kubeconfig=str(cluster.cp.kubeconfig_path)) as kube:
        wait_policy_effective(kube, f"{REVISIONS_NAMESPACE}-probe", WAIT)
    cluster.kubectl("create", "namespace", REVISIONS_NAMESPACE)
    reader = Reader(cluster)
    try:
        bundle = {
            "apiVersion": "cbop.dev/v1beta1",
            "kind": "ConfigBundle",
            "metadata": {"name": "pinned", "namespace": REVISIONS_NAMESPACE},
            "spec": {
                "configMapName": "pinned-cm",
                "data": {"greeting": "v1"},
                "revisions": {"enabled": True},
            },
        }
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(bundle))
        cluster.kubectl(
            "create", "configmap", "control-cm", "-n", REVISIONS_NAMESPACE,
            "--from-literal=greeting=v1",
        )  # fmt: skip
        wait_until(
            lambda: _configmap_data(cluster, "pinned-cm", REVISIONS_NAMESPACE),
            WAIT,
            "the bundle's ConfigMap",
            cluster,
        )
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(_reader_deployment()))
        # Opted in with revisions on: pinned once, at the same content.
        h1 = reader.rolled({""})
        reader.patch_bundle("v2")
        h2 = reader.rolled({"", h1})
        cluster.kubectl("scale", "deployment/reader", "-n", REVISIONS_NAMESPACE, "--replicas=1")
        (old,) = wait_until(reader.running, WAIT, "the pod of the v2 template", cluster)
        assert reader.read(old, "/etc/pinned/greeting") == "v2"

        reader.patch_bundle("v3")
        cluster.kubectl(
            "patch", "configmap", "control-cm", "-n", REVISIONS_NAMESPACE, "--type=merge", "-p",
            json.dumps({"data": {"greeting": "v3"}}),
        )  # fmt: skip
        h3 = reader.rolled({"", h1, h2})

        def new_pod() -> dict[str, Any] | None:
            fresh = [p for p in reader.running() if p["metadata"]["uid"] != old["metadata"]["uid"]]
            return fresh[0] if fresh else None

        new = wait_until(new_pod, WAIT, "a pod of the new ReplicaSet Running", cluster)
        assert new["metadata"]["annotations"]["cbop.dev/config-hash"] == h3
        assert reader.read(new, "/etc/pinned/greeting") == "v3"
        assert reader.read(new, "/etc/control/greeting") == "v3"
        # The kubelet has updated the old pod's plain ConfigMap; its revision's file,
        # an immutable ConfigMap's, still holds what its template was made for.
        wait_until(
            lambda: reader.read(old, "/etc/control/greeting") == "v3",
            WAIT,
            "the kubelet to update the old pod's plain ConfigMap",
            cluster,
        )
        assert reader.read(old, "/etc/pinned/greeting") == "v2"
        assert old["metadata"]["uid"] in {p["metadata"]["uid"] for p in reader.running()}
        volumes = {p["metadata"]["uid"]: configmap_volumes(p)["pinned"] for p in reader.running()}
        pinned = cluster.get("configbundle", "-n", REVISIONS_NAMESPACE, "pinned")
        assert pinned["status"]["revision"] == revision_of("pinned-cm", {"greeting": "v3"})
        assert volumes == {
            old["metadata"]["uid"]: revision_of("pinned-cm", {"greeting": "v2"}),
            new["metadata"]["uid"]: revision_of("pinned-cm", {"greeting": "v3"}),
        }

        # An undo: the v2 template is back. A pod made of it now (the old one deleted)
        # reads v2 from its revision while the content is v3.
        cluster.kubectl("rollout", "undo", "deployment/reader", "-n", REVISIONS_NAMESPACE)
        wait_until(lambda: reader.config_hash() == h2, WAIT, "the undo", cluster)
        cluster.kubectl(
            "delete", "pod", "-n", REVISIONS_NAMESPACE, old["metadata"]["name"], "--wait=false"
        )

        def undone_pod() -> dict[str, Any] | None:
            fresh = [
                p
                for p in reader.running()
                if p["metadata"]["uid"] not in (old["metadata"]["uid"], new["metadata"]["uid"])
                and p["metadata"]["annotations"]["cbop.dev/config-hash"] == h2
            ]
            return fresh[0] if fresh else None

        again = wait_until(undone_pod, WAIT, "a new pod of the v2 template Running", cluster)
        assert reader.read(again, "/etc/pinned/greeting") == "v2"
        assert reader.read(again, "/etc/control/greeting") == "v3"
        assert reader.config_hash() == h2  # cbop does not roll the undo forward
        MEASURED["revisions: the test, policy applied to old and new files read (s)"] = (
            time.monotonic() - began
        )
    finally:
        cluster.kubectl("delete", "namespace", REVISIONS_NAMESPACE, "--wait=false", check=False)


# ------------------------------------------------------------------ failover


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_deleting_the_leader_pod_fails_over_and_the_deployment_replaces_it(
    deployed: Cluster,
) -> None:
    leader = wait_until(deployed.leader_pod, WAIT, "a leader", deployed)
    began = time.monotonic()
    # As `kubectl delete pod` does by default: SIGTERM, then cbop releases its Lease.
    deployed.kubectl("delete", "pod", "-n", NAMESPACE, leader, "--wait=false")
    # The standby, or the replacement the Deployment starts meanwhile, whichever asks first.
    wait_until(
        lambda: deployed.leader_pod() not in ("", leader), WAIT, "another pod to lead", deployed
    )
    failover = time.monotonic() - began
    MEASURED["failover after deleting the leader pod (s)"] = failover
    # The released Lease is taken at the standby's next attempt, well inside the Lease
    # duration that an unreleased Lease would need to expire.
    assert failover < LEASE_DURATION + 5, f"failover took {failover:.1f} s"
    wait_until(
        lambda: (
            len(deployed.ready_pods()) == 2
            and leader not in {p["metadata"]["name"] for p in deployed.pods()}
        ),
        WAIT,
        "the Deployment to replace the deleted pod",
        deployed,
    )
    # The new leader reconciles.
    _create_bundle(deployed, "after-failover", {"k": "v"})
    wait_until(lambda: _configmap_data(deployed, "after-failover-cm") == {"k": "v"}, WAIT, "CM")


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_a_sigkilled_leader_is_replaced_by_the_standby_once_its_lease_expires(
    deployed: Cluster,
) -> None:
    wait_until(lambda: len(deployed.ready_pods()) == 2, WAIT, "two Ready pods", deployed)
    leader = wait_until(deployed.leader_pod, WAIT, "a leader", deployed)
    holder = deployed.lease_holder()
    (standby,) = {p["metadata"]["name"] for p in deployed.ready_pods()} - {leader}
    pod = next(p for p in deployed.ready_pods() if p["metadata"]["name"] == leader)
    restarts = pod["status"]["containerStatuses"][0]["restartCount"]
    # No SIGTERM, no release: the process dies at once, as on an OOM kill or a crash.
    began = time.monotonic()
    os.kill(_container_pid(deployed, pod), signal.SIGKILL)
    wait_until(lambda: deployed.lease_holder() not in ("", holder), WAIT, "a new holder", deployed)
    failover = time.monotonic() - began
    MEASURED["failover after SIGKILL of the leader (s)"] = failover
    # The standby waits until it has seen the Lease unchanged for the lease duration on
    # its own clock (it last saw a renewal at most about two retry periods before the
    # kill), and takes it at its next attempt after that.
    assert LEASE_DURATION - 2.5 * RETRY_PERIOD < failover < LEASE_DURATION + 15, failover
    # A new identity leads: usually the standby, but the killed pod's restarted container
    # (a fresh candidate with its own lease-duration wait, begun when it first read the
    # Lease) can win when the kubelet restarts it within about a retry period of the kill
    # (the standby's last observed renewal can be that late). Either is a correct failover.
    new_leader = deployed.leader_pod()
    assert new_leader in (standby, leader), (deployed.lease_holder(), deployed.logs())
    MEASURED["failover after SIGKILL: the standby won (1) or the restarted container (0)"] = (
        1.0 if new_leader == standby else 0.0
    )
    _create_bundle(deployed, "after-sigkill", {"k": "v"})
    wait_until(lambda: _configmap_data(deployed, "after-sigkill-cm") == {"k": "v"}, WAIT, "CM")
    # The kubelet restarts the killed container in place; it rejoins as a standby.

    def restarted() -> bool:
        pods = {p["metadata"]["name"]: p for p in deployed.ready_pods()}
        return leader in pods and (
            pods[leader]["status"]["containerStatuses"][0]["restartCount"] > restarts
        )

    wait_until(restarted, WAIT, "the killed container to be restarted and Ready", deployed)
    assert deployed.leader_pod() == new_leader


class BundleWriter:
    """Changes one bundle's data every half second and records every ConfigMap change."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.written = 0
        self.seen: list[int] = []
        self._stop = threading.Event()
        self._writer = threading.Thread(target=self._write, daemon=True)
        self._api = config.new_client_from_config(config_file=str(cluster.cp.kubeconfig_path))  # type: ignore[no-untyped-call]
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]
        self._reader = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> BundleWriter:
        _create_bundle(self.cluster, self.name, {"n": "0"})
        wait_until(lambda: _configmap_data(self.cluster, f"{self.name}-cm") == {"n": "0"}, WAIT, "")
        self._reader.start()
        self._writer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._writer.join()
        final = {"n": str(self.written)}
        wait_until(
            lambda: _configmap_data(self.cluster, f"{self.name}-cm") == final,
            WAIT,
            f"the last write ({final}) to be reconciled",
            self.cluster,
        )
        wait_until(lambda: self.written in self.seen, 30, "the watch to see the last write")
        self._watch.stop()  # type: ignore[no-untyped-call]
        self._reader.join()
        self._api.close()

    def _write(self) -> None:
        while not self._stop.wait(0.5):
            self.written += 1
            patch = json.dumps({"spec": {"data": {"n": str(self.written)}}})
            self.cluster.kubectl(
                "patch", "configbundle", "-n", "apps", self.name, "--type=merge", "-p", patch
            )

    def _read(self) -> None:
        core = client.CoreV1Api(self._api)
        with contextlib.suppress(ProtocolError):  # the connection closed by stop()
            self._consume(core)

    def _consume(self, core: client.CoreV1Api) -> None:
        for event in self._watch.stream(  # type: ignore[no-untyped-call]
            core.list_namespaced_config_map,
            "apps",
            field_selector=f"metadata.name={self.name}-cm",
            timeout_seconds=600,
        ):
            if event["type"] == "MODIFIED":
                self.seen.append(int(event["object"].data["n"]))


def _rolled(cluster: Cluster, before: set[str]) -> bool:
    pods = cluster.ready_pods()
    names = {p["metadata"]["name"] for p in cluster.pods()}
    return len(pods) == 2 and len(names) == 2 and not names & before


def _roll(cluster: Cluster, action: Any, what: str) -> None:
    before = {p["metadata"]["name"] for p in cluster.pods()}
    with BundleWriter(cluster, what) as writer:
        began = time.monotonic()
        action()
        wait_until(lambda: _rolled(cluster, before), WAIT, f"{what}: both pods replaced", cluster)
        MEASURED[f"{what}: both pods replaced (s)"] = time.monotonic() - began
        wait_until(cluster.leader_pod, WAIT, "a new leader", cluster)
    # None lost: the last change arrived (checked on exit). None duplicated or stale:
    # every ConfigMap change carries a newer value than the one before; no replica
    # wrote an old spec after another had written a newer one.
    assert writer.seen, "no ConfigMap change was observed"
    assert writer.seen == sorted(set(writer.seen)), writer.seen
    assert writer.seen[-1] == writer.written


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_rollout_restart_rolls_both_pods_without_losing_or_repeating_a_reconcile(
    deployed: Cluster,
) -> None:
    _roll(
        deployed,
        lambda: deployed.kubectl("rollout", "restart", "deployment/cbop", "-n", NAMESPACE),
        "rollout-restart",
    )


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_a_new_image_tag_rolls_both_pods_without_losing_or_repeating_a_reconcile(
    deployed: Cluster,
) -> None:
    subprocess.run(
        ["podman", "tag", "localhost/cbop:dev", "localhost/cbop:dev-next"],
        check=True,
        env=podman_env(),
    )
    deployed.node.load_image("localhost/cbop:dev-next")
    _roll(deployed, lambda: deployed.apply_manifests("dev-next"), "image-tag-change")
    images = {p["spec"]["containers"][0]["image"] for p in deployed.pods()}
    assert images == {"cbop:dev-next"}


# ---------------------------------------------------------------- Prometheus


class Prometheus:
    """Debian's prometheus inside the node's network namespace, queried from the host."""

    def __init__(self, cluster: Cluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, config: dict[str, Any], rules: dict[str, Any]) -> None:
        (self.workdir / "rules.yaml").write_text(yaml.safe_dump(rules))
        config["rule_files"] = [str(self.workdir / "rules.yaml")]
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        log = (self.workdir / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            self.cluster.node.in_netns(
                "prometheus",
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                "--web.listen-address=127.0.0.1:9090",
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.port = self.cluster.node.forward_to_node("127.0.0.1", 9090)
        wait_until(self._ready, 60, "prometheus ready")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                return True
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{query}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)


#: The `for` of every shipped alert is replaced by this so that one can fire during
#: the test; everything else in the rules is as shipped.
ALERT_FOR = "10s"


def scrape_config_from_service_monitor(targets_file: Path, token_file: Path) -> dict[str, Any]:
    """The shipped ServiceMonitor's endpoint as a Prometheus scrape job.

    Path, scheme, interval, bearer token and TLS settings as the Prometheus Operator
    renders them. Debian's prometheus is built without Kubernetes service discovery, so
    the targets come from a file that :func:`discover_targets` fills from the
    EndpointSlices, as the Prometheus Operator's endpoints discovery would; and it runs
    outside a pod, so the ServiceMonitor's ``bearerTokenFile`` (Prometheus' own
    ServiceAccount token in a pod) is ``token_file``, holding the token of a
    ServiceAccount bound as the docs say.
    """
    monitor = _service_monitor()
    (endpoint,) = monitor["spec"]["endpoints"]
    job: dict[str, Any] = {
        "job_name": f"serviceMonitor/{monitor['metadata']['namespace']}/"
        f"{monitor['metadata']['name']}/0",
        "scrape_interval": endpoint["interval"],
        "metrics_path": endpoint["path"],
        "scheme": endpoint["scheme"],
        "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "5s"}],
    }
    if "bearerTokenFile" in endpoint:
        job["authorization"] = {"type": "Bearer", "credentials_file": str(token_file)}
    if "tlsConfig" in endpoint:
        tls = endpoint["tlsConfig"]
        assert set(tls) == {"insecureSkipVerify"}, tls  # a CA would need translating too
        job["tls_config"] = {"insecure_skip_verify": tls["insecureSkipVerify"]}
    return job


def _service_monitor() -> dict[str, Any]:
    monitor: dict[str, Any] = yaml.safe_load(
        (MANIFESTS / "monitoring" / "service_monitor.yaml").read_text()
    )
    return monitor


def discover_targets(cluster: Cluster, targets_file: Path) -> set[str]:
    """Write the ServiceMonitor's targets: ready endpoints of the Services it selects.

    Services in its namespaces whose labels match its selector; of their EndpointSlices,
    the port with the endpoint's name; each target labelled with namespace, pod and job
    (the Service's name), as the Prometheus Operator labels them. Returns the pod names.
    """
    spec = _service_monitor()["spec"]
    (endpoint,) = spec["endpoints"]
    groups = []
    pods = set()
    for namespace in spec["namespaceSelector"]["matchNames"]:
        selector = ",".join(f"{k}={v}" for k, v in spec["selector"]["matchLabels"].items())
        for service in cluster.get("services", "-n", namespace, "-l", selector)["items"]:
            name = service["metadata"]["name"]
            slices = cluster.get(
                "endpointslices", "-n", namespace, "-l", f"kubernetes.io/service-name={name}"
            )["items"]
            for eps in slices:
                port = next(p["port"] for p in eps["ports"] if p["name"] == endpoint["port"])
                for ep in eps.get("endpoints") or []:
                    if not ep.get("conditions", {}).get("ready"):
                        continue
                    pod = ep["targetRef"]["name"]
                    pods.add(pod)
                    groups.append(
                        {
                            "targets": [f"{ep['addresses'][0]}:{port}"],
                            "labels": {"namespace": namespace, "pod": pod, "job": name},
                        }
                    )
    targets_file.write_text(json.dumps(groups))
    return pods


def service_account_token(cluster: Cluster, name: str, *, metrics_reader: bool) -> str:
    """A token of ServiceAccount ``monitoring/<name>``, bound to cbop-metrics-reader or not."""
    cluster.kubectl("create", "namespace", SCRAPERS, check=False)
    cluster.kubectl("create", "serviceaccount", "-n", SCRAPERS, name, check=False)
    if metrics_reader:
        cluster.kubectl(
            "create", "clusterrolebinding", f"{name}-cbop-metrics",
            "--clusterrole=cbop-metrics-reader", f"--serviceaccount={SCRAPERS}:{name}",
            check=False,
        )  # fmt: skip
    return cluster.kubectl("create", "token", "-n", SCRAPERS, name, "--duration=3h").strip()


@pytest.fixture(scope="module")
def prometheus(deployed: Cluster) -> Iterator[Prometheus]:
    workdir = deployed.workdir / "prometheus"
    workdir.mkdir()
    targets = workdir / "targets.json"
    wait_until(lambda: len(discover_targets(deployed, targets)) == 2, WAIT, "two endpoints")
    token_file = workdir / "token"
    token_file.write_text(service_account_token(deployed, "prometheus", metrics_reader=True))
    job = scrape_config_from_service_monitor(targets, token_file)
    rule = yaml.safe_load((MANIFESTS / "monitoring" / "prometheus_rule.yaml").read_text())
    groups = rule["spec"]["groups"]
    for group in groups:
        for alert in group["rules"]:
            alert["for"] = ALERT_FOR
        group["interval"] = "5s"
    server = Prometheus(deployed, workdir)
    server.start({"global": {"evaluation_interval": "5s"}, "scrape_configs": [job]}, rule["spec"])
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_prometheus_scrapes_both_pods_through_the_service_monitor(
    deployed: Cluster, prometheus: Prometheus
) -> None:
    pods = {p["metadata"]["name"] for p in deployed.ready_pods()}

    def both_up() -> bool:
        up = prometheus.query("up")
        return {s["metric"].get("pod") for s in up if s["value"][1] == "1"} == pods

    wait_until(both_up, WAIT, f"up == 1 for {pods}", deployed)
    leaders = prometheus.query('leader_election_master_status{name="cbop-leader"} == 1')
    assert len(leaders) == 1, leaders
    # Every scrape is authorized: the token's decision is served from cbop's review cache
    # or made anew, never refused.
    answers = prometheus.query("sum by (code) (cbop_metrics_auth_requests_total)")
    assert {s["metric"]["code"] for s in answers} == {"200"}, answers
    durations = [float(s["value"][1]) for s in prometheus.query("scrape_duration_seconds")]
    MEASURED["scrape duration over HTTPS with auth, max of both pods (ms)"] = max(durations) * 1000


def _get_metrics(
    port: int, token: str | None, context: ssl.SSLContext | None = None
) -> tuple[int, str]:
    """GET /metrics over HTTPS with ``token`` if given.

    Without ``context`` the certificate is not verified (cbop's default is self-signed).
    """
    if context is None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_metrics_refuse_scrapes_without_a_token_or_without_the_reader_role(
    deployed: Cluster, prometheus: Prometheus
) -> None:
    reader = (prometheus.workdir / "token").read_text()
    outsider = service_account_token(deployed, "outsider", metrics_reader=False)
    pods = deployed.ready_pods()
    assert len(pods) == 2
    for pod in pods:
        port = deployed.node.forward_to_node(pod["status"]["podIP"], METRICS_PORT)
        assert _get_metrics(port, None)[0] == 401
        assert _get_metrics(port, "not-a-token")[0] == 401
        status, body = _get_metrics(port, outsider)
        assert status == 403, body
        assert f"system:serviceaccount:{SCRAPERS}:outsider" in body
        status, body = _get_metrics(port, reader)
        assert status == 200, body
        assert "controller_runtime_reconcile_total" in body
        # Plain HTTP gets nothing.
        with pytest.raises((urllib.error.URLError, OSError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30)
    # Measured, not asserted (timing): back-to-back requests with one token, as several
    # scrapers sharing a token would send them, mostly get the cached decision.
    began = time.monotonic()
    for _ in range(20):
        status, body = _get_metrics(port, reader)
        assert status == 200, body
    MEASURED["20 authorized GETs of /metrics in a row, mean (ms)"] = (
        (time.monotonic() - began) / 20 * 1000
    )
    for cached in ("true", "false"):
        MEASURED[f"authorized requests to that pod, decision cached={cached} (count)"] = _sample(
            body, "cbop_metrics_auth_requests_total", code="200", cached=cached
        )


def _sample(exposition: str, name: str, **labels: str) -> float:
    """The value of one sample in a text exposition (0 when absent)."""
    # prometheus_client writes the labels sorted by name.
    want = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    for line in exposition.splitlines():
        if line.startswith(want + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_every_dashboard_query_returns_data(deployed: Cluster, prometheus: Prometheus) -> None:
    # A drift correction, so that the drift panel has something to count.
    _create_bundle(deployed, "drifty", {"a": "1"})
    wait_until(lambda: _configmap_data(deployed, "drifty-cm") == {"a": "1"}, WAIT, "CM")
    deployed.kubectl(
        "patch", "configmap", "-n", "apps", "drifty-cm", "--type=merge", "-p",
        json.dumps({"data": {"a": "edited"}}),
    )  # fmt: skip
    wait_until(lambda: _configmap_data(deployed, "drifty-cm") == {"a": "1"}, WAIT, "drift fix")
    dashboard = json.loads((MANIFESTS / "monitoring" / "cbop-dashboard.json").read_text())
    queries = [
        target["expr"].replace("$__rate_interval", "1m")
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]
    assert queries

    def empty() -> list[str]:
        return [q for q in queries if not prometheus.query(q)]

    missing: list[str] = []
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        missing = empty()
        if not missing:
            break
        time.sleep(5)
    assert not missing, f"no data for: {missing}"


@pytest.mark.timeout(SETUP_TIMEOUT)
def test_the_alert_rules_load_and_no_leader_fires_when_cbop_loses_its_rbac(
    deployed: Cluster, prometheus: Prometheus
) -> None:
    shipped = yaml.safe_load((MANIFESTS / "monitoring" / "prometheus_rule.yaml").read_text())
    names = {r["alert"] for g in shipped["spec"]["groups"] for r in g["rules"]}
    loaded = {
        r["name"]
        for g in prometheus.api("rules")["groups"]
        for r in g["rules"]
        if r["type"] == "alerting" and r["health"] != "err"
    }
    assert loaded == names

    def firing() -> set[str]:
        alerts = prometheus.api("alerts")["alerts"]
        return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}

    assert "CbopNoLeader" not in firing()
    # cbop made to fail: its leader-election RBAC is removed, so no replica can renew or
    # acquire the Lease.
    binding = (MANIFESTS / "rbac" / "leader_election_role_binding.yaml").read_text()
    deployed.kubectl("delete", "rolebinding", "-n", NAMESPACE, "cbop-leader-election")
    try:
        wait_until(lambda: "CbopNoLeader" in firing(), WAIT, "CbopNoLeader to fire", deployed)
    finally:
        deployed.kubectl("apply", "-f", "-", stdin=binding)
    wait_until(lambda: "CbopNoLeader" not in firing(), WAIT, "CbopNoLeader to resolve", deployed)


# ---------------------------------------------------------------------- Helm


@pytest.mark.timeout(SETUP_TIMEOUT + BUILD_TIMEOUT)
def test_the_helm_chart_installs_on_the_node_and_uninstalls_to_the_crd(deployed: Cluster) -> None:
    helm = [
        helm_binary(),
        f"--kubeconfig={deployed.cp.kubeconfig_path}",
        "--namespace",
        "cbop-helm",
    ]
    # One operator at a time: the kustomize-installed one steps aside.
    deployed.kubectl("scale", "deployment/cbop", "-n", NAMESPACE, "--replicas=0")
    wait_until(lambda: not deployed.pods(), WAIT, "the kustomize pods to go", deployed)

    def run(*args: str) -> str:
        result = subprocess.run(
            [*helm, *args], capture_output=True, text=True, timeout=400, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    # The serving certificate mounted from a TLS Secret with its CA (metrics.certSecret),
    # as cert-manager would issue it for the name the chart's ServiceMonitor verifies.
    server_name = "cbop-metrics.cbop-helm.svc"
    cert, key = self_signed_certificate((server_name,))
    certs = deployed.workdir / "helm-certs"
    certs.mkdir()
    for name, data in (("tls.crt", cert), ("tls.key", key), ("ca.crt", cert)):
        (certs / name).write_bytes(data)
    deployed.kubectl("create", "namespace", "cbop-helm")
    deployed.kubectl(
        "create", "secret", "generic", "cbop-metrics-tls", "-n", "cbop-helm",
        "--type=kubernetes.io/tls", *(f"--from-file={f}" for f in sorted(certs.iterdir())),
    )  # fmt: skip

    began = time.monotonic()
    run("install", "cbop-helm", str(CHART), "--create-namespace", "--set", "image.tag=dev",
        "--set", "metrics.certSecret=cbop-metrics-tls",
        "--wait", "--timeout", "300s")  # fmt: skip
    MEASURED["helm install --wait to two Ready pods (s)"] = time.monotonic() - began
    pods = deployed.get("pods", "-n", "cbop-helm", "-l", "app.kubernetes.io/instance=cbop-helm")
    ready = [p for p in pods["items"] if _ready(p)]
    assert len(ready) == 2
    trusted = ssl.create_default_context(cadata=cert.decode())
    reader = service_account_token(deployed, "prometheus", metrics_reader=True)
    for pod in ready:
        port = deployed.node.forward_to_node(pod["status"]["podIP"], METRICS_PORT)
        with (
            socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
            trusted.wrap_socket(raw, server_hostname=server_name) as tls,
        ):
            assert tls.getpeercert(binary_form=True) == ssl.PEM_cert_to_DER_cert(cert.decode())
        status, body = _get_metrics(port, reader, trusted)
        assert status == 200, body
    _create_bundle(deployed, "via-helm", {"from": "helm"})
    wait_until(lambda: _configmap_data(deployed, "via-helm-cm") == {"from": "helm"}, WAIT, "CM")

    run("uninstall", "cbop-helm", "--wait", "--timeout", "300s")
    owned = "app.kubernetes.io/instance=cbop-helm"
    namespaced = "deployments,replicasets,pods,services,serviceaccounts,roles,rolebindings"

    def leftovers() -> list[str]:
        items = deployed.get(namespaced, "-n", "cbop-helm", "-l", owned)["items"]
        items += deployed.get("clusterroles,clusterrolebindings", "-l", owned)["items"]
        return [f"{o['kind']}/{o['metadata']['name']}" for o in items]

    # The pods go after their grace period (the garbage collector deletes them).
    wait_until(lambda: not leftovers(), WAIT, "every object of the release to go", deployed)
    remaining = {
        f"{o['kind']}/{o['metadata']['name']}"
        for o in deployed.get(
            "all,serviceaccounts,roles,rolebindings,leases,configmaps", "-n", "cbop-helm"
        )["items"]
    }
    # What Kubernetes puts in every namespace, and the Lease cbop itself made (released).
    assert remaining <= {
        "ServiceAccount/default",
        "ConfigMap/kube-root-ca.crt",
        "Lease/cbop-leader",
    }, remaining
    deployed.kubectl("get", "crd", "configbundles.cbop.dev")
