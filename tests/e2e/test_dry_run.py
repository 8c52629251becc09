"""``cbop --once --dry-run`` on the real control plane: honest verdicts, bounded diffs.

Issue 11, items 1 and 2: a dry run never calls a bundle with a pending change Ready or
in sync, its exit code tells "changes pending" (3) from "in sync" (0) and "broken" (1),
and its diff is bounded whatever the values. Issue 36: it names the labelled workloads
each pending change would roll.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from cbop.api import content_hash
from cbop.api.revisions import revision_name
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, DEPLOYMENTS, KubeClient, Resource
from cbop.rollout import LABEL_CONFIG_BASELINE, LABEL_ROLLOUT
from cbop_testing.envtest import ControlPlane

from .harness import Operator, bundle, ready, run_cli, set_spec, wait_for

RBAC_GROUP = "rbac.authorization.k8s.io"
ROLES = Resource(RBAC_GROUP, "v1", "roles", "Role")
ROLE_BINDINGS = Resource(RBAC_GROUP, "v1", "rolebindings", "RoleBinding")
CONF_V1 = "server {\n  listen 80;\n}\n"
CONF_V2 = "server {\n  listen 8080;\n}\n"


def _rows(stdout: str) -> dict[str, str]:
    """Table rows of ``--once`` output by bundle name (the whole row, spaces squeezed)."""
    lines = stdout.split("\n\n", 1)[0].splitlines()[1:]
    return {line.split()[1]: " ".join(line.split()) for line in lines}


def test_dry_run_of_a_pending_replace_is_pending_not_ready(
    kube: KubeClient, namespace: str, kubeconfig: str, cbop: Callable[..., Operator]
) -> None:
    """Issue 11 item 1: ``imm`` Ready, cbop stopped, ``a`` patched: the dry run read
    ``imm imm replace (dry run) Ready``, logged ``reconciled``, and exited 0."""
    op = cbop()
    spec = {"immutable": True, "data": {"a": "1", "nginx.conf": CONF_V1}}
    kube.create(CONFIGBUNDLES, namespace, bundle("imm", spec))
    wait_for(lambda: ready(kube, namespace, "imm"), 30, message="imm Ready")
    op.stop()
    before = kube.get(CONFIGMAPS, namespace, "imm")["metadata"]["resourceVersion"]
    set_spec(kube, namespace, "imm", {"immutable": True, "data": {"a": "2", "nginx.conf": CONF_V2}})

    dry = run_cli(kubeconfig, "--once", "--dry-run", "--log-level=info", f"--namespace={namespace}")
    assert dry.returncode == 3, dry.stdout + dry.stderr
    assert _rows(dry.stdout)["imm"] == f"{namespace} imm imm replace (dry run) Pending (then Ready)"
    assert "matches" not in dry.stdout + dry.stderr
    assert "reconciled" not in dry.stderr
    events = [json.loads(line)["event"] for line in dry.stderr.splitlines()]
    assert "dry run: change pending" in events
    # The multi-line value is a literal block, one diff line per line of the value.
    assert "   nginx.conf: |\n" in dry.stdout
    assert "-      listen 80;\n" in dry.stdout
    assert "+      listen 8080;\n" in dry.stdout
    assert "\\n" not in dry.stdout
    assert kube.get(CONFIGMAPS, namespace, "imm")["metadata"]["resourceVersion"] == before

    as_json = run_cli(
        kubeconfig, "--once", "--dry-run", "--output=json", f"--namespace={namespace}"
    )
    assert as_json.returncode == 3, as_json.stderr
    (row,) = json.loads(as_json.stdout)
    assert row["pending"] is True
    assert row["result"] == "Pending (then Ready)"
    assert row["message"].startswith("would replace ConfigMap imm")

    # Made for real, the same bundle is in sync: the dry run says so and exits 0.
    assert run_cli(kubeconfig, "--once", f"--namespace={namespace}").returncode == 0
    clean = run_cli(kubeconfig, "--once", "--dry-run", f"--namespace={namespace}")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert _rows(clean.stdout)["imm"] == f"{namespace} imm imm none Ready"

    # A broken bundle (its name taken by a ConfigMap cbop does not own) is 1, even when
    # another bundle has a change pending.
    kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "taken"}, "data": {"x": "y"}})
    kube.create(CONFIGBUNDLES, namespace, bundle("taken", {"data": {"a": "1"}}))
    set_spec(kube, namespace, "imm", {"immutable": True, "data": {"a": "3"}})
    broken = run_cli(kubeconfig, "--once", "--dry-run", f"--namespace={namespace}")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    rows = _rows(broken.stdout)
    assert rows["taken"].endswith("ConfigMapConflict")
    assert rows["imm"].endswith("Pending (then Ready)")


def test_dry_run_names_the_revision_a_change_would_create(
    kube: KubeClient, namespace: str, kubeconfig: str
) -> None:
    """Issue 36: with ``spec.revisions`` the dry run names the revision ConfigMap it
    would create, creates none, and the real run then creates that one."""
    spec: dict[str, Any] = {"configMapName": "rev-conf", "revisions": {"enabled": True}}
    kube.create(CONFIGBUNDLES, namespace, bundle("rev", {**spec, "data": {"a": "1"}}))
    first = run_cli(kubeconfig, "--once", f"--namespace={namespace}")
    assert first.returncode == 0, first.stdout + first.stderr
    set_spec(kube, namespace, "rev", {**spec, "data": {"a": "2"}})
    revision = revision_name("rev-conf", content_hash({"a": "2"}, {}))

    def names() -> set[str]:
        return {cm["metadata"]["name"] for cm in kube.list(CONFIGMAPS, namespace)["items"]}

    before = names()
    dry = run_cli(kubeconfig, "--once", "--dry-run", f"--namespace={namespace}")
    assert dry.returncode == 3, dry.stdout + dry.stderr
    assert f"# {namespace}/rev: would create revision {revision}; would update" in dry.stdout
    as_json = run_cli(
        kubeconfig, "--once", "--dry-run", "--output=json", f"--namespace={namespace}"
    )
    (row,) = json.loads(as_json.stdout)
    assert row["wouldCreateRevision"] == revision
    assert names() == before
    assert revision not in before

    assert run_cli(kubeconfig, "--once", f"--namespace={namespace}").returncode == 0
    assert names() == before | {revision}
    assert kube.get(CONFIGBUNDLES, namespace, "rev")["status"]["revision"] == revision


def test_dry_run_diff_of_a_huge_one_line_value_is_bounded(
    kube: KubeClient, namespace: str, kubeconfig: str
) -> None:
    """Issue 11 item 2: one changed character in a 921,600-character line printed two
    diff lines of 921,606 characters (1.85 MB)."""
    value = "0123456789" * 92_160
    kube.create(CONFIGBUNDLES, namespace, bundle("big", {"data": {"big": value}}))
    first = run_cli(kubeconfig, "--once", f"--namespace={namespace}")
    assert first.returncode == 0, first.stdout + first.stderr
    changed = value[:600_000] + "X" + value[600_001:]
    set_spec(kube, namespace, "big", {"data": {"big": changed}})

    for output in ("table", "json"):
        dry = run_cli(
            kubeconfig,
            "--once",
            "--dry-run",
            f"--output={output}",
            "--log-level=debug",
            f"--namespace={namespace}",
        )
        assert dry.returncode == 3, dry.stdout[:2000] + dry.stderr[:2000]
        diff = json.loads(dry.stdout)[0]["diff"] if output == "json" else dry.stdout
        assert len(diff) < 4_000, len(diff)
        assert max(len(line) for line in diff.splitlines()) < 500
        plus = next(line for line in diff.splitlines() if line.startswith("+  big: "))
        minus = next(line for line in diff.splitlines() if line.startswith("-  big: "))
        assert "X" in plus
        assert "X" not in minus
        assert "bytes ...]" in plus
        # No log line carries the value either (debug level, every logger).
        assert all(len(line) < 8_000 for line in dry.stderr.splitlines()), max(
            map(len, dry.stderr.splitlines())
        )


def _deployment(
    name: str, *, labelled: bool = True, volume: str | None = None, env_from: str | None = None
) -> dict[str, Any]:
    """A Deployment reading ConfigMap ``volume`` as a mounted volume, ``env_from`` as
    environment; labelled ``cbop.dev/rollout: "true"`` unless ``labelled`` is False."""
    container: dict[str, Any] = {"name": "app", "image": "registry.invalid/app:1"}
    pod: dict[str, Any] = {"containers": [container]}
    if volume:
        pod["volumes"] = [{"name": "conf", "configMap": {"name": volume}}]
        container["volumeMounts"] = [{"name": "conf", "mountPath": "/etc/app"}]
    if env_from:
        container["envFrom"] = [{"configMapRef": {"name": env_from}}]
    return {
        "metadata": {
            "name": name,
            "labels": {LABEL_ROLLOUT: "true"} if labelled else {},
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
        },
    }


def _versions(kube: KubeClient, namespace: str) -> dict[str, str]:
    """resourceVersions of the bundles, the ConfigMaps and the Deployments, by kind/name."""
    out = {}
    for res in (CONFIGBUNDLES, CONFIGMAPS, DEPLOYMENTS):
        for item in kube.list(res, namespace)["items"]:
            out[f"{res.plural}/{item['metadata']['name']}"] = item["metadata"]["resourceVersion"]
    return out


def test_dry_run_lists_the_workloads_a_change_would_roll(
    kube: KubeClient, namespace: str, kubeconfig: str, cbop: Callable[..., Operator]
) -> None:
    """Issue 36, the plan before the change: a bundle read by two labelled Deployments
    (one mounts it, one reads it through envFrom), one unlabelled Deployment, and a
    labelled Deployment reading another bundle. With cbop stopped and the bundle changed,
    the dry run names exactly the two, in the table and in JSON, and writes nothing."""
    kube.create(CONFIGBUNDLES, namespace, bundle("web-conf", {"data": {"a": "1"}}))
    kube.create(CONFIGBUNDLES, namespace, bundle("other", {"data": {"b": "1"}}))
    op = cbop()  # the rollout is on by default: it records each baseline
    wait_for(
        lambda: all(ready(kube, namespace, name) for name in ("web-conf", "other")),
        60,
        message="the bundles Ready",
    )
    for deployment in (  # created after their ConfigMaps: opting in rolls nothing
        _deployment("web", volume="web-conf"),
        _deployment("api", env_from="web-conf"),
        _deployment("plain", labelled=False, volume="web-conf"),
        _deployment("elsewhere", volume="other"),
    ):
        kube.create(DEPLOYMENTS, namespace, deployment)
    wait_for(
        lambda: all(
            LABEL_CONFIG_BASELINE in kube.get(DEPLOYMENTS, namespace, n)["metadata"]["labels"]
            for n in ("web", "api", "elsewhere")
        ),
        60,
        message="the baselines recorded",
    )
    op.stop()

    # In sync: nothing pending, nothing listed, no workload list needed.
    clean = run_cli(kubeconfig, "--once", "--dry-run", "--output=json", f"--namespace={namespace}")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert [row["wouldRoll"] for row in json.loads(clean.stdout)] == [[], []]

    set_spec(kube, namespace, "web-conf", {"data": {"a": "2"}})
    before = _versions(kube, namespace)
    dry = run_cli(kubeconfig, "--once", "--dry-run", f"--namespace={namespace}")
    assert dry.returncode == 3, dry.stdout + dry.stderr
    section = dry.stdout.split(f"# {namespace}/web-conf: ", 1)[1].splitlines()
    assert section[1] == "# would roll: Deployment/api, Deployment/web"
    assert "would roll" not in dry.stdout.split(f"# {namespace}/web-conf: ", 1)[0]

    as_json = run_cli(
        kubeconfig, "--once", "--dry-run", "--output=json", f"--namespace={namespace}"
    )
    assert as_json.returncode == 3, as_json.stderr
    rows = {row["bundle"]: row for row in json.loads(as_json.stdout)}
    assert rows["web-conf"]["wouldRoll"] == [
        {"kind": "Deployment", "name": "api"},
        {"kind": "Deployment", "name": "web"},
    ]
    assert rows["other"]["wouldRoll"] == []
    assert _versions(kube, namespace) == before


def test_dry_run_without_the_apps_rules_says_the_workloads_are_unknown(
    control_plane: ControlPlane, kube: KubeClient, namespace: str
) -> None:
    """RBAC that grants what a dry run of bundles needs but no ``apps`` rules: the dry
    run still answers (exit 3, the change pending) and says why it names no workload."""
    rules = [
        {
            "apiGroups": ["cbop.dev"],
            "resources": ["configbundles"],
            "verbs": ["get", "list", "watch"],
        },
        # A ConfigMap's owner reference with blockOwnerDeletion needs it (a dry run too).
        {"apiGroups": ["cbop.dev"], "resources": ["configbundles/finalizers"], "verbs": ["update"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"],
        },
    ]
    kube.create(ROLES, namespace, {"metadata": {"name": "dry-run"}, "rules": rules})
    kube.create(
        ROLE_BINDINGS,
        namespace,
        {
            "metadata": {"name": "dry-run"},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "dry-run"},
            "subjects": [{"kind": "User", "name": "dry-run-no-apps", "apiGroup": RBAC_GROUP}],
        },
    )
    path = control_plane.kubeconfig_for_user("dry-run-no-apps")
    kube.create(CONFIGBUNDLES, namespace, bundle("app", {"data": {"a": "1"}}))
    refused = f'forbidden to list deployments.apps in namespace "{namespace}" (403)'

    dry = run_cli(path, "--once", "--dry-run", "--output=json", f"--namespace={namespace}")
    assert dry.returncode == 3, dry.stdout + dry.stderr
    (row,) = json.loads(dry.stdout)
    assert row["wouldRoll"] is None
    assert row["workloadsUnknown"].startswith(refused), row
    table = run_cli(path, "--once", "--dry-run", f"--namespace={namespace}")
    assert table.returncode == 3, table.stdout + table.stderr
    assert f"# workloads unknown: {refused}" in table.stdout
    names = [cm["metadata"]["name"] for cm in kube.list(CONFIGMAPS, namespace)["items"]]
    assert "app" not in names  # a dry run
