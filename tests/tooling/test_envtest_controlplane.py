"""ControlPlane behaviour that needs no binaries: argument checks and not-running errors."""

from __future__ import annotations

import pytest

from cbop_testing.envtest import ControlPlane, ControlPlaneNotRunningError


def test_owner_references_permission_enforcement_cannot_be_disabled() -> None:
    with pytest.raises(ValueError, match="OwnerReferencesPermissionEnforcement is always enabled"):
        ControlPlane(
            extra_apiserver_flags=[
                "--disable-admission-plugins=ServiceAccount,OwnerReferencesPermissionEnforcement"
            ]
        )


def test_not_started_control_plane_refuses_operations() -> None:
    control = ControlPlane()
    assert not control.running
    for operation in (
        lambda: control.kubeconfig_path,
        lambda: control.api_url,
        control.compact_etcd,
        control.restart_apiserver,
        control.pause_apiserver,
        control.log_paths,
        lambda: control.kubeconfig_for_user("alice"),
        control.check,
    ):
        with pytest.raises(ControlPlaneNotRunningError, match="is not running"):
            operation()
    assert control.tail_logs() == "(control plane not running; no logs)"
    assert control.pids() == {}
    control.stop()  # idempotent, also when never started
