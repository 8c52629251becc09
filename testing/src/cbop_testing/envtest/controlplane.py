"""A real, local Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager.

Like controller-runtime's envtest it runs the real binaries on loopback with throwaway
state, but it also runs kube-controller-manager (garbage collector, namespace
controller, service accounts), so owner-reference garbage collection and namespace
deletion behave as on a cluster. There are no nodes and no kubelet: pods never run.

Layout of the work directory (all components log there)::

    pki/            CA, serving and admin client certificates, service-account key
    etcd/           etcd data (``--unsafe-no-fsync``)
    logs/           etcd.log, kube-apiserver.log, kube-controller-manager.log,
                    audit.log (JSON lines, when an audit policy is given)
    audit-policy.yaml  the audit policy, when one is given
    kubeconfig      admin (CN=admin, O=system:masters), client-certificate auth
    kubeconfigs/    kubeconfigs issued by kubeconfig_for_user / _for_service_account

Fault hooks for tests: :meth:`ControlPlane.compact_etcd`,
:meth:`ControlPlane.restart_apiserver`, :meth:`ControlPlane.pause_apiserver` /
:meth:`ControlPlane.resume_apiserver`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final, Self

from cbop_testing.envtest import process
from cbop_testing.envtest.binaries import Binaries, find_binaries
from cbop_testing.envtest.errors import (
    ControlPlaneError,
    ControlPlaneNotRunningError,
    ControlPlaneStartError,
)
from cbop_testing.envtest.kubeconfig import write_kubeconfig
from cbop_testing.envtest.pki import CertificateAuthority, new_signing_key_pem

__all__ = ["COMPONENTS", "DEFAULT_CONTROLLERS", "WRITES_AUDIT_POLICY", "ControlPlane"]

#: Component names, in start order; keys of :meth:`ControlPlane.log_paths`.
COMPONENTS: Final[tuple[str, ...]] = ("etcd", "kube-apiserver", "kube-controller-manager")

#: kube-controller-manager controllers run by default: owner-reference garbage
#: collection, namespace deletion, the ``default`` ServiceAccount in each namespace, and
#: tokens for legacy service-account token Secrets. (Names as ``--controllers`` takes
#: them; kube-controller-manager also accepts its older aliases.)
DEFAULT_CONTROLLERS: Final[tuple[str, ...]] = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
)

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

#: Always enabled: cbop's RBAC must hold under it (setting ownerReferences with
#: blockOwnerDeletion needs permission on the owner's finalizers).
_REQUIRED_ADMISSION_PLUGIN: Final = "OwnerReferencesPermissionEnforcement"
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
#: Attempts at starting when a chosen port was taken meanwhile by another process.
_PORT_ATTEMPTS: Final = 3
#: Seconds between readiness probes.
_POLL_INTERVAL: Final = 0.1
#: Seconds a component gets to exit after SIGTERM before SIGKILL.
_STOP_GRACE: Final = 10.0
#: What kube-controller-manager logs when it gives up waiting for a healthy apiserver.
_KCM_GAVE_UP: Final = "failed to wait for apiserver being healthy"
#: How often kube-controller-manager is restarted after giving up that way.
_KCM_STARTUP_RESPAWNS: Final = 3


def _free_ports(count: int) -> list[int]:
    """Return ``count`` distinct currently free TCP ports on 127.0.0.1."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _tail(path: Path, lines: int) -> str:
    """Return the last ``lines`` lines of a text file (empty when it does not exist)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            block = 64 * 1024
            data = b""
            while size > 0 and data.count(b"\n") <= lines:
                step = min(block, size)
                size -= step
                handle.seek(size)
                data = handle.read(step) + data
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


class _PortInUseError(ControlPlaneStartError):
    """A component could not bind a port chosen as free; start again with new ports."""


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on loopback, with temporary state.

    Use as a context manager (``with ControlPlane() as cp: ...``) or call
    :meth:`start` and :meth:`stop`. Every child process is stopped by :meth:`stop`, at
    interpreter exit, on SIGTERM/SIGHUP, and, on Linux, by the kernel when this process
    is killed outright (see :mod:`cbop_testing.envtest.process`).

    Args:
        binaries: The executables; found with :func:`cbop_testing.envtest.find_binaries` (which
            may build them) at :meth:`start` when None.
        workdir: Directory for state, certificates, kubeconfigs and logs; created if
            missing and kept after :meth:`stop`. When None a temporary directory is
            used and removed by :meth:`stop`.
        extra_apiserver_flags: Appended to kube-apiserver's command line (a repeated
            scalar flag overrides ours; list flags such as
            ``--enable-admission-plugins`` add to ours).
        controllers: kube-controller-manager's ``--controllers``.
        extra_controller_manager_flags: Appended to kube-controller-manager's command
            line.
        extra_etcd_flags: Appended to etcd's command line.
        audit_policy: An ``audit.k8s.io/v1`` Policy (YAML text). When given,
            kube-apiserver writes every event it selects as a JSON line to
            :attr:`audit_log_path` (the log backend, blocking mode: an event is on disk
            before the response is sent), with microsecond ``requestReceivedTimestamp``
            and ``stageTimestamp``. See :data:`WRITES_AUDIT_POLICY`.
        for_nodes: Prepare for kubelets (:class:`cbop_testing.envtest.node.Node`): the
            ServiceAccount admission plugin (pods get their projected token volume), the
            Node authorizer and NodeRestriction (kubelets act as ``system:node:<name>``,
            as on a kubeadm cluster), and :data:`NODE_CONTROLLERS`. Off by default:
            without a node, pods never run.

    Raises:
        ValueError: ``extra_apiserver_flags`` would disable
            OwnerReferencesPermissionEnforcement, which is always on.
    """

    def __init__(
        self,
        *,
        binaries: Binaries | None = None,
        workdir: Path | None = None,
        extra_apiserver_flags: Sequence[str] = (),
        controllers: Sequence[str] = DEFAULT_CONTROLLERS,
        extra_controller_manager_flags: Sequence[str] = (),
        extra_etcd_flags: Sequence[str] = (),
        audit_policy: str | None = None,
        for_nodes: bool = False,
    ) -> None:
        for flag in extra_apiserver_flags:
            if flag.startswith("--disable-admission-plugins") and (
                _REQUIRED_ADMISSION_PLUGIN in flag
            ):
                raise ValueError(f"{_REQUIRED_ADMISSION_PLUGIN} is always enabled: {flag!r}")
        self._binaries = binaries
        self._requested_workdir = workdir
        self._extra_apiserver_flags = tuple(extra_apiserver_flags)
        self._controllers = tuple(controllers) + (
            tuple(c for c in NODE_CONTROLLERS if c not in controllers) if for_nodes else ()
        )
        self.for_nodes = for_nodes
        """Whether this control plane was made for kubelets (the ``for_nodes`` argument)."""
        self._extra_kcm_flags = tuple(extra_controller_manager_flags)
        self._extra_etcd_flags = tuple(extra_etcd_flags)
        self._audit_policy = audit_policy
        self._lock = threading.RLock()
        self._workdir: Path | None = None
        self._own_workdir = False
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._commands: dict[str, list[str]] = {}
        self._logs: dict[str, IO[bytes]] = {}
        self._spawned: list[int] = []
        self._ca: CertificateAuthority | None = None
        self._etcd_port = 0
        self._apiserver_port = 0
        self._kcm_port = 0
        self._paused = False
        self.startup_seconds: float = 0.0
        """Seconds the last :meth:`start` took from spawning etcd to all components ready."""
        self.startup_phases: dict[str, float] = {}
        """Seconds each component took to become ready in the last :meth:`start`, by name."""
        self.respawns: dict[str, int] = {}
        """How often each component was started again after exiting on its own, by name."""

    # ----------------------------------------------------------------- properties

    def _require_running(self) -> Path:
        if self._workdir is None or not self._children:
            raise ControlPlaneNotRunningError(f"{self!r} is not running")
        return self._workdir

    @property
    def running(self) -> bool:
        """Whether :meth:`start` succeeded and :meth:`stop` has not been called since."""
        return self._workdir is not None and bool(self._children)

    @property
    def workdir(self) -> Path:
        """The work directory (see the module docstring for its layout).

        Raises:
            ControlPlaneNotRunningError: Not started.
        """
        return self._require_running()

    @property
    def binaries(self) -> Binaries:
        """The executables in use.

        Raises:
            ControlPlaneNotRunningError: Not started and none were given.
        """
        if self._binaries is None:
            raise ControlPlaneNotRunningError(f"{self!r} has not resolved its binaries yet")
        return self._binaries

    @property
    def kubeconfig_path(self) -> Path:
        """Admin kubeconfig: user ``admin`` in group ``system:masters``, client certificate.

        Raises:
            ControlPlaneNotRunningError: Not started.
        """
        return self._require_running() / "kubeconfig"

    @property
    def api_url(self) -> str:
        """kube-apiserver's URL, ``https://127.0.0.1:<port>``.

        Raises:
            ControlPlaneNotRunningError: Not started.
        """
        self._require_running()
        return f"https://127.0.0.1:{self._apiserver_port}"

    @property
    def etcd_url(self) -> str:
        """Etcd's client URL, ``http://127.0.0.1:<port>`` (plain HTTP, loopback only).

        Raises:
            ControlPlaneNotRunningError: Not started.
        """
        self._require_running()
        return f"http://127.0.0.1:{self._etcd_port}"

    @property
    def ca_path(self) -> Path:
        """PEM of the CA that signed the serving and all client certificates.

        Raises:
            ControlPlaneNotRunningError: Not started.
        """
        return self._require_running() / "pki" / "ca.crt"

    def pids(self) -> dict[str, int]:
        """Process ids of the components currently running, by component name."""
        with self._lock:
            return {name: p.pid for name, p in self._children.items() if p.poll() is None}

    def check(self) -> None:
        """Raise unless every component is still running.

        A kube-controller-manager that gave up waiting for a restarting apiserver is
        started again instead (see :meth:`_respawn_controller_manager`).

        Raises:
            ControlPlaneNotRunningError: Not started.
            ControlPlaneError: A component exited; the message has its status and log tail.
        """
        with self._lock:
            self._require_running()
            for name, popen in list(self._children.items()):
                code = popen.poll()
                if code is not None:
                    tail = _tail(self.log_paths()[name], 40)
                    if self._respawn_controller_manager(name, tail):
                        continue
                    raise ControlPlaneError(
                        f"{name} (pid {popen.pid}) exited with status {code}; log tail:\n{tail}"
                    )

    @property
    def spawned_pids(self) -> tuple[int, ...]:
        """Every process id this control plane ever started (restarts included)."""
        return tuple(self._spawned)

    def __repr__(self) -> str:
        where = self._workdir or self._requested_workdir or "(not started)"
        return f"ControlPlane(workdir={str(where)!r}, apiserver_port={self._apiserver_port})"

    # -------------------------------------------------------------- lifecycle

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> None:
        """Start etcd, kube-apiserver and kube-controller-manager; return once all are ready.

        Ready means: etcd answers ``/health``, kube-apiserver's ``/readyz`` returns 200
        (all post-start hooks done, RBAC bootstrap policy in place), and
        kube-controller-manager's ``/healthz`` returns 200. The admin kubeconfig exists
        from then on.

        Args:
            timeout: Seconds for the whole start-up (binaries already built).

        Raises:
            ControlPlaneError: Already running.
            BinariesUnavailableError: No binaries given and none can be found or built.
            ControlPlaneStartError: A component exited or was not ready in time; the
                message ends with the tails of the logs. Everything started is stopped.
        """
        with self._lock:
            if self._children:
                raise ControlPlaneError(f"{self!r} is already running")
            if self._binaries is None:
                self._binaries = find_binaries()
            deadline = time.monotonic() + timeout
            for attempt in range(1, _PORT_ATTEMPTS + 1):
                try:
                    self._start_once(deadline)
                except _PortInUseError:
                    self.stop()
                    if attempt == _PORT_ATTEMPTS:
                        raise
                except BaseException:
                    self.stop()
                    raise
                else:
                    return

    def _prepare_workdir(self) -> Path:
        if self._requested_workdir is not None:
            workdir = self._requested_workdir.resolve()
            workdir.mkdir(parents=True, exist_ok=True)
            # Leftovers of an earlier run in a kept directory must not be reused.
            for stale in ("etcd", "pki", "logs", "kubeconfigs", "kubeconfig"):
                target = workdir / stale
                if target.is_dir():
                    shutil.rmtree(target)
                elif target.exists():
                    target.unlink()
            self._own_workdir = False
        else:
            workdir = Path(tempfile.mkdtemp(prefix="cbop-envtest-"))
            self._own_workdir = True
        for sub in ("pki", "etcd", "logs", "kubeconfigs"):
            (workdir / sub).mkdir(mode=0o700, exist_ok=True)
        return workdir

    def _write_pki(self, workdir: Path) -> None:
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
        sa_private, sa_public = new_signing_key_pem()
        files = {
            "ca.crt": ca.cert_pem,
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
        self._ca = ca

    def _start_once(self, deadline: float) -> None:
        binaries = self.binaries
        workdir = self._prepare_workdir()
        self._workdir = workdir
        self._write_pki(workdir)
        pki = workdir / "pki"
        ca = self._ca
        assert ca is not None
        self._etcd_port, etcd_peer_port, self._apiserver_port, self._kcm_port = _free_ports(4)
        process.register(self)
        began = time.monotonic()

        etcd_client = f"http://127.0.0.1:{self._etcd_port}"
        etcd_peer = f"http://127.0.0.1:{etcd_peer_port}"
        self._commands["etcd"] = [
            str(binaries.etcd),
            "--name=cbop-envtest",
            f"--data-dir={workdir / 'etcd'}",
            f"--listen-client-urls={etcd_client}",
            f"--advertise-client-urls={etcd_client}",
            f"--listen-peer-urls={etcd_peer}",
            f"--initial-advertise-peer-urls={etcd_peer}",
            f"--initial-cluster=cbop-envtest={etcd_peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
            *self._extra_etcd_flags,
        ]
        self._spawn("etcd")
        self._wait("etcd", deadline, self._etcd_ready)

        self._commands["kube-apiserver"] = [
            str(binaries.kube_apiserver),
            "--advertise-address=127.0.0.1",
            "--bind-address=127.0.0.1",
            f"--secure-port={self._apiserver_port}",
            f"--etcd-servers={etcd_client}",
            f"--tls-cert-file={pki / 'serving.crt'}",
            f"--tls-private-key-file={pki / 'serving.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC" if self.for_nodes else "--authorization-mode=RBAC",
            f"--service-cluster-ip-range={_SERVICE_CLUSTER_IP_RANGE}",
            f"--service-account-issuer={_SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'service-account.pub'}",
            f"--service-account-signing-key-file={pki / 'service-account.key'}",
            *(
                [f"--enable-admission-plugins={_REQUIRED_ADMISSION_PLUGIN},NodeRestriction"]
                if self.for_nodes
                else [
                    "--disable-admission-plugins=ServiceAccount",
                    f"--enable-admission-plugins={_REQUIRED_ADMISSION_PLUGIN}",
                ]
            ),
            "--allow-privileged=true",
            # On SIGTERM, close open watches after 1 s instead of letting the HTTP
            # server wait for them (up to a minute): restarts and stops stay quick.
            "--shutdown-watch-termination-grace-period=1s",
            *self._audit_flags(workdir),
            *self._extra_apiserver_flags,
        ]
        self._spawn("kube-apiserver")
        write_kubeconfig(
            workdir / "kubeconfig",
            server=f"https://127.0.0.1:{self._apiserver_port}",
            ca_pem=ca.cert_pem,
            user="admin",
            client_cert_pem=(pki / "admin.crt").read_bytes(),
            client_key_pem=(pki / "admin.key").read_bytes(),
        )
        self._wait("kube-apiserver", deadline, self._apiserver_ready)

        kubeconfig = str(workdir / "kubeconfig")
        self._commands["kube-controller-manager"] = [
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
            f"--secure-port={self._kcm_port}",
            f"--tls-cert-file={pki / 'serving.crt'}",
            f"--tls-private-key-file={pki / 'serving.key'}",
            "--leader-elect=false",
            f"--controllers={','.join(self._controllers)}",
            f"--service-account-private-key-file={pki / 'service-account.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            "--use-service-account-credentials=false",
            # Namespace deletion walks every resource type; don't let client-side
            # throttling stretch it.
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            *self._extra_kcm_flags,
        ]
        self._spawn("kube-controller-manager")
        self._wait("kube-controller-manager", deadline, self._kcm_ready)
        self.startup_seconds = time.monotonic() - began

    def _audit_flags(self, workdir: Path) -> list[str]:
        """kube-apiserver flags for the audit policy, written to the work directory."""
        if self._audit_policy is None:
            return []
        policy = workdir / "audit-policy.yaml"
        policy.write_text(self._audit_policy)
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={workdir / 'logs' / 'audit.log'}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=0",
        ]

    @property
    def audit_log_path(self) -> Path:
        """Path of the JSON audit log (it exists once the first event was logged).

        Raises:
            ControlPlaneNotRunningError: Not started.
            ControlPlaneError: Started without ``audit_policy``.
        """
        workdir = self._require_running()
        if self._audit_policy is None:
            raise ControlPlaneError(f"{self!r} was started without an audit policy")
        return workdir / "logs" / "audit.log"

    def _spawn(self, name: str) -> None:
        workdir = self._workdir
        assert workdir is not None
        log = self._logs.get(name)
        if log is None or log.closed:
            log = (workdir / "logs" / f"{name}.log").open("ab")
            self._logs[name] = log
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        log.write(f"=== cbop_testing.envtest: starting {name} at {stamp}\n".encode())
        log.write(("=== " + " ".join(self._commands[name]) + "\n").encode())
        log.flush()
        popen = process.spawn(self._commands[name], log, cwd=workdir)
        self._children[name] = popen
        self._spawned.append(popen.pid)

    def _wait(self, name: str, deadline: float, probe: Callable[[], bool]) -> None:
        last_error = "no answer yet"
        began = time.monotonic()
        while True:
            # Any component dying (not only the awaited one) ends the wait, except
            # kube-controller-manager giving up on an apiserver that is still (re)starting.
            for component, popen in list(self._children.items()):
                code = popen.poll()
                if code is None:
                    continue
                tail = _tail(self.log_paths()[component], 40)
                if self._respawn_controller_manager(component, tail):
                    continue
                message = f"{component} exited with status {code} during start-up"
                if "address already in use" in tail:
                    raise _PortInUseError(f"{message}:\n{tail}")
                raise ControlPlaneStartError(f"{message}; log tail:\n{tail}")
            try:
                if probe():
                    self.startup_phases[name] = time.monotonic() - began
                    return
            except (OSError, ssl.SSLError, ValueError) as exc:
                last_error = str(exc)
            if time.monotonic() >= deadline:
                raise ControlPlaneStartError(
                    f"{name} was not ready in time (last probe: {last_error}); "
                    f"logs:\n{self.tail_logs(40)}"
                )
            time.sleep(_POLL_INTERVAL)

    def _respawn_controller_manager(self, component: str, log_tail: str) -> bool:
        """Start kube-controller-manager again if it gave up waiting for the apiserver.

        kube-controller-manager waits only 10 s for kube-apiserver's ``/healthz`` while it
        builds its controllers, then exits 1. On a loaded machine, an apiserver that is
        restarted right after :meth:`start` can take longer, so the controller manager is
        restarted, as a kubelet restarts a static pod, at most
        ``_KCM_STARTUP_RESPAWNS`` times per control plane. Returns whether it was.
        """
        if (
            component != "kube-controller-manager"
            or _KCM_GAVE_UP not in log_tail
            or self.respawns.get(component, 0) >= _KCM_STARTUP_RESPAWNS
        ):
            return False
        self.respawns[component] = self.respawns.get(component, 0) + 1
        self._spawn(component)
        return True

    def stop(self) -> None:
        """Stop every component (SIGTERM to its process group, SIGKILL after 10 s) and reap it.

        Idempotent. Removes the work directory when it was temporary. Safe to call from
        a signal handler or ``atexit``.
        """
        with self._lock:
            for name in reversed(COMPONENTS):
                popen = self._children.pop(name, None)
                if popen is not None:
                    process.terminate(popen, _STOP_GRACE)
            self._children.clear()
            self._paused = False
            for log in self._logs.values():
                with contextlib.suppress(OSError):
                    log.close()
            self._logs.clear()
            process.unregister(self)
            if self._workdir is not None and self._own_workdir:
                shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    # ----------------------------------------------------------------- probes

    def _ssl_context(self, *, client_cert: bool = True) -> ssl.SSLContext:
        pki = self._require_running() / "pki"
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        if client_cert:
            context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return context

    def _etcd_ready(self) -> bool:
        with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as response:
            health = json.loads(response.read())
        return bool(health.get("health") == "true")

    def _apiserver_ready(self) -> bool:
        return self._https_ok(f"https://127.0.0.1:{self._apiserver_port}/readyz")

    def _kcm_ready(self) -> bool:
        return self._https_ok(f"https://127.0.0.1:{self._kcm_port}/healthz")

    def _https_ok(self, url: str, timeout: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=timeout, context=self._ssl_context()) as r:
                return bool(r.status == 200)
        except urllib.error.HTTPError:
            return False

    def apiserver_ready(self, timeout: float = 2.0) -> bool:
        """Whether kube-apiserver's ``/readyz`` answers 200 within ``timeout`` seconds."""
        try:
            return self._https_ok(f"{self.api_url}/readyz", timeout)
        except (OSError, ssl.SSLError):
            return False

    # ------------------------------------------------------------ fault hooks

    def _etcd_call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST to etcd's JSON gRPC gateway (``/v3/...``) and return the decoded answer."""
        request = urllib.request.Request(
            f"{self.etcd_url}{path}",
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

    def etcd_revision(self) -> int:
        """Return etcd's current revision (the newest resourceVersion of any object).

        Raises:
            ControlPlaneNotRunningError: Not started.
            ControlPlaneError: etcd did not answer.
        """
        self._require_running()
        # A range over the single key "\\0" is cheap; the header carries the revision.
        answer = self._etcd_call("/v3/kv/range", {"key": base64.b64encode(b"\0").decode()})
        return int(answer["header"]["revision"])

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision and return that revision.

        Every revision older than the returned one is discarded (physically), so a
        watch that reaches etcd with an older resourceVersion gets 410 Gone
        ("too old resource version"). kube-apiserver's watch cache serves most watches
        and keeps its own window of recent events; a watch it can serve from that window
        is not affected by etcd compaction. See docs/control-plane.md.

        Returns:
            The compaction revision.

        Raises:
            ControlPlaneNotRunningError: Not started.
            ControlPlaneError: etcd refused or did not answer.
        """
        revision = self.etcd_revision()
        self._etcd_call("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def restart_apiserver(self, timeout: float = 60.0) -> None:
        """Stop kube-apiserver and start it again with the same flags, port and etcd data.

        Returns once ``/readyz`` answers 200. kube-controller-manager keeps running and
        reconnects. The apiserver's watch cache starts anew, so clients' watches break
        and watches from resourceVersions before the restart get 410 Gone.

        Args:
            timeout: Seconds to wait for readiness.

        Raises:
            ControlPlaneNotRunningError: Not started.
            ControlPlaneStartError: It did not come back in time.
        """
        with self._lock:
            self._require_running()
            popen = self._children.pop("kube-apiserver")
            process.terminate(popen, _STOP_GRACE)
            self._paused = False
            self._spawn("kube-apiserver")
            self._wait("kube-apiserver", time.monotonic() + timeout, self._apiserver_ready)

    def pause_apiserver(self) -> None:
        """Freeze kube-apiserver (SIGSTOP to its process group).

        Connections are still accepted by the kernel but nothing answers until
        :meth:`resume_apiserver`; clients see timeouts, as with a hung apiserver.

        Raises:
            ControlPlaneNotRunningError: Not started.
        """
        with self._lock:
            self._require_running()
            process.signal_group(self._children["kube-apiserver"], signal.SIGSTOP)
            self._paused = True

    def resume_apiserver(self) -> None:
        """Undo :meth:`pause_apiserver` (SIGCONT to its process group).

        Raises:
            ControlPlaneNotRunningError: Not started.
        """
        with self._lock:
            self._require_running()
            process.signal_group(self._children["kube-apiserver"], signal.SIGCONT)
            self._paused = False

    @property
    def apiserver_paused(self) -> bool:
        """Whether :meth:`pause_apiserver` is in effect."""
        return self._paused

    # ------------------------------------------------------------ credentials

    def kubeconfig_for_user(self, user: str, groups: Sequence[str] = ()) -> Path:
        """Write a kubeconfig for ``user`` in ``groups``, with a client certificate.

        The certificate is signed by the client CA (CN=user, one O per group), so the
        apiserver authenticates it as that user; what it may do is up to RBAC.

        Args:
            user: User name, e.g. ``"alice"`` or ``"system:serviceaccount:ns:name"``.
            groups: Group names, e.g. ``("developers",)``.

        Returns:
            Path of the new kubeconfig (in the work directory's ``kubeconfigs/``).

        Raises:
            ControlPlaneNotRunningError: Not started.
        """
        workdir = self._require_running()
        ca = self._ca
        assert ca is not None
        pair = ca.issue(user, tuple(groups))
        digest = hashlib.sha256("\0".join((user, *groups)).encode()).hexdigest()[:8]
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", user)[:40]
        return write_kubeconfig(
            workdir / "kubeconfigs" / f"user-{slug}-{digest}.kubeconfig",
            server=self.api_url,
            ca_pem=ca.cert_pem,
            user=user,
            client_cert_pem=pair.cert_pem,
            client_key_pem=pair.key_pem,
        )

    def kubeconfig_for_service_account(
        self,
        namespace: str,
        name: str,
        *,
        expiration_seconds: int = 3600,
        bound_object: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write a kubeconfig with a bearer token for a ServiceAccount (TokenRequest API).

        The ServiceAccount is created if missing (the namespace must exist). The token
        comes from ``POST .../serviceaccounts/<name>/token`` with the API server's
        default audience, as a pod's projected token would.

        Args:
            namespace: Namespace of the ServiceAccount.
            name: Name of the ServiceAccount.
            expiration_seconds: Requested validity in seconds; the API server requires at
                least 600.
            bound_object: Optional object the token is bound to (it becomes invalid when
                that object is deleted), as a BoundObjectReference:
                ``{"kind": "Secret", "apiVersion": "v1", "name": ..., "uid": ...}``.

        Returns:
            Path of the new kubeconfig; its context's namespace is ``namespace``.

        Raises:
            ControlPlaneNotRunningError: Not started.
            kubernetes.client.exceptions.ApiException: The API server refused.
        """
        workdir = self._require_running()
        ca = self._ca
        assert ca is not None
        # Imported here: the client is heavy and only this method needs it.
        from kubernetes import client, config  # noqa: PLC0415
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

        # The client's kubeconfig loader carries no annotations.
        api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig_path)
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
        token = answer.status.token
        return write_kubeconfig(
            workdir / "kubeconfigs" / f"sa-{namespace}-{name}.kubeconfig",
            server=self.api_url,
            ca_pem=ca.cert_pem,
            user=f"system:serviceaccount:{namespace}:{name}",
            token=token,
            namespace=namespace,
        )

    # ------------------------------------------------------------------- logs

    def log_paths(self) -> dict[str, Path]:
        """Log file of each component, by component name (``etcd``, ``kube-apiserver``, ...).

        Raises:
            ControlPlaneNotRunningError: Not started.
        """
        logs = self._require_running() / "logs"
        return {name: logs / f"{name}.log" for name in COMPONENTS}

    def tail_logs(self, lines: int = 80) -> str:
        """Return the last ``lines`` lines of each component's log, under a header each.

        Returns an explanatory line instead when not running.
        """
        if self._workdir is None:
            return "(control plane not running; no logs)"
        logs = self._workdir / "logs"
        parts = []
        for name in COMPONENTS:
            path = logs / f"{name}.log"
            parts.append(f"==> {name} ({path}) <==\n{_tail(path, lines)}")
        return "\n".join(parts)
