"""What the control plane runs: command lines, certificates, and the endpoints to probe.

:class:`~cbop_testing.envtest.controlplane.ControlPlane` starts, probes and stops the
components; this module says what they are: etcd, kube-apiserver and
kube-controller-manager with the flags that make them a small cluster on loopback
(client-certificate authentication, RBAC, the ServiceAccount token signer, an optional
audit log, and for a node the Node authorizer, NodeRestriction and the way to the
kubelets), which controllers run (the harness's lean set, the dev cluster's ``*``), and
the PKI they share (one CA signing the serving certificate and every client
certificate), and the requests
that tell whether a component is ready (etcd's ``/health``, the ``/readyz`` and
``/healthz`` of the others) or drive etcd directly (its JSON gRPC gateway).
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cbop_testing.envtest.binaries import Binaries
from cbop_testing.envtest.errors import ControlPlaneError
from cbop_testing.envtest.pki import CertificateAuthority, new_signing_key_pem

__all__ = [
    "CLUSTER_EGRESS_SOCKET",
    "COMPONENTS",
    "DEFAULT_CONTROLLERS",
    "DEV_CLUSTER_CONTROLLERS",
    "KUBELET_API_ADMIN_BINDING",
    "KUBELET_CLIENT_USER",
    "KUBERNETES_SERVICE_IP",
    "NODE_CONTROLLERS",
    "REQUIRED_ADMISSION_PLUGIN",
    "WRITES_AUDIT_POLICY",
    "Ports",
    "apiserver_command",
    "audit_flags",
    "controller_manager_command",
    "etcd_call",
    "etcd_command",
    "etcd_healthy",
    "https_ok",
    "https_post_json",
    "with_node_controllers",
    "write_egress_selector_config",
    "write_pki",
]

#: Component names, in start order; keys of :meth:`ControlPlane.log_paths`.
COMPONENTS: Final[tuple[str, ...]] = ("etcd", "kube-apiserver", "kube-controller-manager")

#: kube-controller-manager controllers a :class:`ControlPlane` runs by default (the e2e
#: harness): owner-reference garbage collection, namespace deletion, the ``default``
#: ServiceAccount in each namespace, and tokens for legacy service-account token Secrets.
#: Nothing else acts on what the tests create, so each test sees only the writes it
#: expects. (Names as ``--controllers`` takes them; kube-controller-manager also accepts
#: its older aliases.)
DEFAULT_CONTROLLERS: Final[tuple[str, ...]] = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
)

#: kube-controller-manager controllers of the developer cluster (``make dev-cluster``,
#: ``make dev``): ``*``, kube-controller-manager's own default set, so it behaves like a
#: cluster (Deployments make ReplicaSets, ReplicaSets and Jobs make Pods, CronJobs make
#: Jobs, CertificateSigningRequests are signed). Nothing is excluded; what ``*`` starts
#: and cannot use here skips itself with one informational log line at start-up:
#: ``node-ipam-controller`` (no ``--allocate-node-cidrs``: a node's pod addresses come
#: from its CNI configuration, :data:`~cbop_testing.envtest.nodeconfig.POD_SUBNET`), the
#: cloud-provider controllers (``service-lb``, ``node-route``, ``cloud-node-lifecycle``:
#: no cloud), and those behind feature gates that are off. ``bootstrap-signer`` and
#: ``token-cleaner`` (kubeadm's bootstrap tokens) and ``selinux-warning`` are off by
#: default and not part of ``*``. The certificate signer gets the cluster CA
#: (``--cluster-signing-cert-file``), as kubeadm and kind give it.
DEV_CLUSTER_CONTROLLERS: Final[tuple[str, ...]] = ("*",)

#: An audit policy (for ``ControlPlane(audit_policy=...)``) that records who wrote what:
#: every create, update, patch and delete of ConfigBundles (and their status),
#: ConfigMaps and Events at ``Metadata`` level, and every Lease request at
#: ``RequestResponse`` level (the response carries the holder). Nothing else.
WRITES_AUDIT_POLICY: Final = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: RequestResponse
    verbs: ["create", "update", "patch", "delete"]
    resources:
      - group: "coordination.k8s.io"
        resources: ["leases"]
  - level: Metadata
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
    resources:
      - group: "cbop.dev"
        resources: ["configbundles", "configbundles/status"]
      - group: ""
        resources: ["configmaps", "events"]
      - group: "events.k8s.io"
        resources: ["events"]
  - level: None
"""

#: Always enabled (``ControlPlane`` refuses flags that disable it): cbop's RBAC must hold
#: under it (setting ownerReferences with blockOwnerDeletion needs permission on the
#: owner's finalizers).
REQUIRED_ADMISSION_PLUGIN: Final = "OwnerReferencesPermissionEnforcement"
_SERVICE_CLUSTER_IP_RANGE: Final = "10.0.0.0/24"
#: The ``kubernetes`` Service's ClusterIP (the first address of the range), as pods see
#: it in ``KUBERNETES_SERVICE_HOST``; the serving certificate names it.
KUBERNETES_SERVICE_IP: Final = "10.0.0.1"
#: kube-controller-manager controllers added for a node (``for_nodes``): Deployments make
#: ReplicaSets make Pods, every namespace gets the ``kube-root-ca.crt`` ConfigMap that a
#: pod's projected service-account volume reads, the node lifecycle controller lifts
#: the ``node.kubernetes.io/not-ready`` taint a kubelet registers with once it is Ready,
#: and Services get EndpointSlices (what Prometheus discovers scrape targets from).
NODE_CONTROLLERS: Final[tuple[str, ...]] = (
    "deployment-controller",
    "endpointslice-controller",
    "replicaset-controller",
    "root-ca-certificate-publisher-controller",
    "node-lifecycle-controller",
)
_SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"
#: kube-apiserver's user name towards kubelets (``logs``, ``exec``, ``port-forward``): the
#: CN of ``pki/kubelet-client.crt``, as kubeadm names that certificate. A kubelet
#: authorizes it by a SubjectAccessReview; :data:`KUBELET_API_ADMIN_BINDING` grants it.
KUBELET_CLIENT_USER: Final = "kube-apiserver-kubelet-client"
#: The ClusterRoleBinding a control plane made for nodes creates: the bootstrap
#: ClusterRole ``system:kubelet-api-admin`` (every kubelet API) for
#: :data:`KUBELET_CLIENT_USER`, no more.
KUBELET_API_ADMIN_BINDING: Final = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "cbop-envtest:kube-apiserver-kubelet-client"},
    "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:kubelet-api-admin",
    },
    "subjects": [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBELET_CLIENT_USER}
    ],
}
#: File name, in a control plane's work directory, of the Unix socket through which
#: kube-apiserver opens its connections to nodes and pods (the egress selector's
#: ``cluster`` traffic, as HTTP CONNECT requests): a node's
#: :mod:`~cbop_testing.envtest.egressproxy` listens there.
CLUSTER_EGRESS_SOCKET: Final = "cluster-egress.sock"


def with_node_controllers(controllers: Sequence[str]) -> tuple[str, ...]:
    """Return ``controllers`` plus those of :data:`NODE_CONTROLLERS` it does not run yet.

    With ``*`` the list already runs them (unless it disables one by ``-<name>``, which
    then stays disabled); otherwise each missing one is appended.
    """
    wanted = tuple(controllers)
    if "*" in wanted:
        return wanted
    return wanted + tuple(c for c in NODE_CONTROLLERS if c not in wanted)


@dataclass(frozen=True, slots=True)
class Ports:
    """The loopback TCP ports of one control plane's components."""

    etcd: int
    """etcd's client port (plain HTTP)."""
    etcd_peer: int
    """etcd's peer port (a single member; nothing connects to it)."""
    apiserver: int
    """kube-apiserver's secure port."""
    controller_manager: int
    """kube-controller-manager's secure port (``/healthz``)."""


def write_pki(workdir: Path) -> CertificateAuthority:
    """Write a fresh CA and the certificates and keys every component needs to ``pki/``.

    Files (mode 0600): ``ca.crt`` and ``ca.key`` (also kube-controller-manager's
    certificate signer); ``serving.crt``/``serving.key`` (kube-apiserver and
    kube-controller-manager: ``localhost``, the ``kubernetes`` Service's names,
    127.0.0.1, ::1 and :data:`KUBERNETES_SERVICE_IP`); ``admin.crt``/``admin.key``
    (CN=admin, O=system:masters); ``kubelet-client.crt``/``.key`` (kube-apiserver
    towards kubelets, CN= :data:`KUBELET_CLIENT_USER`, no group);
    ``service-account.key``/``.pub`` (the token signer).

    Returns:
        The CA, which also issues later client certificates.
    """
    pki = workdir / "pki"
    ca = CertificateAuthority()
    serving = ca.issue(
        "cbop-envtest-serving",
        client=False,
        server=True,
        # Also the names and address pods reach the API server by, as a cluster's
        # API server certificate has them.
        dns_names=(
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        ip_addresses=("127.0.0.1", "::1", KUBERNETES_SERVICE_IP),
    )
    admin = ca.issue("admin", ("system:masters",))
    kubelet_client = ca.issue(KUBELET_CLIENT_USER)
    sa_private, sa_public = new_signing_key_pem()
    files = {
        "ca.crt": ca.cert_pem,
        "ca.key": ca.key_pem,
        "kubelet-client.crt": kubelet_client.cert_pem,
        "kubelet-client.key": kubelet_client.key_pem,
        "serving.crt": serving.cert_pem,
        "serving.key": serving.key_pem,
        "admin.crt": admin.cert_pem,
        "admin.key": admin.key_pem,
        "service-account.key": sa_private,
        "service-account.pub": sa_public,
    }
    for name, data in files.items():
        path = pki / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    return ca


def etcd_command(
    binaries: Binaries, workdir: Path, ports: Ports, extra: Sequence[str] = ()
) -> list[str]:
    """Etcd's command line: one member on loopback, data in ``workdir/etcd``, no fsync."""
    client = f"http://127.0.0.1:{ports.etcd}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binaries.etcd),
        "--name=cbop-envtest",
        f"--data-dir={workdir / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=cbop-envtest={peer}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
        *extra,
    ]


def apiserver_command(
    binaries: Binaries,
    workdir: Path,
    ports: Ports,
    *,
    for_nodes: bool,
    audit: Sequence[str] = (),
    feature_gates: Mapping[str, bool] | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """kube-apiserver's command line, serving on ``127.0.0.1:<ports.apiserver>``.

    Args:
        binaries: The executables.
        workdir: The work directory (certificates in ``pki/``, see :func:`write_pki`).
        ports: The components' ports.
        for_nodes: Node authorizer, NodeRestriction and the ServiceAccount admission
            plugin (pods get their token volume); without, ServiceAccount admission is off.
            Also the way to the kubelets: its client certificate towards them
            (``pki/kubelet-client.crt``), their serving certificates checked against the
            CA, their ``InternalIP`` dialled first, through the egress selector
            configuration :func:`write_egress_selector_config` writes (it must exist).
        audit: The audit flags (:func:`audit_flags`).
        feature_gates: ``--feature-gates`` (gate name -> enabled); none when empty. A
            ``--feature-gates`` flag in ``extra`` is merged over it by kube-apiserver.
        extra: Appended last, so a repeated scalar flag overrides ours.
    """
    pki = workdir / "pki"
    gates = ",".join(f"{k}={str(v).lower()}" for k, v in (feature_gates or {}).items())
    return [
        str(binaries.kube_apiserver),
        "--advertise-address=127.0.0.1",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--etcd-servers=http://127.0.0.1:{ports.etcd}",
        f"--tls-cert-file={pki / 'serving.crt'}",
        f"--tls-private-key-file={pki / 'serving.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--authorization-mode=Node,RBAC" if for_nodes else "--authorization-mode=RBAC",
        f"--service-cluster-ip-range={_SERVICE_CLUSTER_IP_RANGE}",
        f"--service-account-issuer={_SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki / 'service-account.pub'}",
        f"--service-account-signing-key-file={pki / 'service-account.key'}",
        *(_kubelet_flags(workdir) if for_nodes else []),
        *(
            [f"--enable-admission-plugins={REQUIRED_ADMISSION_PLUGIN},NodeRestriction"]
            if for_nodes
            else [
                "--disable-admission-plugins=ServiceAccount",
                f"--enable-admission-plugins={REQUIRED_ADMISSION_PLUGIN}",
            ]
        ),
        "--allow-privileged=true",
        # On SIGTERM, close open watches after 1 s instead of letting the HTTP
        # server wait for them (up to a minute): restarts and stops stay quick.
        "--shutdown-watch-termination-grace-period=1s",
        *([f"--feature-gates={gates}"] if gates else []),
        *audit,
        *extra,
    ]


def _kubelet_flags(workdir: Path) -> list[str]:
    pki = workdir / "pki"
    return [
        f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        # As kind: the node's address, not its name, which no resolver knows.
        "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
        f"--egress-selector-config-file={workdir / 'egress-selector.yaml'}",
    ]


def write_egress_selector_config(workdir: Path) -> Path:
    """Write ``egress-selector.yaml``: ``cluster`` traffic by HTTP CONNECT over a Unix socket.

    kube-apiserver then opens every connection to a kubelet or a pod (``logs``,
    ``exec``, ``port-forward``, the ``proxy`` subresources) by a ``CONNECT
    <address>:<port>`` request on ``workdir/`` :data:`CLUSTER_EGRESS_SOCKET`, where a
    node's :mod:`~cbop_testing.envtest.egressproxy` listens inside the node's network
    namespace. Its own etcd (``etcd``) and loopback (``controlplane``) connections stay
    direct.

    Returns:
        The configuration file's path.
    """
    path = workdir / "egress-selector.yaml"
    config = {
        "apiVersion": "apiserver.k8s.io/v1beta1",
        "kind": "EgressSelectorConfiguration",
        "egressSelections": [
            {
                "name": "cluster",
                "connection": {
                    "proxyProtocol": "HTTPConnect",
                    "transport": {"uds": {"udsName": str(workdir / CLUSTER_EGRESS_SOCKET)}},
                },
            }
        ],
    }
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


def controller_manager_command(
    binaries: Binaries,
    workdir: Path,
    ports: Ports,
    controllers: Sequence[str],
    extra: Sequence[str] = (),
) -> list[str]:
    """kube-controller-manager's command line: ``controllers`` only, admin credentials."""
    pki = workdir / "pki"
    kubeconfig = str(workdir / "kubeconfig")
    return [
        str(binaries.kube_controller_manager),
        f"--kubeconfig={kubeconfig}",
        # Authenticate callers of its own endpoints by our client CA directly
        # rather than by looking up kube-system/extension-apiserver-authentication
        # (which has no request-header CA here and would log errors).
        "--authentication-skip-lookup=true",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        f"--tls-cert-file={pki / 'serving.crt'}",
        f"--tls-private-key-file={pki / 'serving.key'}",
        "--leader-elect=false",
        f"--controllers={','.join(controllers)}",
        f"--service-account-private-key-file={pki / 'service-account.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        # The certificatesigningrequest-signing controller (when it runs) signs approved
        # CSRs with the cluster CA, as on kubeadm and kind.
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        "--use-service-account-credentials=false",
        # Namespace deletion walks every resource type; don't let client-side
        # throttling stretch it.
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        *extra,
    ]


def audit_flags(workdir: Path, policy: str | None) -> list[str]:
    """kube-apiserver's audit flags for ``policy`` (YAML), written to the work directory.

    The log backend in blocking mode writes JSON lines to ``logs/audit.log``; no policy,
    no flags.
    """
    if policy is None:
        return []
    path = workdir / "audit-policy.yaml"
    path.write_text(policy)
    return [
        f"--audit-policy-file={path}",
        f"--audit-log-path={workdir / 'logs' / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
        "--audit-log-maxsize=0",
    ]


def etcd_healthy(etcd_url: str) -> bool:
    """Whether etcd's ``/health`` says ``"health": "true"`` (2 s timeout).

    Raises:
        OSError: etcd did not answer.
    """
    with urllib.request.urlopen(f"{etcd_url}/health", timeout=2) as response:
        health = json.loads(response.read())
    return bool(health.get("health") == "true")


def https_ok(url: str, pki: Path, timeout: float = 2.0) -> bool:
    """Whether ``url`` answers 200 to the admin client certificate of ``pki`` (its CA trusted).

    Raises:
        OSError, ssl.SSLError: No connection or no TLS handshake.
    """
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError:
        return False


def https_post_json(url: str, pki: Path, body: Mapping[str, Any], timeout: float = 10.0) -> None:
    """POST ``body`` as JSON to ``url`` with the admin client certificate of ``pki``.

    Creates an object on kube-apiserver (its CA trusted).

    Raises:
        ControlPlaneError: No answer, or an answer other than 201 (a 409 included).
    """
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        raise ControlPlaneError(f"POST {url} answered {exc.code}: {detail}") from exc
    except (OSError, ssl.SSLError) as exc:
        raise ControlPlaneError(f"POST {url} failed: {exc}") from exc
    if status != 201:
        raise ControlPlaneError(f"POST {url} answered {status}, not 201")


def etcd_call(etcd_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to etcd's JSON gRPC gateway (``path``: ``/v3/...``); return the answer.

    Raises:
        ControlPlaneError: etcd did not answer or answered something not JSON.
    """
    request = urllib.request.Request(
        f"{etcd_url}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
    except (OSError, ValueError) as exc:
        raise ControlPlaneError(f"etcd {path} failed: {exc}") from exc
    return answer
