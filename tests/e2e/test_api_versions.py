"""The ConfigBundle API versions on a real API server: v1beta1 stored, v1alpha1 served.

- Nothing is lost through either version: an object written through v1beta1 with every
  field set survives a read-modify-write through v1alpha1 (``kubectl replace``) and a
  ``kubectl apply`` of an old v1alpha1 manifest, and v1alpha1 clients see kubectl's
  deprecation warning. No cbop process runs meanwhile: with conversion strategy None the
  API stays readable and writable whether cbop is up or not.
- ``cbop migrate-storage`` after an upgrade from 0.1.0 (the CRD of release v0.1.0,
  bundles stored as v1alpha1): it rewrites every bundle in v1beta1, trims
  ``storedVersions``, changes no spec and no ConfigMap, is safe to run twice and while
  cbop reconciles, and says what it did.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cbop.kube import CONFIGBUNDLES, CUSTOM_RESOURCE_DEFINITIONS, KubeClient, Resource
from cbop_testing.apiexamples import (
    FULL_CONFIGBUNDLE_SPEC,
    FULL_SECRET_BUNDLE_SPEC,
    configbundle,
)
from cbop_testing.envtest import ControlPlane

from .harness import CRD, Operator, apiserver_writes, ready, wait_for
from .releases import release_tree

CRD_NAME = "configbundles.cbop.dev"
WARNING = "Warning: cbop.dev/v1alpha1 ConfigBundle is deprecated; use cbop.dev/v1beta1"


def _kubectl(
    plane: ControlPlane, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(plane.binaries.kubectl), f"--kubeconfig={plane.kubeconfig_path}", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        check=False,
    )


def _ok(plane: ControlPlane, *args: str, stdin: str | None = None) -> str:
    result = _kubectl(plane, *args, stdin=stdin)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


@pytest.mark.parametrize(
    "full",
    [FULL_CONFIGBUNDLE_SPEC, FULL_SECRET_BUNDLE_SPEC],
    ids=["configmap-target", "secret-target"],
)
def test_nothing_is_lost_through_either_version_and_v1alpha1_warns(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, full: dict[str, Any]
) -> None:
    kube.create(CONFIGBUNDLES, namespace, configbundle("full", namespace, full))
    read = _kubectl(
        control_plane, "get", "configbundles.v1alpha1.cbop.dev", "full", "-n", namespace,
        "-o", "json",
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert WARNING in read.stderr
    old = json.loads(read.stdout)
    assert old["apiVersion"] == "cbop.dev/v1alpha1"
    assert old["spec"] == full

    # A read-modify-write through v1alpha1 (what `kubectl edit` or `replace` does).
    old["metadata"]["labels"] = {"touched": "v1alpha1"}
    replaced = _kubectl(control_plane, "replace", "-f", "-", stdin=json.dumps(old))
    assert replaced.returncode == 0, replaced.stderr
    after = kube.get(CONFIGBUNDLES, namespace, "full")
    assert after["apiVersion"] == "cbop.dev/v1beta1"
    assert after["spec"] == full
    assert after["metadata"]["labels"] == {"touched": "v1alpha1"}

    # An old manifest applied again: it names a few fields; the others stay.
    # (A Secret target takes no data: the manifest names its labels instead.)
    field, value = (
        ("labels", {"team": "again"})
        if full["target"]["kind"] == "Secret"
        else ("data", {"greeting": "hello again"})
    )
    manifest = configbundle("full", namespace, {field: value}, version="v1alpha1")
    applied = _kubectl(control_plane, "apply", "-f", "-", stdin=json.dumps(manifest))
    assert applied.returncode == 0, applied.stderr
    assert WARNING in applied.stderr
    spec = kube.get(CONFIGBUNDLES, namespace, "full")["spec"]
    assert spec[field] == {**full[field], **value}
    assert {k: v for k, v in spec.items() if k != field} == {
        k: v for k, v in full.items() if k != field
    }


# ---------------------------------------------------------------- storage migration


@pytest.fixture
def upgraded(
    tmp_path_factory: pytest.TempPathFactory, control_plane: ControlPlane
) -> Iterator[ControlPlane]:
    """A control plane of its own: release v0.1.0's CRD, bundles stored as v1alpha1,
    then this checkout's CRD applied over it (v1beta1 the storage version)."""
    old = release_tree("v0.1.0", tmp_path_factory.mktemp("v0.1.0"))
    plane = ControlPlane(
        binaries=control_plane.binaries, workdir=tmp_path_factory.mktemp("upgraded-plane")
    )
    plane.start(timeout=120)
    try:
        _ok(plane, "apply", "-f", str(old / "manifests" / "crd" / "cbop.dev_configbundles.yaml"))
        _ok(plane, "wait", "--for=condition=established", f"crd/{CRD_NAME}")
        _ok(plane, "create", "namespace", "legacy")
        for i in range(12):
            body = configbundle(f"b{i}", "legacy", {"data": {"k": str(i)}}, version="v1alpha1")
            _ok(plane, "create", "-f", "-", stdin=json.dumps(body))
        _ok(plane, "apply", "--server-side", "--force-conflicts", "-f", str(CRD))
        yield plane
    finally:
        plane.stop()


def _stored_versions(kube: KubeClient) -> list[str]:
    crd = kube.get(CUSTOM_RESOURCE_DEFINITIONS, None, CRD_NAME)
    return list(crd["status"]["storedVersions"])


def _migrate(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cbop", "migrate-storage", f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _job_account(plane: ControlPlane) -> Path:
    """A kubeconfig of the migration Job's ServiceAccount, with manifests/migrate/'s RBAC."""
    _ok(plane, "create", "namespace", "cbop-system")
    rbac = CRD.parents[1] / "migrate" / "rbac.yaml"
    _ok(plane, "apply", "-n", "cbop-system", "-f", str(rbac))
    job = yaml.safe_load((CRD.parents[1] / "migrate" / "job.yaml").read_text())
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate-storage"]
    account = job["spec"]["template"]["spec"]["serviceAccountName"]
    return plane.kubeconfig_for_service_account("cbop-system", account)


def _bundles(kube: KubeClient) -> dict[str, dict[str, Any]]:
    return {b["metadata"]["name"]: b for b in kube.list(CONFIGBUNDLES, "legacy")["items"]}


def test_migrate_storage_rewrites_every_bundle_once_then_trims_stored_versions(
    upgraded: ControlPlane,
) -> None:
    """No cbop runs: the counts are exact. The Job's own ServiceAccount and RBAC
    (manifests/migrate/) suffice; nothing but the bundles themselves is written."""
    plane = upgraded
    with KubeClient.from_config(kubeconfig=str(plane.kubeconfig_path), qps=0) as kube:
        assert _stored_versions(kube) == ["v1alpha1", "v1beta1"]
        before = _bundles(kube)
        cm_writes = sum(apiserver_writes(kube, ("configmaps",)).values())
        job = _job_account(plane)
        first = _migrate(job)
        assert first.returncode == 0, first.stderr
        assert (
            f"{CRD_NAME}: rewrote 12 objects in v1beta1 (0 already were, 0 gone meanwhile);"
            " storedVersions ['v1alpha1', 'v1beta1'] -> ['v1beta1']"
        ) in first.stdout
        assert _stored_versions(kube) == ["v1beta1"]
        after = _bundles(kube)
        for name, bundle in before.items():
            now = after[name]
            assert now["metadata"]["resourceVersion"] != bundle["metadata"]["resourceVersion"]
            assert now["metadata"]["generation"] == bundle["metadata"]["generation"]
            assert now["spec"] == bundle["spec"]
            assert now.get("status") == bundle.get("status")  # no status written

        second = _migrate(job, "--output=json")
        assert second.returncode == 0, second.stderr
        (report,) = json.loads(second.stdout)
        assert (report["stored_before"], report["rewritten"], report["unchanged"]) == (
            ["v1beta1"],
            0,
            0,
        )
        assert {n: b["metadata"]["resourceVersion"] for n, b in _bundles(kube).items()} == {
            n: b["metadata"]["resourceVersion"] for n, b in after.items()
        }
        assert sum(apiserver_writes(kube, ("configmaps",)).values()) == cm_writes


def test_migrate_storage_while_cbop_reconciles(upgraded: ControlPlane, tmp_path: Path) -> None:
    """cbop converges the same bundles at the same time (its status writes re-encode
    them too): every bundle is rewritten by one or the other, lost races are retried,
    storedVersions is trimmed, and cbop's work is undisturbed."""
    plane = upgraded
    with KubeClient.from_config(kubeconfig=str(plane.kubeconfig_path), qps=0) as kube:
        before = _bundles(kube)
        op = Operator(
            plane.kubeconfig_path, ["legacy"], args=["--no-rollout"], log_path=tmp_path / "cbop.log"
        )
        try:
            result = _migrate(plane.kubeconfig_path, "--output=json")
            assert result.returncode == 0, result.stderr
            (report,) = json.loads(result.stdout)
            assert report["rewritten"] + report["unchanged"] + report["gone"] == 12
            assert report["failed"] == []
            assert _stored_versions(kube) == ["v1beta1"]
            op.wait_ready(60)
            wait_for(
                lambda: all(ready(kube, "legacy", name) for name in before), 60, message="Ready"
            )
            assert {n: b["spec"] for n, b in _bundles(kube).items()} == {
                n: b["spec"] for n, b in before.items()
            }
        finally:
            assert op.stop() == 0


def test_migrate_storage_explains_a_missing_crd_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, control_plane: ControlPlane
) -> None:
    plane = ControlPlane(binaries=control_plane.binaries, workdir=tmp_path_factory.mktemp("bare"))
    plane.start(timeout=120)
    try:
        named = _migrate(plane.kubeconfig_path, f"--crd={CRD_NAME}")
        assert named.returncode == 2
        assert len(named.stderr.strip().splitlines()) == 1, named.stderr
        assert "storage migration stopped" in named.stderr
        everything = _migrate(plane.kubeconfig_path)
        assert everything.returncode == 0, everything.stderr
        assert "no CRD of group cbop.dev is installed" in everything.stdout
    finally:
        plane.stop()


def test_migrate_storage_refuses_when_the_crd_was_not_upgraded(
    tmp_path_factory: pytest.TempPathFactory, control_plane: ControlPlane
) -> None:
    """Only 0.1.0's CRD installed (v1alpha1 served and stored): an upgrade that skipped
    the CRDs, as Helm does. Run as the migration Job runs it (its args, its own
    ServiceAccount and RBAC, which the chart's post-upgrade hook renders alike), it
    exits non-zero with one line naming the missing v1beta1 and saying to apply the new
    CRD first, and writes nothing. It used to print "stored as v1alpha1 only; nothing
    to do" and exit 0, so the hook succeeded on a cluster that was not upgraded."""
    old = release_tree("v0.1.0", tmp_path_factory.mktemp("v0.1.0-only"))
    plane = ControlPlane(
        binaries=control_plane.binaries, workdir=tmp_path_factory.mktemp("old-crd-plane")
    )
    plane.start(timeout=120)
    try:
        _ok(plane, "apply", "-f", str(old / "manifests" / "crd" / "cbop.dev_configbundles.yaml"))
        _ok(plane, "wait", "--for=condition=established", f"crd/{CRD_NAME}")
        _ok(plane, "create", "namespace", "legacy")
        for i in range(3):
            body = configbundle(f"b{i}", "legacy", {"data": {"k": str(i)}}, version="v1alpha1")
            _ok(plane, "create", "-f", "-", stdin=json.dumps(body))
        with KubeClient.from_config(kubeconfig=str(plane.kubeconfig_path), qps=0) as kube:
            old_api = Resource("cbop.dev", "v1alpha1", "configbundles", "ConfigBundle")
            versions = {b["metadata"]["name"]: b["metadata"]["resourceVersion"]
                        for b in kube.list(old_api, "legacy")["items"]}  # fmt: skip
            crd_before = kube.get(CUSTOM_RESOURCE_DEFINITIONS, None, CRD_NAME)
            for run in (_migrate(_job_account(plane)), _migrate(plane.kubeconfig_path)):
                assert run.returncode == 2, run.stdout + run.stderr
                (line,) = run.stderr.strip().splitlines()
                assert "configbundles.cbop.dev does not serve cbop.dev/v1beta1" in line, line
                assert "apply the new CRD first" in line, line
                assert "nothing to do" not in run.stdout + run.stderr
            after = {b["metadata"]["name"]: b["metadata"]["resourceVersion"]
                     for b in kube.list(old_api, "legacy")["items"]}  # fmt: skip
            assert after == versions
            crd_after = kube.get(CUSTOM_RESOURCE_DEFINITIONS, None, CRD_NAME)
            assert crd_after["status"]["storedVersions"] == ["v1alpha1"]
            assert (
                crd_after["metadata"]["resourceVersion"]
                == (crd_before["metadata"]["resourceVersion"])
            )
    finally:
        plane.stop()
