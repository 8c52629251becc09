"""Certificates and kubeconfigs made by cbop_testing.envtest, checked with cryptography and the
official client's kubeconfig loader."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client, config

from cbop_testing.envtest.kubeconfig import write_kubeconfig
from cbop_testing.envtest.pki import CertificateAuthority, new_signing_key_pem


def test_client_certificate_names_user_and_groups_and_chains_to_the_ca() -> None:
    ca = CertificateAuthority()
    pair = ca.issue("alice", ("devs", "system:masters"))
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)

    cert.verify_directly_issued_by(ca_cert)
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == ["alice"]
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "devs",
        "system:masters",
    ]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    key = serialization.load_pem_private_key(pair.key_pem, password=None)
    assert key.public_key() == cert.public_key()


def test_serving_certificate_covers_loopback() -> None:
    pair = CertificateAuthority().issue(
        "serving", client=False, server=True, dns_names=("localhost",), ip_addresses=("127.0.0.1",)
    )
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]


def test_signing_key_public_half_matches() -> None:
    private_pem, public_pem = new_signing_key_pem()
    private = serialization.load_pem_private_key(private_pem, password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert b"BEGIN PUBLIC KEY" in public_pem
    assert serialization.load_pem_public_key(public_pem) == private.public_key()


def test_certificate_kubeconfig_loads_with_the_official_client(tmp_path: Path) -> None:
    ca = CertificateAuthority()
    pair = ca.issue("admin", ("system:masters",))
    path = write_kubeconfig(
        tmp_path / "sub" / "kubeconfig",
        server="https://127.0.0.1:6443",
        ca_pem=ca.cert_pem,
        user="admin",
        client_cert_pem=pair.cert_pem,
        client_key_pem=pair.key_pem,
    )
    assert path.stat().st_mode & 0o777 == 0o600

    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(path), client_configuration=configuration
    )
    assert configuration.host == "https://127.0.0.1:6443"
    files = (configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file)
    assert [Path(str(f)).read_bytes() for f in files] == [ca.cert_pem, pair.cert_pem, pair.key_pem]


def test_token_kubeconfig_sets_namespace_and_bearer_token(tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "kubeconfig",
        server="https://127.0.0.1:6443",
        ca_pem=CertificateAuthority().cert_pem,
        user="system:serviceaccount:ns:robot",
        token="abc.def.ghi",
        namespace="ns",
    )
    document = yaml.safe_load(path.read_text())
    assert document["contexts"][0]["context"]["namespace"] == "ns"
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(path), client_configuration=configuration
    )
    assert list(configuration.api_key.values()) == ["Bearer abc.def.ghi"]


def test_kubeconfig_needs_exactly_one_credential(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="either"):
        write_kubeconfig(tmp_path / "k", server="https://x", ca_pem=b"", user="u")
    with pytest.raises(ValueError, match="either"):
        write_kubeconfig(
            tmp_path / "k",
            server="https://x",
            ca_pem=b"",
            user="u",
            client_cert_pem=b"c",
            client_key_pem=b"k",
            token="t",
        )
