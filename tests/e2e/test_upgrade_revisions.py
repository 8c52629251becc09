"""An upgrade from release 0.2.0 with revisions on, and a rollback of the operator.

A fresh control plane with kube-controller-manager's workload and garbage-collector
controllers, what a 0.2.0 user has (that release's CRD and manifests, and its
``manifests/revisions/`` policy with ConfigMap params, from the tag ``v0.2.0``), that
release's operator rolling a Deployment whose pods read a bundle with revisions, then
the upgrade as the CHANGELOG says: ``kubectl apply --server-side -k manifests/`` and
``-k manifests/revisions/`` (the new policy, another name: 0.2.0's stays), and this
checkout's operator (a process, as in tests/e2e/test_upgrade.py).

Expected (docs/revisions.md, "Upgrading from 0.2.0"): no pod restarts, no workload
written, 0.2.0's pins left as they were; a new pod of the template 0.2.0 rolled is still
pinned (by 0.2.0's policy, from its pins); the next content change rolls with the new
mapping; an undo to 0.2.0's template gets its revision back and is not rolled forward;
``cbop_revision_legacy_pins_namespaces`` says something relies on the old pins. Then
the operator rolled back to 0.2.0 rolls the next change its way, and its pods are pinned.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, DEPLOYMENTS, NAMESPACES, ApiError, KubeClient
from cbop.revisions.legacy import PARAMS_NAME
from cbop.revisions.model import mapping_of
from cbop_testing.envtest import ControlPlane

from . import harness
from .harness import REPO, Operator, bundle, set_spec, wait_for
from .helm import helm_binary
from .pinpolicy import BINDINGS, PODS, POLICIES
from .releases import release_tree
from .revisions import configmap_volumes, pods_by_replicaset, revision_of, wait_policy_effective
from .workloads import WORKLOAD_CONTROLLERS

NS = "legacy-revisions"
WAIT = 120.0
#: Longer than every reconcile the new operator was going to make (2 s resyncs).
QUIET = 8.0


class Plane:
    """A control plane with a 0.2.0 install, and how to run either release's operator."""

    def __init__(self, plane: ControlPlane, old: Path, logs: Path) -> None:
        self.plane = plane
        self.old = old
        self.logs = logs
        self.kube = KubeClient.from_config(kubeconfig=str(plane.kubeconfig_path), qps=0)
        self._runs = 0

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return harness.kubectl(self.plane, *args, stdin=stdin)

    def operator(self, *, release: str) -> Operator:
        """Start the operator of ``release`` (``0.2.0`` or ``new``), with the rollout."""
        self._runs += 1
        old = release == "0.2.0"
        grace = ["--pins-grace", "2"] if old else ["--revision-grace", "2"]
        return Operator(
            self.plane.kubeconfig_path,
            [NS],
            args=["--rollout", "--resync-period=2s", *grace],
            log_path=self.logs / f"cbop-{release}-{self._runs}.log",
            env={"PYTHONPATH": str(self.old / "src")} if old else {},
        ).wait_ready(90)

    def pods(self) -> dict[str, list[dict[str, Any]]]:
        return pods_by_replicaset(self.kube, NS, "app=web")

    def reads(self) -> dict[str, list[str]]:
        """ReplicaSet -> what the ``conf`` volume of each of its live pods names."""
        return {
            rs: sorted(configmap_volumes(p)["conf"] for p in ps) for rs, ps in self.pods().items()
        }

    def config_hash(self) -> str:
        template = self.kube.get(DEPLOYMENTS, NS, "web")["spec"]["template"]
        return str((template["metadata"].get("annotations") or {}).get("cbop.dev/config-hash", ""))


@pytest.fixture
def legacy(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Plane]:
    """A fresh control plane running the workload controllers, and v0.2.0's files."""
    plane = ControlPlane(
        binaries=control_plane.binaries,
        workdir=tmp_path_factory.mktemp("legacy-revisions-plane"),
        controllers=WORKLOAD_CONTROLLERS,
    )
    plane.start(timeout=120)
    env = Plane(plane, release_tree("v0.2.0", tmp_path_factory.mktemp("v0.2.0")),
                tmp_path_factory.mktemp("legacy-revisions-logs"))  # fmt: skip
    try:
        yield env
    finally:
        env.kube.close()
        plane.stop()


def _wait_legacy_policy(env: Plane) -> None:
    """Wait until 0.2.0's policy pins a probe pod from its params (as 0.2.0's tests did)."""
    probe = f"{NS}-probe"
    env.kube.create(NAMESPACES, None, {"metadata": {"name": probe}})
    env.kube.create(
        CONFIGMAPS, probe, {"metadata": {"name": PARAMS_NAME}, "data": {"0" * 40: "p=p-0123456789"}}
    )
    body = {
        "metadata": {
            "generateName": "probe-",
            "annotations": {"cbop.dev/config-hash": "sha256:" + "0" * 64},
        },
        "spec": {
            "containers": [{"name": "c", "image": "registry.invalid/probe:1"}],
            "volumes": [{"name": "conf", "configMap": {"name": "p"}}],
        },
    }
    try:
        wait_for(
            lambda: (
                configmap_volumes(env.kube.create(PODS, probe, body, dry_run=True))["conf"]
                == "p-0123456789"
            ),
            WAIT,
            message="0.2.0's policy pins a pod",
        )
    finally:
        env.kube.delete(NAMESPACES, None, probe)


def _deployment() -> dict[str, Any]:
    labels = {"app": "web"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"cbop.dev/rollout": "true"}},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                    "volumes": [{"name": "conf", "configMap": {"name": "web-conf"}}],
                },
            },
        },
    }


def _change(env: Plane, data: dict[str, str]) -> None:
    spec = env.kube.get(CONFIGBUNDLES, NS, "web")["spec"]
    time.sleep(1.1)
    set_spec(env.kube, NS, "web", {**spec, "data": data})


def _scale(env: Plane, replicas: int) -> None:
    env.kube.patch(DEPLOYMENTS, NS, "web", {"spec": {"replicas": replicas}})


def _uids(env: Plane) -> set[str]:
    return {p["metadata"]["uid"] for ps in env.pods().values() for p in ps}


def test_an_upgrade_from_0_2_0_restarts_no_pod_and_leaves_none_unpinned(legacy: Plane) -> None:
    env = legacy
    c1, c2, c3, c4 = ({"v": str(i)} for i in (1, 2, 3, 4))
    r2, r3, r4 = (revision_of("web-conf", c) for c in (c2, c3, c4))
    env.kubectl("apply", "--server-side", "-k", str(env.old / "manifests"))
    env.kubectl("wait", "--for=condition=established", "crd/configbundles.cbop.dev")
    env.kubectl("apply", "-k", str(env.old / "manifests" / "revisions"))
    _wait_legacy_policy(env)
    env.kubectl("create", "namespace", NS)
    spec = {"configMapName": "web-conf", "data": c1, "revisions": {"enabled": True, "keep": 1}}
    env.kube.create(CONFIGBUNDLES, NS, {**bundle("web", spec), "apiVersion": "cbop.dev/v1beta1"})
    env.kube.create(DEPLOYMENTS, NS, _deployment())

    # 0.2.0 rolls the Deployment for c2: its pins, its ReplicaSet's owner reference.
    old = env.operator(release="0.2.0")
    try:
        wait_for(
            lambda: (
                "cbop.dev/config-baseline"
                in env.kube.get(DEPLOYMENTS, NS, "web")["metadata"]["labels"]
            ),
            WAIT,
            message="0.2.0's baseline",
        )
        _change(env, c2)
        wait_for(lambda: list(env.reads().values()) == [[r2]], WAIT, message="0.2.0's pod on r2")
        h2 = env.config_hash()
    finally:
        assert old.stop() == 0, old.logs()[-3000:]
    revision = env.kube.get(CONFIGMAPS, NS, r2)
    assert "ReplicaSet" in {r["kind"] for r in revision["metadata"]["ownerReferences"]}
    params = env.kube.get(CONFIGMAPS, NS, PARAMS_NAME)
    deployment = env.kube.get(DEPLOYMENTS, NS, "web")
    pods = _uids(env)
    assert mapping_of(deployment) == {}  # 0.2.0's template: its mapping is in the pins

    # The upgrade, as the CHANGELOG says.
    env.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "manifests"))
    env.kubectl("apply", "--server-side", "-k", str(REPO / "manifests" / "revisions"))
    wait_policy_effective(env.kube, f"{NS}-probe-new", WAIT)
    new = env.operator(release="new")
    try:
        time.sleep(QUIET)
        # No pod restarted, the workload not written, 0.2.0's pins and revision kept.
        assert _uids(env) == pods
        after = env.kube.get(DEPLOYMENTS, NS, "web")
        assert after["metadata"]["generation"] == deployment["metadata"]["generation"]
        assert after["spec"] == deployment["spec"]
        assert (
            env.kube.get(CONFIGMAPS, NS, PARAMS_NAME)["metadata"]["resourceVersion"]
            == (params["metadata"]["resourceVersion"])
        )
        assert (
            env.kube.get(CONFIGMAPS, NS, r2)["metadata"]["ownerReferences"]
            == (revision["metadata"]["ownerReferences"])
        )
        assert new.metrics()["cbop_revision_legacy_pins_namespaces{}"] == 1
        # A new pod of 0.2.0's template (a scale-up) is still pinned, by 0.2.0's policy.
        _scale(env, 2)
        wait_for(lambda: list(env.reads().values()) == [[r2, r2]], WAIT, message="2 pods on r2")
        assert pods < _uids(env)
        # The next change rolls the new way: the mapping in the template.
        _change(env, c3)
        wait_for(lambda: list(env.reads().values()) == [[r3, r3]], WAIT, message="pods on r3")
        assert mapping_of(env.kube.get(DEPLOYMENTS, NS, "web")) == {"web-conf": r3}
        h3 = env.config_hash()
        # An undo to 0.2.0's template: its revision, still there (0.2.0's pins name it,
        # its ReplicaSet owns it), and not rolled forward.
        env.kubectl("rollout", "undo", "deployment/web", "-n", NS)
        wait_for(lambda: env.config_hash() == h2, WAIT, message="the undo")
        wait_for(lambda: list(env.reads().values()) == [[r2, r2]], WAIT, message="pods on r2 again")
        generation = env.kube.get(DEPLOYMENTS, NS, "web")["metadata"]["generation"]
        time.sleep(QUIET)
        assert env.kube.get(DEPLOYMENTS, NS, "web")["metadata"]["generation"] == generation
        assert env.config_hash() == h2
        assert h3 != h2
    finally:
        assert new.stop() == 0, new.logs()[-3000:]

    # Rolled back to 0.2.0: the next change rolls 0.2.0's way (pins, config-hash only),
    # and its pods are pinned by 0.2.0's policy.
    old = env.operator(release="0.2.0")
    try:
        _change(env, c4)
        wait_for(lambda: list(env.reads().values()) == [[r4, r4]], WAIT, message="pods on r4")
        assert mapping_of(env.kube.get(DEPLOYMENTS, NS, "web")) == {}
    finally:
        assert old.stop() == 0, old.logs()[-3000:]


def test_helm_upgrade_keeps_0_2_0s_policy_only_where_asked(legacy: Plane) -> None:
    """``revisions.keepLegacyPinPolicy=true``: ``helm upgrade`` from 0.2.0's chart with
    ``revisions.pinPods`` keeps 0.2.0's policy and binding (the same objects) and adds the
    new one; turned off later, the chart deletes the old ones."""
    env = legacy
    helm = helm_binary()

    def run_helm(*args: str) -> str:
        result = subprocess.run(
            [helm, f"--kubeconfig={env.plane.kubeconfig_path}", *args],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
        return result.stdout

    run_helm("install", "rel", str(env.old / "charts" / "cbop"), "-n", "cbop-system",
             "--create-namespace", "--set", "revisions.pinPods=true")  # fmt: skip
    old = {kind: env.kube.get(res, None, "rel-cbop-pin-revisions")["metadata"]["uid"]
           for kind, res in (("policy", POLICIES), ("binding", BINDINGS))}  # fmt: skip
    crds = run_helm("show", "crds", str(REPO / "charts" / "cbop"))
    env.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=crds)
    chart = str(REPO / "charts" / "cbop")
    keep = ["--set", "revisions.pinPods=true", "--set", "revisions.keepLegacyPinPolicy=true"]
    run_helm("upgrade", "rel", chart, "-n", "cbop-system", "--no-hooks", *keep)
    for kind, res in (("policy", POLICIES), ("binding", BINDINGS)):
        assert env.kube.get(res, None, "rel-cbop-pin-revisions")["metadata"]["uid"] == old[kind]
        assert env.kube.get(res, None, "rel-cbop-pin-pods")
    run_helm("upgrade", "rel", chart, "-n", "cbop-system", "--no-hooks",
             "--set", "revisions.pinPods=true")  # fmt: skip
    for res in (POLICIES, BINDINGS):
        with pytest.raises(ApiError) as gone:
            env.kube.get(res, None, "rel-cbop-pin-revisions")
        assert gone.value.is_not_found
        assert env.kube.get(res, None, "rel-cbop-pin-pods")


def test_the_chart_keeps_0_2_0s_policy_as_0_2_0_rendered_it() -> None:
    """``revisions.keepLegacyPinPolicy`` renders 0.2.0's policy and binding unchanged, so
    ``helm upgrade`` keeps them (same names, same spec) instead of deleting them."""
    old = subprocess.run(
        ["git", "-C", str(REPO), "show", "v0.2.0:charts/cbop/templates/pin_revisions.yaml"],
        capture_output=True,
        text=True,
        check=False,
    )
    if old.returncode != 0:  # a clone without the tag: its commit
        old = subprocess.run(
            ["git", "-C", str(REPO), "show", "3987185:charts/cbop/templates/pin_revisions.yaml"],
            capture_output=True,
            text=True,
            check=True,
        )

    def body(text: str) -> str:
        return text[text.index("apiVersion:") :].strip()

    kept = (REPO / "charts/cbop/templates/legacy_pin_revisions.yaml").read_text()
    assert body(kept) == body(old.stdout)
    assert kept.startswith("{{- if .Values.revisions.keepLegacyPinPolicy }}")
