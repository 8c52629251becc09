"""What the local control plane runs, checked without binaries: controller sets, the flags
and files that let kube-apiserver reach kubelets, and the certificates behind them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cbop_testing.envtest import ControlPlane, ControlPlaneNotRunningError
from cbop_testing.envtest.binaries import Binaries
from cbop_testing.envtest.components import (
    CLUSTER_EGRESS_SOCKET,
    DEFAULT_CONTROLLERS,
    DEV_CLUSTER_CONTROLLERS,
    KUBELET_API_ADMIN_BINDING,
    KUBELET_CLIENT_USER,
    NODE_CONTROLLERS,
    Ports,
    apiserver_command,
    controller_manager_command,
    with_node_controllers,
    write_egress_selector_config,
    write_pki,
)
from cbop_testing.envtest.nodeconfig import NODE_IP, write_kubelet_config

BINARIES = Binaries(
    etcd=Path("/bin/etcd"),
    kube_apiserver=Path("/bin/kube-apiserver"),
    kube_controller_manager=Path("/bin/kube-controller-manager"),
    kubectl=Path("/bin/kubectl"),
)
PORTS = Ports(etcd=1, etcd_peer=2, apiserver=3, controller_manager=4)


def _flags(command: list[str]) -> dict[str, str]:
    return dict(arg.removeprefix("--").split("=", 1) for arg in command[1:] if "=" in arg)


def test_the_dev_cluster_runs_kube_controller_managers_default_set() -> None:
    assert DEV_CLUSTER_CONTROLLERS == ("*",)
    command = controller_manager_command(BINARIES, Path("/w"), PORTS, DEV_CLUSTER_CONTROLLERS)
    assert _flags(command)["controllers"] == "*"


def test_node_controllers_are_added_to_a_list_without_star() -> None:
    assert with_node_controllers(DEFAULT_CONTROLLERS) == DEFAULT_CONTROLLERS + NODE_CONTROLLERS
    assert with_node_controllers(("deployment-controller",)) == (
        "deployment-controller",
        *(c for c in NODE_CONTROLLERS if c != "deployment-controller"),
    )
    assert ControlPlane(for_nodes=True).controllers == DEFAULT_CONTROLLERS + NODE_CONTROLLERS
    assert ControlPlane().controllers == DEFAULT_CONTROLLERS


@pytest.mark.parametrize("controllers", [("*",), ("*", "-node-lifecycle-controller")])
def test_star_already_runs_the_node_controllers_and_keeps_its_exclusions(
    controllers: tuple[str, ...],
) -> None:
    assert with_node_controllers(controllers) == controllers
    assert ControlPlane(for_nodes=True, controllers=controllers).controllers == controllers


def test_the_controller_manager_signs_certificates_with_the_cluster_ca(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    ca = write_pki(tmp_path)
    flags = _flags(controller_manager_command(BINARIES, tmp_path, PORTS, ("*",)))
    cert = Path(flags["cluster-signing-cert-file"])
    key = Path(flags["cluster-signing-key-file"])
    assert cert.read_bytes() == ca.cert_pem
    assert key.read_bytes() == ca.key_pem
    assert key.stat().st_mode & 0o777 == 0o600


def test_a_control_plane_for_nodes_reaches_kubelets_by_address_through_the_egress_socket(
    tmp_path: Path,
) -> None:
    flags = _flags(apiserver_command(BINARIES, tmp_path, PORTS, for_nodes=True))
    pki = tmp_path / "pki"
    assert flags["kubelet-client-certificate"] == str(pki / "kubelet-client.crt")
    assert flags["kubelet-client-key"] == str(pki / "kubelet-client.key")
    assert flags["kubelet-certificate-authority"] == str(pki / "ca.crt")
    assert flags["kubelet-preferred-address-types"].split(",")[0] == "InternalIP"
    assert flags["egress-selector-config-file"] == str(write_egress_selector_config(tmp_path))
    config = yaml.safe_load(Path(flags["egress-selector-config-file"]).read_text())
    assert config["kind"] == "EgressSelectorConfiguration"
    assert config["egressSelections"] == [
        {
            "name": "cluster",
            "connection": {
                "proxyProtocol": "HTTPConnect",
                "transport": {"uds": {"udsName": str(tmp_path / CLUSTER_EGRESS_SOCKET)}},
            },
        }
    ]


def test_a_control_plane_without_nodes_has_no_kubelet_flags(tmp_path: Path) -> None:
    command = apiserver_command(BINARIES, tmp_path, PORTS, for_nodes=False)
    assert not [a for a in command if a.startswith(("--kubelet-", "--egress-selector"))]


def test_kube_apiserver_meets_kubelets_as_a_user_without_groups(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    write_pki(tmp_path)
    cert = x509.load_pem_x509_certificate((tmp_path / "pki" / "kubelet-client.crt").read_bytes())
    subject = cert.subject
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == [
        KUBELET_CLIENT_USER
    ]
    assert not subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME), "no system:masters"
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    ca = x509.load_pem_x509_certificate((tmp_path / "pki" / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    # What the kubelet's webhook authorizer then allows it: the kubelet API, no more.
    assert KUBELET_API_ADMIN_BINDING["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:kubelet-api-admin",
    }
    assert KUBELET_API_ADMIN_BINDING["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBELET_CLIENT_USER}
    ]


def test_the_kubelet_serves_the_certificate_it_is_given(tmp_path: Path) -> None:
    (tmp_path / "kubelet").mkdir()
    path = write_kubelet_config(
        tmp_path,
        client_ca=tmp_path / "ca.crt",
        cgroup_root="/n",
        serving_cert=tmp_path / "s.crt",
        serving_key=tmp_path / "s.key",
    )
    config = json.loads(path.read_text())
    assert config["address"] == NODE_IP
    assert config["tlsCertFile"] == str(tmp_path / "s.crt")
    assert config["tlsPrivateKeyFile"] == str(tmp_path / "s.key")


def test_not_started_control_plane_has_no_egress_socket_or_certificates() -> None:
    control = ControlPlane(for_nodes=True)
    with pytest.raises(ControlPlaneNotRunningError, match="is not running"):
        _ = control.cluster_egress_socket
    with pytest.raises(ControlPlaneNotRunningError, match="is not running"):
        control.issue_certificate("system:node:n", server=True)
