"""Upgrades from release 0.1.0, and a rollback of the operator, on a real control plane.

Each test installs what a 0.1.0 user has (that release's CRD, manifests or chart, from
the tag ``v0.1.0``), runs that release's operator on live bundles of every kind (Delete
and Orphan policies, suspended, immutable, binary, a name conflict) until they settle,
then upgrades the way docs/api-versions.md says:

- ``kubectl apply --server-side -k manifests/``; or
- ``helm show crds`` of the new chart applied server-side, then ``helm upgrade``;

and runs this checkout's operator (the Deployment's pods need a node; here the
operator runs as a process, with the same flags). Then ``cbop migrate-storage``.
Expected: the upgrade writes no ConfigMap at all (every ConfigMap of the namespace keeps
its resourceVersion, and owner references still name ``cbop.dev/v1alpha1``; the API
server's own ConfigMaps elsewhere are written now and then, so its request counter would
not tell), no bundle's Ready condition changes,
and the 0.1.0 operator run again on the new CRD keeps working (a change through
v1alpha1 is reconciled, an Orphan bundle is released on delete).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cbop import __version__
from cbop.kube import CONFIGMAPS, CUSTOM_RESOURCE_DEFINITIONS, ApiError, KubeClient, Resource
from cbop_testing.envtest import ControlPlane

from . import harness
from .harness import REPO, Operator, wait_for
from .helm import helm_binary
from .releases import release_tree

NS = "legacy"
#: ConfigBundles as 0.1.0 names them: served before and after the upgrade.
V1ALPHA1 = Resource("cbop.dev", "v1alpha1", "configbundles", "ConfigBundle")
CRD_NAME = "configbundles.cbop.dev"
#: Long enough for every reconcile the new operator was going to make (2 s resyncs).
QUIET = 6.0
#: What each bundle settles at: Ready status and reason.
SETTLED = {
    "keep": ("True", "Synced"),
    "orphan": ("True", "Synced"),
    "paused": ("Unknown", "Suspended"),
    "frozen": ("True", "Synced"),
    "blob": ("True", "Synced"),
    "clash": ("False", "ConfigMapConflict"),
}


def _bundles() -> list[dict[str, Any]]:
    specs: dict[str, dict[str, Any]] = {
        "keep": {"data": {"a": "1"}},
        "orphan": {"data": {"b": "1"}, "deletionPolicy": "Orphan"},
        "paused": {"data": {"c": "1"}, "suspend": True},
        "frozen": {"data": {"d": "1"}, "immutable": True},
        "blob": {"binaryData": {"img": "//4AgA=="}},
        "clash": {"configMapName": "taken", "data": {"e": "1"}},
    }
    return [
        {
            "apiVersion": "cbop.dev/v1alpha1",
            "kind": "ConfigBundle",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        }
        for name, spec in specs.items()
    ]


class Legacy:
    """A control plane with a 0.1.0 install, and how to run either release's operator."""

    def __init__(self, plane: ControlPlane, old: Path, logs: Path) -> None:
        self.plane = plane
        self.old = old
        self.logs = logs
        self.kube = KubeClient.from_config(kubeconfig=str(plane.kubeconfig_path), qps=0)
        self._runs = 0

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return harness.kubectl(self.plane, *args, stdin=stdin)

    def operator(self, *, release: str) -> Operator:
        """Start the operator of ``release`` (``0.1.0`` or ``new``) on the namespace."""
        self._runs += 1
        env = {"PYTHONPATH": str(self.old / "src")} if release == "0.1.0" else {}
        args = ["--resync-period=2s"] + (["--no-rollout"] if release == "new" else [])
        op = Operator(
            self.plane.kubeconfig_path,
            [NS],
            args=args,
            log_path=self.logs / f"cbop-{release}-{self._runs}.log",
            env=env,
        )
        return op.wait_ready(90)

    def conditions(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for item in self.kube.list(V1ALPHA1, NS)["items"]:
            conds = (item.get("status") or {}).get("conditions") or []
            out[item["metadata"]["name"]] = next((c for c in conds if c["type"] == "Ready"), {})
        return out

    def settled(self) -> bool:
        got = {n: (c.get("status"), c.get("reason")) for n, c in self.conditions().items()}
        return got == SETTLED

    def configmaps(self) -> dict[str, tuple[str, list[str]]]:
        """Managed and foreign ConfigMaps: name -> (resourceVersion, owner apiVersions)."""
        return {
            cm["metadata"]["name"]: (
                cm["metadata"]["resourceVersion"],
                [r["apiVersion"] for r in cm["metadata"].get("ownerReferences") or ()],
            )
            for cm in self.kube.list(CONFIGMAPS, NS)["items"]
            if cm["metadata"]["name"] != "kube-root-ca.crt"
        }

    def stored_versions(self) -> list[str]:
        crd = self.kube.get(CUSTOM_RESOURCE_DEFINITIONS, None, CRD_NAME)
        return list(crd["status"]["storedVersions"])

    def storage_version(self) -> str:
        crd = self.kube.get(CUSTOM_RESOURCE_DEFINITIONS, None, CRD_NAME)
        return str(next(v["name"] for v in crd["spec"]["versions"] if v["storage"]))


@pytest.fixture
def legacy(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Legacy]:
    """A fresh control plane (the upgrade changes its CRD) and release v0.1.0's files."""
    plane = ControlPlane(
        binaries=control_plane.binaries, workdir=tmp_path_factory.mktemp("legacy-plane")
    )
    plane.start(timeout=120)
    env = Legacy(plane, release_tree("v0.1.0", tmp_path_factory.mktemp("v0.1.0")),
                 tmp_path_factory.mktemp("legacy-logs"))  # fmt: skip
    try:
        yield env
    finally:
        env.kube.close()
        plane.stop()


def _live_bundles_under_0_1_0(env: Legacy) -> dict[str, Any]:
    """Create every kind of bundle, settle them under the 0.1.0 operator, stop it;
    return what must survive the upgrade untouched."""
    env.kubectl("create", "namespace", NS)
    env.kubectl("create", "configmap", "taken", "-n", NS, "--from-literal=k=mine")
    for body in _bundles():
        env.kubectl("create", "-f", "-", stdin=json.dumps(body))
    old = env.operator(release="0.1.0")
    try:
        wait_for(env.settled, 90, message="every bundle settled under 0.1.0")
    finally:
        assert old.stop() == 0, old.logs()[-3000:]
    configmaps = env.configmaps()
    assert all(owners == ["cbop.dev/v1alpha1"] for n, (_, owners) in configmaps.items()
               if n != "taken"), configmaps  # fmt: skip
    return {"configmaps": configmaps, "conditions": env.conditions()}


def _upgraded_quietly(env: Legacy, before: dict[str, Any]) -> None:
    """Run the new operator and cbop migrate-storage: nothing of ``before`` changes."""
    assert env.storage_version() == "v1beta1"
    new = env.operator(release="new")
    try:
        time.sleep(QUIET)
        result = subprocess.run(
            [sys.executable, "-m", "cbop", "migrate-storage",
             f"--kubeconfig={env.plane.kubeconfig_path}"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "storedVersions ['v1alpha1', 'v1beta1'] -> ['v1beta1']" in result.stdout
        time.sleep(QUIET)
        assert env.configmaps() == before["configmaps"], "the upgrade wrote a ConfigMap"
        assert env.conditions() == before["conditions"], "a Ready condition changed"
        assert env.stored_versions() == ["v1beta1"]
    finally:
        assert new.stop() == 0, new.logs()[-3000:]


def _rolled_back_operator_still_works(env: Legacy) -> None:
    """The 0.1.0 operator on the new CRD: a change through v1alpha1 is reconciled, and
    an Orphan bundle is released when deleted."""
    old = env.operator(release="0.1.0")
    try:
        patch = json.dumps({"spec": {"data": {"a": "2"}}})
        env.kubectl("patch", "configbundles.v1alpha1.cbop.dev", "keep", "-n", NS,
                    "--type=merge", "-p", patch)  # fmt: skip
        wait_for(
            lambda: env.kube.get(CONFIGMAPS, NS, "keep")["data"] == {"a": "2"},
            60,
            message="0.1.0 reconciling a change after the upgrade",
        )
        env.kubectl("delete", "configbundles.v1alpha1.cbop.dev", "orphan", "-n", NS,
                    "--wait=false")  # fmt: skip

        def released() -> bool:
            try:
                env.kube.get(V1ALPHA1, NS, "orphan")
            except ApiError as err:
                return err.is_not_found
            return False

        wait_for(released, 60, message="the Orphan bundle released by 0.1.0")
        annotations = env.kube.get(CONFIGMAPS, NS, "orphan")["metadata"]["annotations"]
        assert annotations["cbop.dev/released-by"] == f"{NS}/orphan"
    finally:
        assert old.stop() == 0, old.logs()[-3000:]


def test_kubectl_apply_of_the_manifests_upgrades_without_a_write(legacy: Legacy) -> None:
    env = legacy
    env.kubectl("apply", "-k", str(env.old / "manifests"))
    before = _live_bundles_under_0_1_0(env)
    env.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "manifests"))
    env.kubectl("wait", "--for=condition=established", f"crd/{CRD_NAME}")
    _upgraded_quietly(env, before)
    _rolled_back_operator_still_works(env)
    deployment = json.loads(env.kubectl("get", "deployment", "cbop", "-n", "cbop-system",
                                        "-o", "json"))  # fmt: skip
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"cbop:{__version__}" != "cbop:0.1.0", image


def test_helm_upgrade_with_the_crds_applied_first_upgrades_without_a_write(
    legacy: Legacy,
) -> None:
    env = legacy
    helm = helm_binary()

    def run_helm(*args: str) -> str:
        result = subprocess.run(
            [helm, f"--kubeconfig={env.plane.kubeconfig_path}", *args],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
        return result.stdout

    run_helm("install", "cbop", str(env.old / "charts" / "cbop"), "-n", "cbop-system",
             "--create-namespace")  # fmt: skip
    before = _live_bundles_under_0_1_0(env)
    # Helm never upgrades crds/: the chart's CRDs go first (docs/api-versions.md).
    crds = run_helm("show", "crds", str(REPO / "charts" / "cbop"))
    env.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=crds)
    env.kubectl("wait", "--for=condition=established", f"crd/{CRD_NAME}")
    # The migration hook's Job needs a node; here the test runs cbop migrate-storage.
    run_helm("upgrade", "cbop", str(REPO / "charts" / "cbop"), "-n", "cbop-system",
             "--no-hooks")  # fmt: skip
    history = json.loads(run_helm("history", "cbop", "-n", "cbop-system", "-o", "json"))
    assert [h["status"] for h in history] == ["superseded", "deployed"]
    _upgraded_quietly(env, before)
    _rolled_back_operator_still_works(env)
