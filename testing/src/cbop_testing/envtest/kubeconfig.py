"""Writing kubeconfig files for the local control plane: the admin's, a user's, a ServiceAccount's.

The files are self-contained: the CA, client certificate and key are embedded
(``*-data`` fields, base64), so a kubeconfig can be copied elsewhere (as the dev
cluster's fixed path) and read by kubectl and by the Python client's
``kubernetes.config.load_kube_config`` alike. Files are created with mode 0600.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from cbop_testing.envtest.errors import ControlPlaneError
from cbop_testing.envtest.pki import CertificateAuthority

__all__ = [
    "request_service_account_token",
    "service_account_kubeconfig",
    "user_kubeconfig",
    "write_kubeconfig",
]

#: Name used for the cluster entry in every kubeconfig written here.
CLUSTER_NAME = "cbop-envtest"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_pem: bytes,
    user: str,
    client_cert_pem: bytes | None = None,
    client_key_pem: bytes | None = None,
    token: str | None = None,
    namespace: str | None = None,
) -> Path:
    """Write a single-context kubeconfig and return its path.

    Exactly one way to authenticate must be given: a client certificate and key, or a
    bearer token.

    Args:
        path: Where to write; parent directories are created; an existing file is
            replaced atomically.
        server: API server URL, e.g. ``https://127.0.0.1:38443``.
        ca_pem: PEM of the CA that signed the server's certificate.
        user: Name of the user entry (also part of the context name).
        client_cert_pem: PEM client certificate.
        client_key_pem: PEM private key of the client certificate.
        token: Bearer token (e.g. from the TokenRequest API).
        namespace: Default namespace of the context.

    Returns:
        ``path``.

    Raises:
        ValueError: Neither or both of certificate/key and token were given.
    """
    has_cert = client_cert_pem is not None and client_key_pem is not None
    if has_cert == (token is not None):
        raise ValueError("give either client_cert_pem and client_key_pem, or token")
    credentials: dict[str, str] = {}
    if client_cert_pem is not None and client_key_pem is not None:
        credentials["client-certificate-data"] = _b64(client_cert_pem)
        credentials["client-key-data"] = _b64(client_key_pem)
    if token is not None:
        credentials["token"] = token
    context_name = f"{user}@{CLUSTER_NAME}"
    context: dict[str, str] = {"cluster": CLUSTER_NAME, "user": user}
    if namespace:
        context["namespace"] = namespace
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": context_name, "context": context}],
        "current-context": context_name,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        yaml.safe_dump(document, handle, sort_keys=False)
    tmp.replace(path)
    return path


def request_service_account_token(
    admin_kubeconfig: Path,
    namespace: str,
    name: str,
    *,
    expiration_seconds: int = 3600,
    bound_object: Mapping[str, Any] | None = None,
) -> str:
    """Return a token for a ServiceAccount from the TokenRequest API, creating it if missing.

    ``POST .../serviceaccounts/<name>/token`` with the API server's default audience, as a
    pod's projected token would be requested. The namespace must exist.

    Args:
        admin_kubeconfig: Credentials allowed to create ServiceAccounts and tokens.
        namespace: Namespace of the ServiceAccount.
        name: Name of the ServiceAccount.
        expiration_seconds: Requested validity in seconds; the API server requires at
            least 600.
        bound_object: Optional BoundObjectReference the token is bound to.

    Raises:
        kubernetes.client.exceptions.ApiException: The API server refused.
        ControlPlaneError: The answer carried no token.
    """
    # Imported here: the client is heavy and only this function needs it.
    from kubernetes import client, config  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    # The client's kubeconfig loader carries no annotations.
    api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(admin_kubeconfig)
    )
    with api_client:
        core = client.CoreV1Api(api_client)
        try:
            core.create_namespaced_service_account(
                namespace,
                client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)),
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
        spec = client.V1TokenRequestSpec(
            audiences=[],
            expiration_seconds=expiration_seconds,
            bound_object_ref=(
                client.V1BoundObjectReference.from_dict(dict(bound_object))
                if bound_object is not None
                else None
            ),
        )
        answer = core.create_namespaced_service_account_token(
            name, namespace, client.AuthenticationV1TokenRequest(spec=spec)
        )
    if answer.status is None or not answer.status.token:
        raise ControlPlaneError(f"TokenRequest for {namespace}/{name} returned no token")
    token: str = answer.status.token
    return token


def user_kubeconfig(
    directory: Path, *, server: str, ca: CertificateAuthority, user: str, groups: Sequence[str]
) -> Path:
    """Write a kubeconfig for ``user`` in ``groups`` with a certificate ``ca`` signs.

    The certificate has CN=user and one O per group, so the API server authenticates it
    as that user; the file is ``user-<name>-<digest>.kubeconfig`` in ``directory``.
    """
    pair = ca.issue(user, tuple(groups))
    digest = hashlib.sha256("\0".join((user, *groups)).encode()).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", user)[:40]
    return write_kubeconfig(
        directory / f"user-{slug}-{digest}.kubeconfig",
        server=server,
        ca_pem=ca.cert_pem,
        user=user,
        client_cert_pem=pair.cert_pem,
        client_key_pem=pair.key_pem,
    )


def service_account_kubeconfig(
    directory: Path,
    admin_kubeconfig: Path,
    *,
    server: str,
    ca_pem: bytes,
    namespace: str,
    name: str,
    expiration_seconds: int,
    bound_object: Mapping[str, Any] | None,
) -> Path:
    """Write a kubeconfig with a ServiceAccount's token (:func:`request_service_account_token`).

    The file is ``sa-<namespace>-<name>.kubeconfig`` in ``directory``; its context's
    namespace is ``namespace``.

    Raises:
        kubernetes.client.exceptions.ApiException: The API server refused.
        ControlPlaneError: The answer carried no token.
    """
    token = request_service_account_token(
        admin_kubeconfig,
        namespace,
        name,
        expiration_seconds=expiration_seconds,
        bound_object=bound_object,
    )
    return write_kubeconfig(
        directory / f"sa-{namespace}-{name}.kubeconfig",
        server=server,
        ca_pem=ca_pem,
        user=f"system:serviceaccount:{namespace}:{name}",
        token=token,
        namespace=namespace,
    )
