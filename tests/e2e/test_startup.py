"""cbop deployed before what it needs: its CRD, its RBAC (GitOps tools apply in any order).

The CRD tests run on a control plane of their own, which starts without the
ConfigBundle CRD and may lose it (the session's control plane keeps it installed for
every other test). Each test starts cbop as a subprocess and reads only what a user sees:
its probes, its log lines, its exit code, and the bundles' status.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from cbop.kube import CONFIGBUNDLES, NAMESPACES, ApiError, KubeClient, Resource
from cbop_testing.envtest import ControlPlane

from .fixtures import CRDS
from .harness import CRD, Operator, bundle, error_lines, ready, run_cli, wait_for

ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
CRD_NAME = "configbundles.cbop.dev"
#: informer.healthy() used to fail after 60 s of a failing list/watch.
LIVENESS_WINDOW = 65.0


@pytest.fixture(scope="module")
def bare_plane(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """A control plane without the ConfigBundle CRD (the session's one has it)."""
    plane = ControlPlane(
        binaries=control_plane.binaries, workdir=tmp_path_factory.mktemp("no-crd-plane")
    )
    plane.start(timeout=120)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def bare(bare_plane: ControlPlane) -> Iterator[KubeClient]:
    """An admin client of the bare control plane; the CRD is removed after each test."""
    kube = KubeClient.from_config(kubeconfig=str(bare_plane.kubeconfig_path), qps=0)
    try:
        yield kube
    finally:
        with contextlib.suppress(ApiError):
            _delete_crd(kube)
        kube.close()


def _install_crd(kube: KubeClient) -> None:
    kube.create(CRDS, None, yaml.safe_load(CRD.read_text()))


def _served(kube: KubeClient) -> bool:
    try:
        kube.list(CONFIGBUNDLES, None, limit=1)
    except ApiError:
        return False
    return True


def _delete_crd(kube: KubeClient) -> None:
    with contextlib.suppress(ApiError):
        for item in kube.list(CONFIGBUNDLES, None)["items"]:
            meta = item["metadata"]
            if meta.get("finalizers"):
                kube.patch(
                    CONFIGBUNDLES,
                    meta["namespace"],
                    meta["name"],
                    {"metadata": {"finalizers": None}},
                )
    kube.delete(CRDS, None, CRD_NAME)
    wait_for(lambda: not _crd_exists(kube), 60, interval=0.5, message="CRD deleted")


def _crd_exists(kube: KubeClient) -> bool:
    try:
        kube.get(CRDS, None, CRD_NAME)
    except ApiError as err:
        if err.is_not_found:
            return False
        raise
    return True


def _new_namespace(kube: KubeClient, prefix: str) -> str:
    name = f"{prefix}-{secrets.token_hex(3)}"
    kube.create(NAMESPACES, None, {"metadata": {"name": name}})
    return name


def _probe(op: Operator, path: str) -> tuple[int, str]:
    assert op.proc.poll() is None, f"cbop exited with {op.proc.returncode}:\n{op.logs()}"
    try:
        return op.get(path)
    except OSError:
        return 0, ""


def _stop(op: Operator) -> None:
    code = op.stop()
    assert code == 0, f"cbop exited with {code}:\n{op.log_path.read_text()[-3000:]}"


def _wait_not_ready(op: Operator, needle: str, message: str) -> str:
    """Wait until ``/readyz`` answers 503 with ``needle`` in its body; return the body."""
    got = wait_for(
        lambda: (r := _probe(op, "/readyz"))[0] == 503 and needle in r[1] and r,
        60,
        message=message,
    )
    return str(got[1])


def _records(op: Operator, event: str, informer_prefix: str) -> list[dict[str, Any]]:
    """Log records whose event ends with ``event``, from informers named ``prefix...``."""
    return [
        r
        for r in op.log_records()
        if str(r.get("event", "")).endswith(event)
        and str(r.get("informer", "")).startswith(informer_prefix)
    ]


def test_operator_started_before_its_crd_waits_and_starts_when_it_appears(
    bare_plane: ControlPlane, bare: KubeClient, tmp_path: Path
) -> None:
    """No CRD: not ready (the CRD named), alive past the old 60 s liveness limit, one log
    line per attempt; the CRD applied: ready and reconciling without a restart."""
    ns = _new_namespace(bare, "no-crd")
    op = Operator(bare_plane.kubeconfig_path, [ns], log_path=tmp_path / "cbop.log")
    try:
        body = _wait_not_ready(op, CRD_NAME, "/readyz naming the missing CRD")
        assert "informer configbundles" in body
        assert "CustomResourceDefinition configbundles.cbop.dev" in body
        # Waiting for the CRD is not a liveness failure, however long it takes.
        deadline = time.monotonic() + LIVENESS_WINDOW
        while time.monotonic() < deadline:
            assert _probe(op, "/healthz")[0] == 200, op.logs()[-3000:]
            time.sleep(1)
        assert _probe(op, "/readyz")[0] == 503
        # One line per attempt: nothing else from that informer, and each line is at
        # least its backoff delay after the previous one.
        lines = [r for r in op.log_records() if r.get("informer") == f"configbundles/{ns}"]
        assert len(lines) >= 2, op.logs()[-3000:]
        assert {r["event"] for r in lines} == {"list failed; retrying"}
        assert all(CRD_NAME in r["problem"] and r["retry_in"] <= 5.0 for r in lines)
        stamps = [datetime.fromisoformat(r["timestamp"]).timestamp() for r in lines]
        for prev, gap in zip(lines, itertools.pairwise(stamps), strict=False):
            assert gap[1] - gap[0] >= prev["retry_in"] - 0.05

        _install_crd(bare)
        wait_for(lambda: _served(bare), 60, message="CRD served")
        bare.create(CONFIGBUNDLES, ns, bundle("app", {"data": {"a": "1"}}))
        wait_for(lambda: ready(bare, ns, "app"), 60, message="bundle Ready after the CRD")
        wait_for(lambda: _probe(op, "/readyz")[0] == 200, 30, message="/readyz 200")
        assert op.proc.poll() is None
    finally:
        _stop(op)


def test_crd_deleted_and_recreated_at_runtime_is_picked_up_within_seconds(
    bare_plane: ControlPlane, bare: KubeClient, tmp_path: Path
) -> None:
    """The CRD goes away under a running operator: not ready, still alive; it comes
    back: the new bundles reconcile without waiting out a watch timeout (300-600 s)."""
    _install_crd(bare)
    wait_for(lambda: _served(bare), 60, message="CRD served")
    ns = _new_namespace(bare, "crd-again")
    op = Operator(bare_plane.kubeconfig_path, [ns], log_path=tmp_path / "cbop.log")
    try:
        op.wait_ready()
        bare.create(CONFIGBUNDLES, ns, bundle("first", {"data": {"a": "1"}}))
        wait_for(lambda: ready(bare, ns, "first"), 60, message="first Ready")

        _delete_crd(bare)
        _wait_not_ready(op, CRD_NAME, "/readyz naming the deleted CRD")
        assert _probe(op, "/healthz")[0] == 200
        # Retried on a schedule that stays short (at most 5 s), so the CRD's return is
        # seen within seconds; the general one would have reached 12.8 s by the fourth.
        retries = wait_for(
            lambda: len(r := _records(op, "failed; retrying", "configbundles")) >= 4 and r,
            90,
            message="four retries while the CRD is gone",
        )
        assert all(CRD_NAME in r["problem"] and r["retry_in"] <= 5.0 for r in retries)
        assert _probe(op, "/healthz")[0] == 200

        _install_crd(bare)
        wait_for(lambda: _served(bare), 60, message="CRD served again")
        bare.create(CONFIGBUNDLES, ns, bundle("second", {"data": {"b": "2"}}))
        # Generous, yet far below the watch timeout an informer would otherwise sit out.
        wait_for(lambda: ready(bare, ns, "second"), 60, message="second Ready after re-creation")
        wait_for(lambda: _probe(op, "/readyz")[0] == 200, 30, message="/readyz 200 again")
    finally:
        _stop(op)


def test_once_without_the_crd_fails_at_once_naming_it(
    bare_plane: ControlPlane, bare: KubeClient
) -> None:
    """``--once`` keeps failing fast: exit 2, one line naming the CRD."""
    result = run_cli(bare_plane.kubeconfig_path, "--once", timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert CRD_NAME in lines[0]


# ---------------------------------------------------------------- 403 (session plane)

_BASE_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["cbop.dev"],
        "resources": ["configbundles"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    {
        "apiGroups": ["cbop.dev"],
        "resources": ["configbundles/status"],
        "verbs": ["get", "update", "patch"],
    },
    {"apiGroups": ["cbop.dev"], "resources": ["configbundles/finalizers"], "verbs": ["update"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    # The pods of pinned templates, which revisions verify (docs/revisions.md).
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
]
#: The rollout controllers' rules (``--rollout`` is on by default).
_APPS_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["apps"],
        "resources": ["deployments", "statefulsets", "daemonsets"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    # The pinned templates' history, which keeps revisions (docs/revisions.md).
    {
        "apiGroups": ["apps"],
        "resources": ["replicasets", "controllerrevisions"],
        "verbs": ["get", "list", "watch"],
    },
]
_CONFIGMAPS_WITHOUT_LIST = {
    "apiGroups": [""],
    "resources": ["configmaps"],
    "verbs": ["get", "create", "update", "patch", "delete"],
}
_CONFIGMAPS_ALL = {
    **_CONFIGMAPS_WITHOUT_LIST,
    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
}


def _user_with_rules(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    user: str,
    rules: list[dict[str, Any]],
) -> Path:
    """A user whose Role in ``namespace`` grants ``rules``; return its kubeconfig."""
    role = {"metadata": {"name": "cbop"}, "rules": rules}
    kube.create(ROLES, namespace, role)
    kube.create(
        ROLE_BINDINGS,
        namespace,
        {
            "metadata": {"name": "cbop"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cbop"},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )
    return control_plane.kubeconfig_for_user(user)


def _user_without_configmap_list(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, user: str
) -> Path:
    """A user whose Role in ``namespace`` grants everything cbop needs but ``list`` (and
    ``watch``) on configmaps."""
    rules = [*_BASE_RULES, *_APPS_RULES, _CONFIGMAPS_WITHOUT_LIST]
    return _user_with_rules(control_plane, kube, namespace, user, rules)


def test_once_without_list_on_configmaps_names_the_403_at_once(
    control_plane: ControlPlane, kube: KubeClient, namespace: str
) -> None:
    """A Role without ``list`` on configmaps: exit 2 with verb, resource and namespace
    named, not a 60 s wait ending in "timed out"."""
    path = _user_without_configmap_list(control_plane, kube, namespace, "no-cm-list-once")
    kube.create(CONFIGBUNDLES, namespace, bundle("app", {"data": {"a": "1"}}))
    result = run_cli(path, "--once", f"--namespace={namespace}", timeout=120)
    assert result.returncode == 2, result.stderr
    # One error line (after the informer's JSON log line of the refused attempt).
    errors = error_lines(result.stderr)
    assert len(errors) == 1, result.stderr
    assert "timed out" not in errors[0]
    assert f'forbidden to list configmaps in namespace "{namespace}" (403)' in errors[0]
    assert "Traceback" not in result.stderr


def test_operator_without_list_on_configmaps_is_not_ready_until_rbac_allows_it(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """The 403 is on /readyz (naming verb, resource, scope) and logged once per backoff;
    liveness stays green; granting ``list`` makes cbop ready and reconciling."""
    path = _user_without_configmap_list(control_plane, kube, namespace, "no-cm-list-op")
    kube.create(CONFIGBUNDLES, namespace, bundle("app", {"data": {"a": "1"}}))
    op = Operator(path, [namespace], log_path=tmp_path / "cbop.log")
    try:
        body = _wait_not_ready(op, "403", "/readyz naming the 403")
        assert f'forbidden to list configmaps in namespace "{namespace}" (403)' in body
        assert f"informer configmaps/{namespace}" in body
        assert _probe(op, "/healthz")[0] == 200
        lines = wait_for(
            lambda: len(r := _records(op, "list failed; retrying", "configmaps")) >= 2 and r,
            60,
            message="two attempts logged",
        )
        assert all(r["reason"] == "Forbidden" and r["retry_in"] > 0 for r in lines)
        assert not _records(op, "backing off", "configmaps")  # one line per attempt

        rules = [*_BASE_RULES, *_APPS_RULES, _CONFIGMAPS_ALL]
        kube.patch(ROLES, namespace, "cbop", {"rules": rules}, patch_type="merge")
        wait_for(lambda: _probe(op, "/readyz")[0] == 200, 90, message="/readyz 200 after RBAC")
        wait_for(lambda: ready(kube, namespace, "app"), 60, message="bundle Ready")
    finally:
        _stop(op)


def test_without_the_apps_rules_bundles_are_reconciled_and_readyz_names_the_refusal(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """Per-controller cache sync: with ``--rollout`` on (the default) and RBAC that lacks
    the ``apps`` rules, the rollout controllers' lists are refused, yet the ConfigBundle
    controller starts and reconciles; ``/readyz`` fails naming the refused list (so the
    misconfiguration holds back a rolling upgrade); granting the rules makes it ready."""
    path = _user_with_rules(
        control_plane, kube, namespace, "no-apps", [*_BASE_RULES, _CONFIGMAPS_ALL]
    )
    kube.create(CONFIGBUNDLES, namespace, bundle("app", {"data": {"a": "1"}}))
    op = Operator(path, [namespace], log_path=tmp_path / "cbop.log")
    try:
        wait_for(
            lambda: ready(kube, namespace, "app"), 60, message="bundle Ready without apps RBAC"
        )
        body = _wait_not_ready(op, "deployments", "/readyz naming the refused deployments list")
        assert f'forbidden to list deployments.apps in namespace "{namespace}" (403)' in body
        assert f"informer deployments/{namespace}" in body
        assert f"[+]informer configbundles/{namespace} ok" in body
        assert _probe(op, "/healthz")[0] == 200
        kube.create(CONFIGBUNDLES, namespace, bundle("second", {"data": {"b": "2"}}))
        wait_for(lambda: ready(kube, namespace, "second"), 60, message="a new bundle Ready too")

        rules = [*_BASE_RULES, *_APPS_RULES, _CONFIGMAPS_ALL]
        kube.patch(ROLES, namespace, "cbop", {"rules": rules}, patch_type="merge")
        wait_for(lambda: _probe(op, "/readyz")[0] == 200, 90, message="/readyz 200 after RBAC")
    finally:
        _stop(op)
