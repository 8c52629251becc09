"""Certificates and keys for the local control plane, made with ``cryptography``.

One certificate authority signs everything: the serving certificate of kube-apiserver
and kube-controller-manager (SANs ``127.0.0.1``, ``::1`` and ``localhost``) and the
client certificates (the apiserver's ``--client-ca-file``, so a certificate's subject
CN is the user name and each O is a group, as Kubernetes' x509 authenticator reads
them). Keys are ECDSA P-256, quick to generate, which matters when every test session
makes a fresh set. The service-account signing key is an ECDSA key too (tokens are
ES256).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "KeyPair", "new_signing_key_pem"]

#: Validity of every certificate made here, in days. Long enough for a dev cluster that
#: is left running; the state is thrown away with the control plane anyway.
VALIDITY_DAYS = 365
#: Backdating of ``not_valid_before``, in seconds, against small clock differences.
_BACKDATE_SECONDS = 3600


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A PEM certificate and its PEM (PKCS#8, unencrypted) private key."""

    cert_pem: bytes
    key_pem: bytes


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def new_signing_key_pem() -> tuple[bytes, bytes]:
    """Return a fresh ECDSA P-256 key for service-account token signing.

    Returns:
        ``(private_pem, public_pem)``: the PKCS#8 private key, for kube-apiserver's
        ``--service-account-signing-key-file`` and kube-controller-manager's
        ``--service-account-private-key-file``, and the SubjectPublicKeyInfo public key,
        for ``--service-account-key-file`` (which accepts no PKCS#8 private key).
    """
    key = _new_key()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _key_pem(key), public


def _base_builder(
    subject: x509.Name, issuer: x509.Name, public_key: Any, *, ca: bool
) -> x509.CertificateBuilder:
    """Return a builder with what every certificate here shares.

    Validity from an hour ago (clock skew) for ``VALIDITY_DAYS``, basic constraints, and
    a critical key usage: digital signature, plus certificate and CRL signing for a CA.
    """
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(seconds=_BACKDATE_SECONDS))
        .not_valid_after(now + datetime.timedelta(days=VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates.

    Args:
        common_name: Subject CN of the CA certificate.
    """

    def __init__(self, common_name: str = "cbop-envtest-ca") -> None:
        self._key = _new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        self._name = name
        self._cert = (
            _base_builder(name, name, self._key.public_key(), ca=True)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        """The CA certificate, PEM."""
        return self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        """The CA private key, PEM (PKCS#8)."""
        return _key_pem(self._key)

    def issue(
        self,
        common_name: str,
        organizations: Sequence[str] = (),
        *,
        client: bool = True,
        server: bool = False,
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
    ) -> KeyPair:
        """Issue a leaf certificate with a new key.

        Args:
            common_name: Subject CN (the user name, for a Kubernetes client certificate).
            organizations: Subject O values, in order (the groups of a client).
            client: Allow TLS client authentication (extended key usage).
            server: Allow TLS server authentication (extended key usage).
            dns_names: Subject alternative DNS names (serving certificates).
            ip_addresses: Subject alternative IP addresses (serving certificates).

        Returns:
            The PEM certificate and key.
        """
        key = _new_key()
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = []
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        builder = _base_builder(
            x509.Name(attributes), self._name, key.public_key(), ca=False
        ).add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
            critical=False,
        )
        if usages:
            builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))
