"""The security model's pieces on a real API server: aggregated roles and the optional policy.

* The ConfigBundle editor and viewer ClusterRoles are aggregated by
  kube-controller-manager into the built-in ``edit``/``admin`` and ``view`` roles: a
  user bound to ``edit`` in a namespace may create bundles there, one bound to ``view``
  may only read them.
* The ValidatingAdmissionPolicy of ``manifests/policy/`` denies creating a bundle in
  a protected namespace (kube-system and the binding's list), or changing a spec there,
  and lets everything else through: cbop's own writes there too (a cbop process runs
  against the policy file itself), and deletion under either deletion policy.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cbop_testing.envtest import DEFAULT_CONTROLLERS, ControlPlane

from .harness import operator

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
#: Generous bound for the aggregation controller and the policy to take effect (seconds).
WAIT = 60.0


class Kubectl:
    def __init__(self, control_plane: ControlPlane) -> None:
        self.cp = control_plane

    def __call__(
        self, *args: str, stdin: str | None = None, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        config = kubeconfig or self.cp.kubeconfig_path
        return subprocess.run(
            [str(self.cp.binaries.kubectl), f"--kubeconfig={config}", *args],
            capture_output=True,
            text=True,
            input=stdin,
            timeout=60,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        result = self(*args, stdin=stdin)
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    # Role aggregation is kube-controller-manager's work: run its controller too.
    controllers = (*DEFAULT_CONTROLLERS, "clusterrole-aggregation-controller")
    with ControlPlane(
        workdir=tmp_path_factory.mktemp("security"), controllers=controllers
    ) as control_plane:
        run = Kubectl(control_plane)
        run.ok("apply", "-k", str(MANIFESTS))
        run.ok("wait", "--for=condition=established", "crd/configbundles.cbop.dev")
        yield run


def bundle(namespace: str, name: str) -> str:
    body: dict[str, Any] = {
        "apiVersion": "cbop.dev/v1beta1",
        "kind": "ConfigBundle",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"configMapName": name, "data": {"k": "v"}},
    }
    return json.dumps(body)


def eventually(probe: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_edit_and_view_include_the_configbundle_roles(kubectl: Kubectl) -> None:
    kubectl.ok("create", "namespace", "team-a")
    kubectl.ok("create", "rolebinding", "alice-edit", "--clusterrole=edit", "--user=alice",
               "-n", "team-a")  # fmt: skip
    kubectl.ok("create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob",
               "-n", "team-a")  # fmt: skip

    def can(user: str, verb: str, *extra: str) -> bool:
        result = kubectl(
            "auth", "can-i", verb, "configbundles.cbop.dev", *extra, "-n", "team-a", "--as", user
        )
        return result.stdout.strip() == "yes"

    eventually(lambda: can("alice", "create") and can("bob", "list"), "role aggregation")
    for verb in ("create", "update", "patch", "delete", "get", "list", "watch"):
        assert can("alice", verb), verb
    for verb in ("get", "list", "watch"):
        assert can("bob", verb), verb
    for verb in ("create", "update", "patch", "delete"):
        assert not can("bob", verb), verb
    # Neither may touch cbop's status subresource (only cbop writes it).
    assert not can("alice", "update", "--subresource=status")
    assert can("alice", "get", "--subresource=status")
    # Elsewhere, neither has anything.
    denied = kubectl("auth", "can-i", "create", "configbundles.cbop.dev", "-n", "default",
                     "--as", "alice")  # fmt: skip
    assert denied.stdout.strip() == "no"


def test_the_policy_keeps_bundles_out_of_protected_namespaces(kubectl: Kubectl) -> None:
    kubectl.ok("create", "namespace", "apps")
    kubectl.ok("apply", "-k", str(MANIFESTS / "policy"))

    def denied_in_kube_system() -> bool:
        result = kubectl("create", "-f", "-", stdin=bundle("kube-system", "probe"))
        if result.returncode == 0:
            kubectl.ok("delete", "configbundle", "-n", "kube-system", "probe")
            return False
        return True

    eventually(denied_in_kube_system, "the policy to take effect")
    refused = kubectl("create", "-f", "-", stdin=bundle("kube-system", "x"))
    assert refused.returncode != 0
    assert "ConfigBundles are not allowed in the protected namespace kube-system" in (
        refused.stderr
    )
    assert "ValidatingAdmissionPolicy 'cbop-protected-namespaces'" in refused.stderr
    # Other namespaces are untouched.
    kubectl.ok("create", "-f", "-", stdin=bundle("apps", "fine"))

    # The list is configurable: protect `apps` too; its existing bundle's spec can no
    # longer be changed but the bundle can still be deleted.
    binding = yaml.safe_load_all((MANIFESTS / "policy" / "protected_namespaces.yaml").read_text())
    policy_binding = next(o for o in binding if o["kind"] == "ValidatingAdmissionPolicyBinding")
    policy_binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0][
        "values"
    ].append("apps")
    kubectl.ok("apply", "-f", "-", stdin=json.dumps(policy_binding))

    def apps_protected() -> bool:
        patch = json.dumps({"spec": {"data": {"k": str(time.monotonic())}}})
        result = kubectl("patch", "configbundle", "-n", "apps", "fine", "--type=merge", "-p", patch)
        return result.returncode != 0 and "protected namespace apps" in result.stderr

    eventually(apps_protected, "the binding's new namespace to be protected")
    kubectl.ok("delete", "configbundle", "-n", "apps", "fine")


def protect(kubectl: Kubectl, namespace: str) -> None:
    """Apply the shipped policy file with ``namespace`` added to its binding, and wait
    until it is in force there (a probe bundle is refused)."""
    objs = list(
        yaml.safe_load_all((MANIFESTS / "policy" / "protected_namespaces.yaml").read_text())
    )
    binding = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding")
    binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"].append(
        namespace
    )
    kubectl.ok(
        "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
    )

    def refused() -> bool:
        result = kubectl("create", "-f", "-", stdin=bundle(namespace, "policy-probe"))
        if result.returncode == 0:
            kubectl.ok("delete", "configbundle", "-n", namespace, "policy-probe")
            return False
        return f"protected namespace {namespace}" in result.stderr

    eventually(refused, f"the policy to protect {namespace}")


def get_json(kubectl: Kubectl, *args: str) -> dict[str, Any]:
    result = kubectl("get", "-o", "json", *args)
    if result.returncode != 0:
        return {}
    got: dict[str, Any] = json.loads(result.stdout)
    return got


def test_the_policy_lets_cbop_finish_its_own_work_in_a_protected_namespace(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    """Case 19 (openbao-operator#53, kubernetes#129883): with the shipped policy file in
    force for ``team``, every write cbop makes to bundles there goes through (the
    Orphan finalizer added and removed, status, the release), a bundle is gone within
    seconds under either deletion policy, and users still cannot create a bundle or
    change a spec there."""
    ns = "team"
    kubectl.ok("create", "namespace", ns)
    kubectl.ok("create", "configmap", "taken", "-n", ns, "--from-literal=k=mine")

    def spec_bundle(name: str, **spec: Any) -> str:
        body = json.loads(bundle(ns, name))
        body["spec"].update(spec)
        return json.dumps(body)

    # Created before the namespace is protected, and before cbop runs: cbop's first
    # writes (the Orphan finalizer, the ConfigMaps, status) come under the policy.
    kubectl.ok("create", "-f", "-", stdin=spec_bundle("keep", deletionPolicy="Orphan"))
    kubectl.ok("create", "-f", "-", stdin=spec_bundle("gone"))
    kubectl.ok("create", "-f", "-", stdin=spec_bundle("late", configMapName="taken"))
    protect(kubectl, ns)

    def reason(name: str) -> str | None:
        conds = get_json(kubectl, "configbundle", "-n", ns, name).get("status", {}).get(
            "conditions"
        ) or [{}]
        return next((c.get("reason") for c in conds if c.get("type") == "Ready"), None)

    with operator(kubectl.cp.kubeconfig_path, [ns], tmp_path / "cbop.log") as op:
        eventually(lambda: reason("keep") == "Synced", "keep Ready")
        eventually(lambda: reason("gone") == "Synced", "gone Ready")
        eventually(lambda: reason("late") == "ConfigMapConflict", "late in conflict")
        keep = get_json(kubectl, "configbundle", "-n", ns, "keep")
        assert keep["metadata"]["finalizers"] == ["cbop.dev/orphan"]
        # The blocker goes: cbop takes the name and writes the new status.
        kubectl.ok("delete", "configmap", "-n", ns, "taken")
        eventually(lambda: reason("late") == "Synced", "late Ready")

        # Users: no new bundle, no spec change; metadata stays theirs to edit.
        refused = kubectl("create", "-f", "-", stdin=spec_bundle("new"))
        assert refused.returncode != 0
        assert f"ConfigBundles are not allowed in the protected namespace {ns}" in refused.stderr
        patch = json.dumps({"spec": {"data": {"k": "changed"}}})
        refused = kubectl("patch", "configbundle", "-n", ns, "keep", "--type=merge", "-p", patch)
        assert refused.returncode != 0
        assert "the spec of ConfigBundle keep in the protected namespace team may not change" in (
            refused.stderr
        )
        refused = kubectl("patch", "configbundle", "-n", ns, "gone", "--type=merge", "-p",
                          json.dumps({"spec": {"deletionPolicy": "Orphan"}}))  # fmt: skip
        assert refused.returncode != 0
        kubectl.ok("label", "configbundle", "-n", ns, "keep", "owner=team")

        # Deleting works under either policy, within seconds.
        for name in ("keep", "gone"):
            began = time.monotonic()
            kubectl.ok("delete", "configbundle", "-n", ns, name, "--wait=false")
            deadline = began + 15.0
            while get_json(kubectl, "configbundle", "-n", ns, name):
                assert time.monotonic() < deadline, f"{name} still there:\n{op.logs()[-3000:]}"
                time.sleep(0.2)
        released = get_json(kubectl, "configmap", "-n", ns, "keep")
        assert released["metadata"]["annotations"]["cbop.dev/released-by"] == f"{ns}/keep"
        assert not released["metadata"].get("ownerReferences")
        eventually(lambda: not get_json(kubectl, "configmap", "-n", ns, "gone"), "GC of gone")
