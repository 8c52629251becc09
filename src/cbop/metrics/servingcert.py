"""The serving certificate of ``/metrics`` over HTTPS: self-signed, or files re-read on change.

This module owns where ``--metrics-secure`` gets its TLS certificate from
(:class:`CertSource`): a self-signed ECDSA P-256 certificate made in memory at start
(:func:`self_signed_certificate`, made with the ``cryptography`` library; the private
key never touches the disk), or ``tls.crt``/``tls.key`` from a directory
(``--metrics-cert-dir``, e.g. a mounted cert-manager Secret), re-read when either file
changes, as controller-runtime's certwatcher does. Used by
:class:`cbop.metrics.secure.SecureMetricsServer` for each connection and by
:class:`cbop.manager.Manager`, which makes the source.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["CertSource", "self_signed_certificate"]

log = structlog.get_logger("cbop.metrics.secure")


def self_signed_certificate(
    hostnames: tuple[str, ...] = (), *, days: int = 365
) -> tuple[bytes, bytes]:
    """Make a self-signed serving certificate and its key, in memory.

    Args:
        hostnames: DNS names (or IP addresses) for the subjectAltName; ``localhost``,
            ``127.0.0.1`` and this host's name are always included.
        days: validity, days from now (backdated by an hour for clock skew).

    Returns:
        ``(certificate PEM, private key PEM)``; the key is ECDSA P-256, unencrypted.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    names = dict.fromkeys((*hostnames, socket.gethostname(), "localhost", "127.0.0.1"))
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cbop-metrics")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@contextmanager
def _pem_files(cert: bytes, key: bytes) -> Iterator[tuple[str, str]]:
    """Yield paths ``ssl`` can load the PEMs from: memory files where Linux has them."""
    if hasattr(os, "memfd_create"):
        fds = [os.memfd_create(name) for name in ("tls.crt", "tls.key")]
        try:
            for fd, data in zip(fds, (cert, key), strict=True):
                os.write(fd, data)
            yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory() as tmp:  # pragma: no cover - not Linux
        paths = (os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key"))
        for path, data in zip(paths, (cert, key), strict=True):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        yield paths


def _server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


class CertSource:
    """The serving certificate: self-signed in memory, or from ``tls.crt``/``tls.key``.

    Args:
        cert_dir: directory with ``tls.crt`` and ``tls.key`` (PEM); None makes a
            self-signed certificate (:func:`self_signed_certificate`).

    Raises:
        OSError: the files cannot be read or are not a matching PEM certificate and
            key; the message names the directory.
    """

    def __init__(self, cert_dir: str | None = None) -> None:
        self._lock = threading.Lock()
        self._files: tuple[Path, Path] | None = None
        self._stamp: tuple[tuple[int, int], ...] = ()
        if cert_dir is None:
            with _pem_files(*self_signed_certificate()) as (cert, key):
                self._context = _server_context(cert, key)
            return
        self._files = (Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key")
        try:
            self._stamp = self._stat()
            self._context = _server_context(*map(str, self._files))
        except OSError as err:
            raise OSError(f"--metrics-cert-dir {cert_dir}: {err}") from err

    def _stat(self) -> tuple[tuple[int, int], ...]:
        if self._files is None:
            raise RuntimeError("the certificate files were not read yet")
        return tuple((s.st_mtime_ns, s.st_ino) for s in (p.stat() for p in self._files))

    def context(self) -> ssl.SSLContext:
        """Return the context for the next connection, re-reading changed files first.

        A change that cannot be loaded (files half written, key and certificate not
        matching yet) keeps the previous certificate and is logged; the next connection
        tries again.
        """
        if self._files is None:
            return self._context
        with self._lock:
            try:
                stamp = self._stat()
                if stamp != self._stamp:
                    self._context = _server_context(*map(str, self._files))
                    self._stamp = stamp
                    log.info("metrics serving certificate reloaded", path=str(self._files[0]))
            except OSError as err:
                log.warning("metrics serving certificate not reloaded", error=str(err))
            return self._context
