"""The Helm chart (charts/cbop): lint-clean, and rendering what manifests/ holds.

Installing it on a real node is in tests/e2e/test_pods.py.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from cbop import __version__
from tests.e2e.helm import BUILD_TIMEOUT, CHART, REPO, helm_binary


def _render(*values: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [helm_binary(), "template", "cbop", str(CHART), "--namespace", "cbop-system", *values],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [o for o in yaml.safe_load_all(result.stdout) if o]


def _kustomize() -> list[dict[str, Any]]:
    """What ``kubectl apply -k manifests/`` and then ``-k manifests/migrate/`` install:
    the chart holds both (the second as its post-upgrade hook)."""
    objects = []
    for path in sorted((REPO / "manifests").rglob("*.yaml")):
        wanted = path.parent.name in {"rbac", "manifests", "migrate"}
        if wanted and path.name != "kustomization.yaml":
            objects += [o for o in yaml.safe_load_all(path.read_text()) if o]
    return objects


@pytest.mark.timeout(BUILD_TIMEOUT + 120)
def test_helm_lint_passes() -> None:
    result = subprocess.run(
        [helm_binary(), "lint", "--strict", str(CHART)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(BUILD_TIMEOUT + 120)
def test_the_chart_renders_what_the_kustomize_manifests_hold() -> None:
    chart = {(o["kind"], o["metadata"]["name"].removeprefix("cbop-")): o for o in _render()}
    shipped = {(o["kind"], o["metadata"]["name"].removeprefix("cbop-")): o for o in _kustomize()}
    del shipped["Namespace", "system"]  # the release's namespace is helm's to make
    assert set(chart) == set(shipped)
    for key, obj in shipped.items():
        if "rules" in obj:
            assert chart[key]["rules"] == obj["rules"], key
    pod = shipped["Deployment", "cbop"]["spec"]["template"]["spec"]
    rendered = chart["Deployment", "cbop"]["spec"]["template"]["spec"]
    (container,), (got,) = pod["containers"], rendered["containers"]
    for field in ("args", "env", "ports", "livenessProbe", "readinessProbe", "resources",
                  "securityContext", "volumeMounts"):  # fmt: skip
        assert got[field] == container[field], field
    assert got["image"] == f"cbop:{__version__}"
    assert rendered["securityContext"] == pod["securityContext"]
    assert chart["Deployment", "cbop"]["spec"]["replicas"] == 2


@pytest.mark.timeout(BUILD_TIMEOUT + 120)
def test_values_scope_the_namespaces_and_add_the_service_monitor() -> None:
    objects = _render(
        "--set", "watchNamespaces={a,b}", "--set", "leaderElection.enabled=false",
        "--set", "metrics.serviceMonitor.enabled=true", "--set", "replicas=1",
    )  # fmt: skip
    kinds = {o["kind"] for o in objects}
    assert "ServiceMonitor" in kinds
    assert "Role" not in kinds
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=a" in args
    assert "--namespace=b" in args
    assert "--leader-elect" not in args


@pytest.mark.timeout(BUILD_TIMEOUT + 120)
def test_values_switch_the_secure_metrics_and_mount_a_certificate() -> None:
    def rendered(*values: str) -> tuple[dict[str, Any], dict[str, Any], set[str]]:
        objects = _render("--set", "metrics.serviceMonitor.enabled=true", *values)
        pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
        monitor = next(o for o in objects if o["kind"] == "ServiceMonitor")
        names = {f"{o['kind']}/{o['metadata']['name']}" for o in objects}
        return pod, monitor["spec"]["endpoints"][0], names

    pod, endpoint, names = rendered()
    assert "--metrics-secure" in pod["containers"][0]["args"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    assert "ClusterRole/cbop-metrics-reader" in names

    pod, endpoint, names = rendered("--set", "metrics.certSecret=cbop-metrics-tls")
    (container,) = pod["containers"]
    assert "--metrics-cert-dir=/etc/cbop/metrics-certs" in container["args"]
    assert {"name": "metrics-certs", "secret": {"secretName": "cbop-metrics-tls"}} in pod["volumes"]
    assert endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": "cbop-metrics-tls", "key": "ca.crt"}},
        "serverName": "cbop-metrics.cbop-system.svc",
    }

    pod, endpoint, names = rendered("--set", "metrics.secure=false")
    assert not any(a.startswith("--metrics-secure") for a in pod["containers"][0]["args"])
    assert endpoint["scheme"] == "http"
    assert "ClusterRole/cbop-metrics-reader" not in names


@pytest.mark.timeout(BUILD_TIMEOUT + 120)
def test_sharding_values_render_what_the_sharded_component_patches() -> None:
    """``sharding.shards=3``: ``--shards=3``, a replica per shard, and the Lease verbs of
    manifests/sharded/ (the kustomize Component; tests/e2e/test_deploy_manifests.py
    renders it)."""
    sharded = REPO / "manifests" / "sharded"
    (role_patch,) = yaml.safe_load((sharded / "leader_election_role_patch.yaml").read_text())
    deployment_patch = yaml.safe_load((sharded / "deployment_patch.yaml").read_text())

    def rendered(*values: str) -> tuple[dict[str, Any], list[str], set[str]]:
        objects = _render(*values)
        deployment = next(o for o in objects if o["kind"] == "Deployment")
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        role = next(o for o in objects if o["kind"] == "Role")
        return deployment, args, set(role["rules"][0]["verbs"])

    deployment, args, verbs = rendered("--set", "sharding.shards=3")
    assert deployment["spec"]["replicas"] == 3
    assert [a for a in args if a.startswith("--shards")] == ["--shards=3"]
    assert "--leader-elect" in args
    assert verbs == set(role_patch["value"])
    assert {"op": "replace", "path": "/spec/replicas", "value": 3} in deployment_patch
    assert {
        "op": "add",
        "path": "/spec/template/spec/containers/0/args/-",
        "value": "--shards=3",
    } in deployment_patch

    # One shard is today's single leader: no flag, two replicas, the base Lease verbs.
    deployment, args, verbs = rendered("--set", "sharding.shards=1")
    assert deployment["spec"]["replicas"] == 2
    assert not any(a.startswith("--shards") for a in args)
    assert verbs == {"get", "create", "update"}

    # An explicit replica count wins (e.g. 3 shards over 2 replicas).
    deployment, args, _ = rendered("--set", "sharding.shards=3", "--set", "replicas=2")
    assert deployment["spec"]["replicas"] == 2
    assert "--shards=3" in args

    result = subprocess.run(
        [helm_binary(), "template", "cbop", str(CHART), "--set", "sharding.shards=3",
         "--set", "leaderElection.enabled=false"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "sharding.shards > 1 needs leaderElection.enabled" in result.stderr


@pytest.mark.timeout(BUILD_TIMEOUT + 120)
def test_secrets_values_render_what_the_secrets_component_holds() -> None:
    """``secrets.enabled``: ``--secrets`` and manifests/secrets/'s roles; off (the
    default): no rule on Secrets at all. ``secrets.namespaces`` binds the ClusterRole in
    those namespaces only and passes ``--secrets-namespace``; ``secrets.resourceNames``
    narrows get, update and delete to the named targets."""
    component = REPO / "manifests" / "secrets"
    cluster_role = yaml.safe_load((component / "cluster_role.yaml").read_text())
    key_role = yaml.safe_load((component / "digest_key_role.yaml").read_text())

    def rendered(*values: str) -> tuple[dict[tuple[str, str], Any], list[str]]:
        objects = _render(*values)
        by_key = {(o["kind"], o["metadata"]["name"]): o for o in objects}
        deployment = by_key["Deployment", "cbop"]
        return by_key, deployment["spec"]["template"]["spec"]["containers"][0]["args"]

    off, args = rendered()
    assert not [a for a in args if a.startswith("--secrets")]
    assert not any(
        "secrets" in rule.get("resources", ()) for o in off.values() for rule in o.get("rules", ())
    )
    on, args = rendered("--set", "secrets.enabled=true")
    assert [a for a in args if a.startswith("--secrets")] == ["--secrets"]
    assert on["ClusterRole", "cbop-cbop-secrets"]["rules"] == cluster_role["rules"]
    assert on["Role", "cbop-digest-key"]["rules"] == key_role["rules"]
    assert ("ClusterRoleBinding", "cbop-cbop-secrets") in on
    narrowed, args = rendered(
        "--set", "secrets.enabled=true", "--set", "secrets.namespaces={team-a,cert-manager}",
        "--set", "secrets.resourceNames={tls}",
    )  # fmt: skip
    assert "--secrets-namespace=team-a,cert-manager" in args
    assert ("ClusterRoleBinding", "cbop-cbop-secrets") not in narrowed
    objects = _render(
        "--set", "secrets.enabled=true", "--set", "secrets.namespaces={team-a,cert-manager}",
    )  # fmt: skip
    bindings = [
        o
        for o in objects
        if o["kind"] == "RoleBinding" and o["metadata"]["name"] == "cbop-cbop-secrets"
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["cert-manager", "team-a"]
    assert narrowed["ClusterRole", "cbop-cbop-secrets"]["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch", "create"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["tls"],
            "verbs": ["get", "update", "delete"],
        },
    ]
    elsewhere = _render("--set", "secrets.enabled=true", "--namespace", "ops")
    deployment = next(o for o in elsewhere if o["kind"] == "Deployment")
    assert (
        "--secrets-digest-key=ops/cbop-digest-key"
        in (deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    )


@pytest.mark.timeout(BUILD_TIMEOUT + 120)
def test_the_storage_migration_hook_fails_visibly_and_stays_to_be_read() -> None:
    """The post-upgrade hook runs ``cbop migrate-storage``, which exits 2 in one line when
    the CRDs were not upgraded first (tests/e2e/test_api_versions.py runs it so, with the
    hook's own RBAC, which the chart renders as manifests/migrate/ holds). A failing
    hook must fail ``helm upgrade``: its Job gives up after a few tries, and a failed
    Job is not deleted (only ``hook-succeeded`` and the next run's
    ``before-hook-creation`` delete it), so ``kubectl logs job/<release>-migrate-storage``
    shows that line."""
    job = next(o for o in _render() if o["kind"] == "Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "post-upgrade"
    policies = set(annotations["helm.sh/hook-delete-policy"].split(","))
    assert policies == {"before-hook-creation", "hook-succeeded"}
    assert 0 < job["spec"]["backoffLimit"] <= 6
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["migrate-storage"]
    assert all(o["kind"] != "Job" for o in _render("--set", "migrateStorage.enabled=false"))
