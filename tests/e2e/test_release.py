"""``cbop release``: leaving is always possible, on a real control plane (kube-apiserver,
etcd, and kube-controller-manager's namespace controller and garbage collector).

A bundle with ``deletionPolicy: Orphan`` carries cbop's finalizer. With cbop stopped,
deleting its namespace hangs in Terminating, and deleting the bundle hangs too. The
command a release's users have (the wheel and the image: ``cbop release --all``)
releases them as cbop would: the ConfigMap keeps its content and loses cbop's owner
reference, labels and annotations (kept for good in a namespace that stays; in a
namespace being deleted, the namespace controller deletes it next, and the audit log
shows the release came first), then the finalizer comes off and the deletions finish.
It says what it did, leaves bundles not being deleted alone, is idempotent, and is safe
to run while cbop runs.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cbop.api import (
    ANNOTATION_CONTENT_HASH,
    ANNOTATION_RELEASED_BY,
    FINALIZER_ORPHAN,
    LABEL_BUNDLE,
    LABEL_MANAGED_BY,
)
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, NAMESPACES, KubeClient
from cbop_testing.envtest import ControlPlane

from .audit import read_events
from .clusterbundles import get, install_cluster_crd, make_ccb, make_namespace
from .control_plane import START_TIMEOUT, _binaries
from .fixtures import install_crd
from .harness import Operator, bundle, ready, wait_for

#: The ConfigMap writes the audit log keeps whole (request bodies), and nothing else.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: RequestResponse
    verbs: ["update", "patch", "delete", "deletecollection"]
    resources:
      - group: ""
        resources: ["configmaps"]
  - level: None
"""
#: Seconds for anything the namespace controller or cbop does here.
WAIT = 60.0


@dataclass
class Plane:
    """The module's control plane, an admin client and a place for logs."""

    control: ControlPlane
    kube: KubeClient
    tmp: Path

    def operator(self, name: str) -> Operator:
        """Start a cluster-wide cbop and wait until it is ready."""
        op = Operator(
            self.control.kubeconfig_path,
            [],
            args=["--resync-period", "2s"],
            log_path=self.tmp / f"cbop-{name}.log",
        )
        return op.wait_ready(60)

    def release(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``cbop release ARGS`` as a user runs it, with the admin kubeconfig."""
        return subprocess.run(
            [sys.executable, "-m", "cbop", "release", *args,
             f"--kubeconfig={self.control.kubeconfig_path}"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip


@pytest.fixture(scope="module")
def plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Plane]:
    control = ControlPlane(
        binaries=_binaries(request.config),
        workdir=tmp_path_factory.mktemp("release-control-plane"),
        audit_policy=AUDIT_POLICY,
    )
    control.start(timeout=START_TIMEOUT)
    kube = KubeClient.from_config(kubeconfig=str(control.kubeconfig_path), qps=0)
    try:
        install_crd(control)
        install_cluster_crd(kube)
        yield Plane(control, kube, tmp_path_factory.mktemp("release-logs"))
    finally:
        kube.close()
        control.stop()


def _terminating_for_finalizers(kube: KubeClient, name: str) -> bool:
    """Whether namespace ``name`` is Terminating with only finalizers holding it."""
    ns = get(kube, NAMESPACES, None, name)
    if ns is None or (ns.get("status") or {}).get("phase") != "Terminating":
        return False
    conditions = {c["type"]: c for c in (ns.get("status") or {}).get("conditions") or ()}
    held = conditions.get("NamespaceFinalizersRemaining") or {}
    return held.get("status") == "True" and FINALIZER_ORPHAN in held.get("message", "")


def _settled_with_finalizer(kube: KubeClient, namespace: str, name: str) -> None:
    """Wait until the bundle is Ready and carries cbop's finalizer."""

    def settled() -> bool:
        found = ready(kube, namespace, name)
        return found is not None and FINALIZER_ORPHAN in (found["metadata"].get("finalizers") or ())

    wait_for(settled, WAIT, message=f"{namespace}/{name} Ready with {FINALIZER_ORPHAN}")


def _gone(kube: KubeClient, namespace: str, name: str) -> None:
    """Wait until the bundle is gone."""

    def gone() -> bool:
        return get(kube, CONFIGBUNDLES, namespace, name) is None

    wait_for(gone, WAIT, message=f"{namespace}/{name} gone")


def _released(configmap: dict[str, Any], key: str) -> bool:
    """Whether ``configmap`` is as cbop's release leaves it, for the bundle ``key``."""
    meta = configmap["metadata"]
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    return (
        not meta.get("ownerReferences")
        and LABEL_MANAGED_BY not in labels
        and LABEL_BUNDLE not in labels
        and ANNOTATION_CONTENT_HASH not in annotations
        and annotations.get(ANNOTATION_RELEASED_BY) == key
    )


def test_with_cbop_stopped_release_lets_the_deletions_finish_and_keeps_the_content(
    plane: Plane,
) -> None:
    kube = plane.kube
    leaving = make_namespace(kube, "leaving", {"leave.test/ca": "yes"})
    staying = make_namespace(kube, "staying")
    kube.create(CONFIGBUNDLES, leaving, bundle("keep", {"deletionPolicy": "Orphan",
                                                        "data": {"a": "1"}}))  # fmt: skip
    kube.create(CONFIGBUNDLES, leaving, bundle("drop", {"data": {"b": "2"}}))
    kube.create(CONFIGBUNDLES, staying, bundle("kept", {"deletionPolicy": "Orphan",
                                                        "data": {"c": "3"}}))  # fmt: skip
    kube.create(CONFIGBUNDLES, staying, bundle("other", {"deletionPolicy": "Orphan",
                                                         "data": {"d": "4"}}))  # fmt: skip
    # A ClusterConfigBundle's stamp with deletionPolicy Orphan carries the finalizer too.
    make_ccb(kube, "ca", {"matchLabels": {"leave.test/ca": "yes"}},
             {"deletionPolicy": "Orphan", "data": {"ca.crt": "CA"}})  # fmt: skip
    op = plane.operator("first")
    try:
        for ns, name in ((leaving, "keep"), (leaving, "ca"), (staying, "kept"),
                         (staying, "other")):  # fmt: skip
            _settled_with_finalizer(kube, ns, name)
        wait_for(lambda: ready(kube, leaving, "drop"), WAIT, message="drop")
    finally:
        assert op.stop() == 0, op.logs()[-3000:]

    # cbop is stopped: both deletions hang on its finalizer.
    kube.delete(CONFIGBUNDLES, staying, "kept")
    kube.delete(NAMESPACES, None, leaving)
    wait_for(lambda: _terminating_for_finalizers(kube, leaving), WAIT,
             message="the namespace held by cbop's finalizer")  # fmt: skip
    assert get(kube, CONFIGBUNDLES, leaving, "drop") is None  # no finalizer: gone
    held = kube.get(CONFIGBUNDLES, staying, "kept")
    assert held["metadata"].get("deletionTimestamp")

    done = plane.release("--all")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    removed = f"finalizer {FINALIZER_ORPHAN} removed"
    assert (
        f"ConfigBundle {staying}/kept: ConfigMap {staying}/kept released (content kept; "
        f"cbop's owner reference, labels and annotations removed); {removed}"
    ) in lines, done.stdout
    # In the namespace being deleted, the namespace controller deleted the ConfigMaps
    # already (it deletes every object there, whatever owns it): the release lets the
    # bundles go, and says so.
    for name in ("ca", "keep"):
        assert (
            f"ConfigBundle {leaving}/{name}: ConfigMap {leaving}/{name} is gone already "
            f"(deleted with its namespace, or by hand); {removed}"
        ) in lines, done.stdout
    assert "released 3 of 3 ConfigBundles being deleted" in lines
    assert any("1 ConfigBundle with deletionPolicy Orphan not being deleted left alone" in line
               for line in lines), done.stdout  # fmt: skip

    # The namespace that stays: the bundle is gone, its ConfigMap released for good.
    _gone(kube, staying, "kept")
    kept = kube.get(CONFIGMAPS, staying, "kept")
    assert kept["data"] == {"c": "3"}
    assert _released(kept, f"{staying}/kept"), kept["metadata"]
    # The bundle not being deleted is left as it was.
    other = kube.get(CONFIGBUNDLES, staying, "other")
    assert FINALIZER_ORPHAN in other["metadata"]["finalizers"]
    assert kube.get(CONFIGMAPS, staying, "other")["metadata"]["ownerReferences"]

    # The namespace being deleted finishes. Its ConfigMaps went with it, deleted by the
    # namespace controller before it waited for the finalizers; the release wrote none.
    wait_for(lambda: get(kube, NAMESPACES, None, leaving) is None, WAIT,
             message="the namespace gone")  # fmt: skip
    events = read_events(plane.control.audit_log_path)
    by_release = [e for e in events if "fieldManager=cbop-release" in e.get("requestURI", "")]
    assert [(e["verb"], e["objectRef"]["namespace"], e["objectRef"]["name"])
            for e in by_release] == [("update", staying, "kept")]  # fmt: skip
    assert _released(by_release[0]["requestObject"], f"{staying}/kept")
    swept = [e for e in events if e["verb"] == "deletecollection"
             and e["objectRef"].get("namespace") == leaving
             and e["objectRef"].get("resource") == "configmaps"]  # fmt: skip
    assert swept, "the namespace controller deletes the namespace's ConfigMaps"
    assert all(e["userAgent"].endswith("/namespace-controller") for e in swept), swept

    again = plane.release("--all")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to do" in again.stdout
    assert "1 ConfigBundle with deletionPolicy Orphan not being deleted left alone" in again.stdout


def test_release_while_cbop_runs_releases_once_and_cbop_carries_on(plane: Plane) -> None:
    """Both release the same bundle: each write carries the resourceVersion read, so
    whichever comes second finds the work done; the bundle goes, the ConfigMap stays
    released with its content, and cbop keeps serving (a new bundle is created)."""
    kube = plane.kube
    ns = make_namespace(kube, "both")
    for i in range(5):
        kube.create(CONFIGBUNDLES, ns, bundle(f"o{i}", {"deletionPolicy": "Orphan",
                                                        "data": {"i": str(i)}}))  # fmt: skip
    op = plane.operator("running")
    try:
        for i in range(5):
            _settled_with_finalizer(kube, ns, f"o{i}")
        for i in range(5):
            kube.delete(CONFIGBUNDLES, ns, f"o{i}")
        done = plane.release("--namespace", ns)
        assert done.returncode == 0, done.stdout + done.stderr
        for i in range(5):
            _gone(kube, ns, f"o{i}")
            cm = kube.get(CONFIGMAPS, ns, f"o{i}")
            assert cm["data"] == {"i": str(i)}
            assert _released(cm, f"{ns}/o{i}"), cm["metadata"]
        kube.create(CONFIGBUNDLES, ns, bundle("after", {"data": {"x": "1"}}))
        wait_for(lambda: ready(kube, ns, "after"), WAIT, message="cbop carries on")
        errors = [r for r in op.log_records() if r.get("level") == "error"]
        assert not errors, errors
    finally:
        assert op.stop() == 0, op.logs()[-3000:]


def test_release_right_after_the_namespace_is_deleted(plane: Plane) -> None:
    """Run at once after ``kubectl delete namespace``, before the namespace controller
    has deleted the bundles: they count as being deleted (their namespace is), so one
    run is enough and the namespace goes."""
    kube = plane.kube
    ns = make_namespace(kube, "at-once")
    for i in range(3):
        kube.create(CONFIGBUNDLES, ns, bundle(f"o{i}", {"deletionPolicy": "Orphan",
                                                        "data": {"i": str(i)}}))  # fmt: skip
    op = plane.operator("at-once")
    try:
        for i in range(3):
            _settled_with_finalizer(kube, ns, f"o{i}")
    finally:
        assert op.stop() == 0, op.logs()[-3000:]
    kube.delete(NAMESPACES, None, ns)
    done = plane.release("--namespace", ns)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "released 3 of 3 ConfigBundles being deleted" in done.stdout, done.stdout
    wait_for(lambda: get(kube, NAMESPACES, None, ns) is None, WAIT, message="the namespace gone")
