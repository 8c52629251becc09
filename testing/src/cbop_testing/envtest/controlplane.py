"""A real, local Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager.

Like controller-runtime's envtest it runs the real binaries on loopback with throwaway
state, but it also runs kube-controller-manager (garbage collector, namespace
controller, service accounts), so owner-reference garbage collection and namespace
deletion behave as on a cluster. By default (``controllers=``) only those run; the
developer cluster runs kube-controller-manager's default set (``*``). There are no nodes
and no kubelet unless ``for_nodes=True`` and a :class:`~cbop_testing.envtest.node.Node`
joins: without one, pods never run.

Layout of the work directory (all components log there)::

    pki/            CA (its key too: the CSR signer's), serving and admin client
                    certificates, kube-apiserver's kubelet client certificate,
                    service-account key
    etcd/           etcd data (``--unsafe-no-fsync``)
    logs/           etcd.log, kube-apiserver.log, kube-controller-manager.log,
                    audit.log (JSON lines, when an audit policy is given)
    audit-policy.yaml  the audit policy, when one is given
    egress-selector.yaml, cluster-egress.sock
                    for nodes: how kube-apiserver reaches kubelets (egressproxy)
    kubeconfig      admin (CN=admin, O=system:masters), client-certificate auth
    kubeconfigs/    kubeconfigs issued by kubeconfig_for_user / _for_service_account

What each component runs (flags, certificates, probes) is in
:mod:`cbop_testing.envtest.components`, and the processes are run by a
:class:`~cbop_testing.envtest.supervisor.Supervisor`; this module owns the lifecycle.
Fault hooks for tests: :meth:`ControlPlane.compact_etcd`,
:meth:`ControlPlane.restart_apiserver`, :meth:`ControlPlane.pause_apiserver` /
:meth:`ControlPlane.resume_apiserver`.
"""

from __future__ import annotations

import base64
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from cbop_testing.envtest import process
from cbop_testing.envtest.binaries import Binaries, find_binaries
from cbop_testing.envtest.components import (
    CLUSTER_EGRESS_SOCKET,
    COMPONENTS,
    DEFAULT_CONTROLLERS,
    KUBELET_API_ADMIN_BINDING,
    REQUIRED_ADMISSION_PLUGIN,
    Ports,
    apiserver_command,
    audit_flags,
    controller_manager_command,
    etcd_call,
    etcd_command,
    etcd_healthy,
    https_ok,
    https_post_json,
    with_node_controllers,
    write_egress_selector_config,
    write_pki,
)
from cbop_testing.envtest.errors import (
    ControlPlaneError,
    ControlPlaneNotRunningError,
    ControlPlaneStartError,
)
from cbop_testing.envtest.kubeconfig import (
    service_account_kubeconfig,
    user_kubeconfig,
    write_kubeconfig,
)
from cbop_testing.envtest.pki import CertificateAuthority, KeyPair
from cbop_testing.envtest.supervisor import Exited, Restart, Supervisor

__all__ = ["ControlPlane"]

#: Attempts at starting when a chosen port was taken meanwhile by another process.
_PORT_ATTEMPTS: Final = 3
#: Seconds between readiness probes.
_POLL_INTERVAL: Final = 0.1
#: Seconds a component gets to exit after SIGTERM before SIGKILL.
_STOP_GRACE: Final = 10.0
#: What kube-controller-manager logs before it exits for want of an apiserver: giving up
#: waiting for a healthy one, or (1.36's namespace controller at start-up) finding its
#: port closed while it is being restarted.
_KCM_APISERVER_DOWN: Final = (
    "failed to wait for apiserver being healthy",
    "connect: connection refused",
)
#: How often kube-controller-manager is restarted after giving up that way.
_KCM_STARTUP_RESPAWNS: Final = 3
_KCM_RESTART: Final = Restart(code=1, log_signs=_KCM_APISERVER_DOWN, limit=_KCM_STARTUP_RESPAWNS)


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
            as on a kubeadm cluster), and :data:`NODE_CONTROLLERS` (unless
            ``controllers`` has ``*``, which runs them). And the way from kube-apiserver
            to the kubelets, for ``kubectl logs``/``exec``: a client certificate
            (:data:`KUBELET_CLIENT_USER`, bound to ``system:kubelet-api-admin``), the
            kubelets' serving certificates checked against the CA, and connections
            through :attr:`cluster_egress_socket`. Off by default: without a node, pods
            never run.
        sharded_list_and_watch: kube-apiserver's ``ShardedListAndWatch`` feature gate
            (alpha in 1.36, off upstream by default; KEP-5866): lists and watches honour
            ``shardSelector``. On by default here; off, the parameter is ignored, as by
            a server without the gate (for tests of the client-side fallback).

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
        sharded_list_and_watch: bool = True,
    ) -> None:
        for flag in extra_apiserver_flags:
            if flag.startswith("--disable-admission-plugins") and (
                REQUIRED_ADMISSION_PLUGIN in flag
            ):
                raise ValueError(f"{REQUIRED_ADMISSION_PLUGIN} is always enabled: {flag!r}")
        self._binaries = binaries
        self._requested_workdir = workdir
        self._extra_apiserver_flags = tuple(extra_apiserver_flags)
        self.controllers = with_node_controllers(controllers) if for_nodes else tuple(controllers)
        """kube-controller-manager's ``--controllers``: ``controllers``, plus the node ones."""
        self.for_nodes = for_nodes
        """Whether this control plane was made for kubelets (the ``for_nodes`` argument)."""
        self._extra_kcm_flags = tuple(extra_controller_manager_flags)
        self._extra_etcd_flags = tuple(extra_etcd_flags)
        self._audit_policy = audit_policy
        self.sharded_list_and_watch = sharded_list_and_watch
        """Whether kube-apiserver runs with the ``ShardedListAndWatch`` gate on."""
        self._lock = threading.RLock()
        self._workdir: Path | None = None
        self._own_workdir = False
        self._procs: Supervisor | None = None
        self._spawned_before: list[int] = []
        self._ca: CertificateAuthority | None = None
        self._etcd_port = 0
        self._apiserver_port = 0
        self._kcm_port = 0
        self._paused = False
        self.startup_seconds: float = 0.0
        """Seconds the last :meth:`start` took from spawning etcd to all components ready."""
        self.startup_phases: dict[str, float] = {}
        """Seconds each component took to become ready in the last :meth:`start`, by name."""

    # ----------------------------------------------------------------- properties

    def _require_running(self) -> Path:
        if self._workdir is None or not self._children:
            raise ControlPlaneNotRunningError(f"{self!r} is not running")
        return self._workdir

    @property
    def _children(self) -> dict[str, subprocess.Popen[bytes]]:
        return self._procs.children if self._procs is not None else {}

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
    def cluster_egress_socket(self) -> Path:
        """The Unix socket through which kube-apiserver connects to nodes and pods.

        A control plane made ``for_nodes`` sends every connection to a kubelet or a pod
        (``kubectl logs``, ``exec``, ``port-forward``) there as an HTTP ``CONNECT``
        request (egress selector ``cluster``); a
        :class:`~cbop_testing.envtest.node.Node` serves it from inside its network
        namespace (:mod:`~cbop_testing.envtest.egressproxy`). Its path must stay below
        108 bytes.

        Raises:
            ControlPlaneNotRunningError: Not started.
            ControlPlaneError: Not made ``for_nodes``.
        """
        workdir = self._require_running()
        if not self.for_nodes:
            raise ControlPlaneError(f"{self!r} was not made for nodes")
        return workdir / CLUSTER_EGRESS_SOCKET

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
            return self._procs.pids() if self._procs is not None else {}

    def check(self) -> None:
        """Raise unless every component is still running.

        A kube-controller-manager that gave up waiting for a restarting apiserver is
        started again instead (see :attr:`respawns`).

        Raises:
            ControlPlaneNotRunningError: Not started.
            ControlPlaneError: A component exited; the message has its status and log tail.
        """
        with self._lock:
            self._require_running()
            assert self._procs is not None
            for exited in self._procs.exited():
                raise ControlPlaneError(
                    f"{exited.name} (pid {exited.pid}) exited with status {exited.code}; "
                    f"log tail:\n{exited.log_tail}"
                )

    @property
    def respawns(self) -> dict[str, int]:
        """How often each component was started again since :meth:`start`, by name.

        Only kube-controller-manager is: when it exited with status 1 for want of an
        apiserver at start-up (it waits only 10 s for kube-apiserver's ``/healthz``
        while it builds its controllers; 1.36's namespace controller exits when the
        port is closed), as a kubelet restarts a static pod, at most
        ``_KCM_STARTUP_RESPAWNS`` times. Killed by a signal, it is reported, not restarted.
        """
        return dict(self._procs.respawns) if self._procs is not None else {}

    @property
    def spawned_pids(self) -> tuple[int, ...]:
        """Every process id this control plane ever started (restarts included)."""
        current = self._procs.spawned if self._procs is not None else []
        return (*self._spawned_before, *current)

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
            for stale in (
                "etcd",
                "pki",
                "logs",
                "kubeconfigs",
                "kubeconfig",
                "egress-selector.yaml",
                CLUSTER_EGRESS_SOCKET,
            ):
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

    def _start_once(self, deadline: float) -> None:
        binaries = self.binaries
        workdir = self._prepare_workdir()
        self._workdir = workdir
        self._procs = procs = Supervisor(workdir, poll=_POLL_INTERVAL, grace=_STOP_GRACE)
        self._ca = ca = write_pki(workdir)
        pki = workdir / "pki"
        ports = Ports(*process.free_ports(4))
        self._etcd_port, self._apiserver_port = ports.etcd, ports.apiserver
        self._kcm_port = ports.controller_manager
        process.register(self)
        began = time.monotonic()

        procs.spawn("etcd", etcd_command(binaries, workdir, ports, self._extra_etcd_flags))
        self._wait("etcd", deadline, self._etcd_ready)

        if self.for_nodes:
            write_egress_selector_config(workdir)
        command = apiserver_command(
            binaries,
            workdir,
            ports,
            for_nodes=self.for_nodes,
            audit=audit_flags(workdir, self._audit_policy),
            feature_gates={"ShardedListAndWatch": self.sharded_list_and_watch},
            extra=self._extra_apiserver_flags,
        )
        procs.spawn("kube-apiserver", command)
        write_kubeconfig(
            workdir / "kubeconfig",
            server=f"https://127.0.0.1:{self._apiserver_port}",
            ca_pem=ca.cert_pem,
            user="admin",
            client_cert_pem=(pki / "admin.crt").read_bytes(),
            client_key_pem=(pki / "admin.key").read_bytes(),
        )
        self._wait("kube-apiserver", deadline, self._apiserver_ready)
        if self.for_nodes:
            # Bootstrap RBAC is in place once /readyz answers 200.
            try:
                https_post_json(
                    f"{self.api_url}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                    pki,
                    KUBELET_API_ADMIN_BINDING,
                )
            except ControlPlaneError as exc:
                raise ControlPlaneStartError(
                    f"granting kube-apiserver access to kubelets failed: {exc}"
                ) from exc

        command = controller_manager_command(
            binaries, workdir, ports, self.controllers, self._extra_kcm_flags
        )
        procs.spawn("kube-controller-manager", command, restart=_KCM_RESTART)
        self._wait("kube-controller-manager", deadline, self._kcm_ready)
        self.startup_seconds = time.monotonic() - began

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

    def _wait(self, name: str, deadline: float, probe: Callable[[], bool]) -> None:
        assert self._procs is not None
        try:
            self.startup_phases[name] = self._procs.wait(
                name,
                deadline,
                probe,
                on_exit=self._exited_while_starting,
                not_yet=(OSError, ssl.SSLError, ValueError),
            )
        except TimeoutError as exc:
            raise ControlPlaneStartError(f"{exc}; logs:\n{self.tail_logs(40)}") from None

    def _exited_while_starting(self, exited: Exited) -> None:
        """Raise for a component that exited during start-up (any, not only the awaited one)."""
        message = f"{exited.name} exited with status {exited.code} during start-up"
        if "address already in use" in exited.log_tail:
            raise _PortInUseError(f"{message}:\n{exited.log_tail}")
        raise ControlPlaneStartError(f"{message}; log tail:\n{exited.log_tail}")

    def stop(self) -> None:
        """Stop every component (SIGTERM to its process group, SIGKILL after 10 s) and reap it.

        Idempotent. Removes the work directory when it was temporary. Safe to call from
        a signal handler or ``atexit``.
        """
        with self._lock:
            if self._procs is not None:
                self._procs.stop_all(reversed(COMPONENTS))
                self._spawned_before.extend(self._procs.spawned)
                self._procs = None
            self._paused = False
            process.unregister(self)
            if self._workdir is not None and self._own_workdir:
                shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    # ----------------------------------------------------------------- probes

    def _etcd_ready(self) -> bool:
        return etcd_healthy(self.etcd_url)

    def _apiserver_ready(self) -> bool:
        pki = self._require_running() / "pki"
        return https_ok(f"https://127.0.0.1:{self._apiserver_port}/readyz", pki)

    def _kcm_ready(self) -> bool:
        pki = self._require_running() / "pki"
        return https_ok(f"https://127.0.0.1:{self._kcm_port}/healthz", pki)

    def apiserver_ready(self, timeout: float = 2.0) -> bool:
        """Whether kube-apiserver's ``/readyz`` answers 200 within ``timeout`` seconds."""
        try:
            return https_ok(f"{self.api_url}/readyz", self.workdir / "pki", timeout)
        except (OSError, ssl.SSLError):
            return False

    # ------------------------------------------------------------ fault hooks

    def etcd_revision(self) -> int:
        """Return etcd's current revision (the newest resourceVersion of any object).

        Raises:
            ControlPlaneNotRunningError: Not started.
            ControlPlaneError: etcd did not answer.
        """
        self._require_running()
        # A range over the single key "\\0" is cheap; the header carries the revision.
        answer = etcd_call(self.etcd_url, "/v3/kv/range", {"key": base64.b64encode(b"\0").decode()})
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
        etcd_call(self.etcd_url, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
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
            assert self._procs is not None
            self._procs.stop("kube-apiserver")
            self._paused = False
            self._procs.spawn("kube-apiserver")
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
        assert self._ca is not None
        return user_kubeconfig(
            workdir / "kubeconfigs", server=self.api_url, ca=self._ca, user=user, groups=groups
        )

    def issue_certificate(
        self,
        common_name: str,
        organizations: Sequence[str] = (),
        *,
        client: bool = True,
        server: bool = False,
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
    ) -> KeyPair:
        """Issue a certificate signed by this control plane's CA (a kubelet's, say).

        Args:
            common_name: Subject CN (a client's user name).
            organizations: Subject O values (a client's groups).
            client: Allow TLS client authentication.
            server: Allow TLS server authentication.
            dns_names: Subject alternative DNS names.
            ip_addresses: Subject alternative IP addresses.

        Returns:
            The PEM certificate and its PEM key; nothing is written.

        Raises:
            ControlPlaneNotRunningError: Not started.
        """
        self._require_running()
        ca = self._ca
        assert ca is not None
        return ca.issue(
            common_name,
            tuple(organizations),
            client=client,
            server=server,
            dns_names=tuple(dns_names),
            ip_addresses=tuple(ip_addresses),
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
        assert self._ca is not None
        return service_account_kubeconfig(
            workdir / "kubeconfigs",
            self.kubeconfig_path,
            server=self.api_url,
            ca_pem=self._ca.cert_pem,
            namespace=namespace,
            name=name,
            expiration_seconds=expiration_seconds,
            bound_object=bound_object,
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
            parts.append(f"==> {name} ({path}) <==\n{process.tail_file(path, lines)}")
        return "\n".join(parts)
