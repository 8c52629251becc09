"""A real Kubernetes node next to the local control plane: kubelet, containerd 2, runc.

:class:`Node` runs kube-scheduler, containerd (built from the pinned Go module in
``hack/containerd``) and a kubelet (from the same ``k8s.io/kubernetes`` module as the
control plane) so that the shipped Deployment really runs: pods are scheduled, their
containers started by runc, probed by the kubelet, given a projected service-account
token, and killed and replaced as on any cluster.

Networking stays off the host's network. The kubelet, containerd and every pod live in
a network namespace the node creates (``ip netns add``): pods get addresses on a CNI
bridge inside it (Debian's ``containernetworking-plugins``), the node itself has an
address on a veth interface there, and nothing is routed out. The API server listens
on the host's loopback only; two ``socat`` relays joined by a Unix socket make it
reachable inside the namespace at ``127.0.0.1:<port>`` (for the kubelet) and at the
``kubernetes`` Service's ClusterIP ``10.0.0.1:443`` (what pods' in-cluster
configuration uses). There is no kube-proxy: other Services are not routed.
:meth:`Node.forward_to_node` relays a host loopback port to a port inside the namespace
(for a Prometheus running there, say).

The other way, kube-apiserver reaches the kubelet (``kubectl logs``, ``exec``) as on a
cluster whose control plane has no route to its nodes: through its egress selector. An
HTTP CONNECT proxy (:mod:`~cbop_testing.envtest.egressproxy`) runs inside the namespace
and listens on the control plane's
:attr:`~cbop_testing.envtest.controlplane.ControlPlane.cluster_egress_socket`; the API
server dials the node's ``InternalIP`` through it, presents its kubelet client
certificate and checks the kubelet's serving certificate, which the node has the
control plane's CA issue for its name and address.

Host settings the kubelet changes: it sets ``vm.overcommit_memory``, ``kernel.panic``,
``kernel.panic_on_oops`` and related sysctls (its ``protectKernelDefaults: false``
behaviour). They are shared by every node on the machine
(:mod:`~cbop_testing.envtest.kernelsettings`): the first node to start saves them, the
last one to stop restores them, and a node that died without stopping is not counted.
Cgroups (v1 with the cgroupfs driver, ``failCgroupV1: false``; v2 works as well) live
under a cgroup root of the node's own name, removed at stop.

This module owns the node's lifecycle, relays, images and logs; the configuration files
are written by :mod:`~cbop_testing.envtest.nodeconfig`, the cgroups, network namespace
and mounts made and removed by :mod:`~cbop_testing.envtest.nodehost`, the processes
run by a :class:`~cbop_testing.envtest.supervisor.Supervisor`, as the control plane's.

Needs root, ``ip`` (iproute2), ``socat``, ``runc``, the CNI plugins and ``podman`` (to
hand images to containerd without a registry: ``podman save | ctr images import``);
``hack/build-node.sh`` installs them from Debian.

Layout of the work directory::

    containerd/  containerd's root and state; containerd.toml; cni/ (the CNI config)
    kubelet/     the kubelet's root directory; kubelet.yaml, its configuration
    pod-logs/    container logs, <namespace>_<pod>_<uid>/<container>/<n>.log
    logs/        containerd.log, kubelet.log, kube-scheduler.log, egress-proxy.log,
                 relay logs
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from cbop_testing.envtest import process
from cbop_testing.envtest.binaries import NodeBinaries, find_node_binaries, repo_root
from cbop_testing.envtest.components import KUBERNETES_SERVICE_IP
from cbop_testing.envtest.controlplane import ControlPlane
from cbop_testing.envtest.errors import NodeError
from cbop_testing.envtest.kernelsettings import KernelSettings
from cbop_testing.envtest.nodeconfig import (
    NODE_IP,
    POD_SUBNET,
    write_containerd_config,
    write_kubelet_config,
)
from cbop_testing.envtest.nodehost import (
    COMMAND_TIMEOUT,
    kill_cgroup_tree,
    make_cgroup_root,
    make_netns,
    remove_cgroup_tree,
    run,
    unmount_under,
)
from cbop_testing.envtest.supervisor import Exited, Supervisor

__all__ = ["Node", "NodeError"]

#: Seconds between readiness polls.
_POLL: Final = 0.5
#: Seconds a component gets to exit after SIGTERM before SIGKILL.
_STOP_GRACE: Final = 15.0


class Node:
    """One kubelet node on containerd, in its own network namespace (module docstring).

    Args:
        control_plane: A running :class:`ControlPlane` made with ``for_nodes=True``.
        images: podman image names to load into containerd before the kubelet starts
            (e.g. ``["localhost/cbop:dev"]``). Each is also tagged with the name
            Kubernetes gives a bare reference: ``localhost/cbop:dev`` answers to
            ``cbop:dev`` (``docker.io/library/cbop:dev``).
        pause_image: The pod sandbox image, already in podman (hack/image/pause.sh).
        binaries: The node executables; :func:`find_node_binaries` when None.
        workdir: State, configuration and logs; a temporary directory (removed at stop)
            when None. Unix socket paths under it must stay below 108 bytes.
        name: The Node's name; ``cbop-node-<random>`` when None.

    Use as a context manager or call :meth:`start` and :meth:`stop`. Every process is
    also stopped at interpreter exit and on SIGTERM (:mod:`cbop_testing.envtest.process`).
    """

    def __init__(
        self,
        control_plane: ControlPlane,
        *,
        images: Sequence[str] = (),
        pause_image: str,
        binaries: NodeBinaries | None = None,
        workdir: Path | None = None,
        name: str | None = None,
    ) -> None:
        if not control_plane.for_nodes:
            raise ValueError("the control plane must be made with for_nodes=True")
        self._cp = control_plane
        self._images = tuple(images)
        self._pause_image = pause_image
        self._binaries = binaries
        self._requested_workdir = workdir
        self.name = name or f"cbop-node-{secrets.token_hex(3)}"
        """The Node object's name (also its kubelet's ``--hostname-override``)."""
        self.netns = f"cbop-{secrets.token_hex(4)}"
        """The network namespace (``ip netns``) of the kubelet, containerd and the pods."""
        self._lock = threading.RLock()
        self._workdir: Path | None = None
        self._own_workdir = False
        self._procs: Supervisor | None = None
        self._kernel_settings = KernelSettings()
        self._netns_made = False
        self.startup_phases: dict[str, float] = {}
        """Seconds each start-up phase took (``images``, ``kubelet``: to a Ready Node)."""

    # ----------------------------------------------------------------- properties

    @property
    def workdir(self) -> Path:
        """The work directory (module docstring).

        Raises:
            NodeError: Not started.
        """
        if self._workdir is None:
            raise NodeError(f"{self!r} is not running")
        return self._workdir

    @property
    def cgroup_root(self) -> str:
        """The kubelet's ``cgroupRoot``: ``/<node name>`` in every hierarchy."""
        return f"/{self.name}"

    def __repr__(self) -> str:
        return f"Node(name={self.name!r}, netns={self.netns!r})"

    def in_netns(self, *args: str) -> list[str]:
        """Return ``args`` prefixed so that they run inside the node's network namespace.

        ``nsenter --net`` enters the network namespace only (``ip netns exec`` would also
        give the process a private mount namespace with a fresh /sys, hiding the cgroup
        hierarchies from the kubelet and containerd's mounts from the host).
        """
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--", *args]

    def ctr(self, *args: str) -> str:
        """Run the node's ``ctr`` in containerd's ``k8s.io`` namespace; return its stdout.

        Raises:
            NodeError: ctr failed.
        """
        binaries = self._require_binaries()
        return run(
            [
                str(binaries.path("ctr")),
                "--address",
                str(self.workdir / "containerd.sock"),
                "--namespace",
                "k8s.io",
                *args,
            ]
        )

    def _require_binaries(self) -> NodeBinaries:
        if self._binaries is None:
            self._binaries = find_node_binaries()
        return self._binaries

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

    def start(self, timeout: float = 180.0) -> None:
        """Start everything and return once the Node is Ready.

        Args:
            timeout: Seconds from the first process to a Ready Node (images loaded).

        Raises:
            NodeError: A component exited or the Node was not Ready in time; everything
                started is stopped again. The message has the logs' tails.
            BinariesUnavailableError: The node binaries cannot be built.
        """
        with self._lock:
            if self._procs is not None and self._procs.children:
                raise NodeError(f"{self!r} is already running")
            binaries = self._require_binaries()
            try:
                self._start(binaries, time.monotonic() + timeout)
            except BaseException:
                self.stop()
                raise

    def _start(self, binaries: NodeBinaries, deadline: float) -> None:
        if self._requested_workdir is not None:
            workdir = self._requested_workdir.resolve()
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(tempfile.mkdtemp(prefix="cbop-node-"))
            self._own_workdir = True
        self._workdir = workdir
        self._procs = Supervisor(workdir, poll=_POLL, grace=_STOP_GRACE)
        for sub in ("containerd/cni", "kubelet", "pod-logs", "logs"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        process.register(self)
        self._kernel_settings.acquire()
        self._make_netns()
        self._relay_apiserver()
        self._serve_cluster_egress(deadline)

        began = time.monotonic()
        config = write_containerd_config(workdir, pause_image=self._pause_image, network=self.netns)
        path = f"{binaries.directory}:{os.environ.get('PATH', '/usr/sbin:/usr/bin')}"
        self._spawn(
            "containerd",
            self.in_netns(
                "env",
                f"PATH={path}",
                str(binaries.path("containerd")),
                "--config",
                str(config),
            ),
        )
        self._wait("containerd", deadline, self._containerd_ready)
        for image in (self._pause_image, *self._images):
            self.load_image(image)
        self.startup_phases["images"] = time.monotonic() - began

        began = time.monotonic()
        scheduler_kubeconfig = self._cp.kubeconfig_path
        self._spawn(
            "kube-scheduler",
            [
                str(binaries.path("kube-scheduler")),
                f"--kubeconfig={scheduler_kubeconfig}",
                f"--authentication-kubeconfig={scheduler_kubeconfig}",
                f"--authorization-kubeconfig={scheduler_kubeconfig}",
                "--authentication-skip-lookup=true",
                f"--client-ca-file={self._cp.ca_path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={process.free_ports(1)[0]}",
                "--leader-elect=false",
            ],
        )
        kubeconfig = self._cp.kubeconfig_for_user(f"system:node:{self.name}", ("system:nodes",))
        serving_cert, serving_key = self._write_serving_certificate()
        kubelet_config = write_kubelet_config(
            workdir,
            client_ca=self._cp.ca_path,
            cgroup_root=self.cgroup_root,
            serving_cert=serving_cert,
            serving_key=serving_key,
        )
        make_cgroup_root(self.name)
        self._spawn(
            "kubelet",
            self.in_netns(
                str(binaries.path("kubelet")),
                f"--config={kubelet_config}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={workdir / 'kubelet'}",
                f"--cert-dir={workdir / 'kubelet' / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ),
        )
        self._wait("kubelet", deadline, self._node_ready)
        self.startup_phases["kubelet"] = time.monotonic() - began

    def stop(self) -> None:
        """Stop the kubelet, every container, containerd, the scheduler and the relays.

        Then the pods' mounts under the work directory are unmounted, the node's cgroups
        and network namespace removed, the kernel settings restored and a temporary work
        directory deleted. Idempotent; safe from a signal handler or ``atexit``.
        """
        with self._lock:
            procs = self._procs
            if procs is not None:
                procs.stop("kubelet")
            kill_cgroup_tree(self.name)
            if procs is not None:
                procs.stop_all(list(procs.children))
            workdir = self._workdir
            if workdir is not None:
                # Shims and relays outlive containerd (they run in their own sessions).
                for pid in process.processes_mentioning(str(workdir)):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                unmount_under(workdir)
            remove_cgroup_tree(self.name)
            if self._netns_made:
                subprocess.run(["ip", "netns", "delete", self.netns], check=False)
                self._netns_made = False
            self._kernel_settings.release()
            self._procs = None
            process.unregister(self)
            if workdir is not None and self._own_workdir:
                shutil.rmtree(workdir, ignore_errors=True)
            self._workdir = None

    # ------------------------------------------------------------- components

    def _spawn(self, name: str, args: Sequence[str]) -> None:
        assert self._procs is not None
        self._procs.spawn(name, args)

    def _wait(self, name: str, deadline: float, probe: Callable[[], bool]) -> None:
        assert self._procs is not None

        def exited(gone: Exited) -> None:
            raise NodeError(
                f"{gone.name} exited with status {gone.code} while waiting for "
                f"{name}; logs:\n{self.tail_logs(40)}"
            )

        try:
            self._procs.wait(
                name, deadline, probe, on_exit=exited, not_yet=(NodeError, OSError, ValueError)
            )
        except TimeoutError as exc:
            raise NodeError(f"{exc}; logs:\n{self.tail_logs(40)}") from None

    def _containerd_ready(self) -> bool:
        self.ctr("version")
        return True

    def _node_ready(self) -> bool:
        out = run(
            [
                str(self._cp.binaries.kubectl),
                f"--kubeconfig={self._cp.kubeconfig_path}",
                "get",
                "node",
                self.name,
                "-o",
                "json",
            ]
        )
        conditions = json.loads(out).get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def load_image(self, image: str) -> None:
        """Copy a podman image into the node's containerd (no registry involved).

        ``podman save`` writes it as an archive that ``ctr images import`` unpacks into
        containerd's ``k8s.io`` namespace, where the kubelet finds it; a ``localhost/``
        name is also tagged as ``docker.io/library/...``, the name Kubernetes gives a
        reference without a registry.

        Raises:
            NodeError: podman or ctr failed.
        """
        workdir = self.workdir
        archive = workdir / "image.tar"
        env = {**os.environ}
        conf = repo_root()
        if conf is not None and "CONTAINERS_CONF" not in env:
            env["CONTAINERS_CONF"] = str(conf / "hack" / "image" / "containers.conf")
        try:
            subprocess.run(
                ["podman", "save", "--quiet", "--output", str(archive), image],
                check=True,
                capture_output=True,
                env=env,
                timeout=COMMAND_TIMEOUT,
            )
        except subprocess.CalledProcessError as exc:
            raise NodeError(f"podman save {image} failed: {exc.stderr.decode()}") from exc
        try:
            self.ctr("images", "import", "--digests", "--snapshotter", "overlayfs", str(archive))
        finally:
            archive.unlink(missing_ok=True)
        if image.startswith("localhost/"):
            alias = "docker.io/library/" + image.removeprefix("localhost/")
            self.ctr("images", "tag", "--force", image, alias)

    # ------------------------------------------------------------ networking

    def _make_netns(self) -> None:
        self._netns_made = True  # deleted at stop even when set-up fails half-way
        make_netns(self.netns, service_ip=KUBERNETES_SERVICE_IP, node_ip=NODE_IP)

    def _relay(self, name: str, listen: str, connect: str, *, in_netns: bool) -> None:
        args = ["socat", f"{listen},fork,reuseaddr", connect]
        self._spawn(name, self.in_netns(*args) if in_netns else args)

    def _relay_apiserver(self) -> None:
        workdir = self.workdir
        port = int(self._cp.api_url.rsplit(":", 1)[1])
        sock = workdir / "apiserver.sock"
        self._relay(
            "relay-apiserver",
            f"UNIX-LISTEN:{sock},unlink-early",
            f"TCP:127.0.0.1:{port}",
            in_netns=False,
        )
        self._relay(
            "relay-apiserver-loopback",
            f"TCP-LISTEN:{port},bind=127.0.0.1",
            f"UNIX-CONNECT:{sock}",
            in_netns=True,
        )
        self._relay(
            "relay-apiserver-service",
            f"TCP-LISTEN:443,bind={KUBERNETES_SERVICE_IP}",
            f"UNIX-CONNECT:{sock}",
            in_netns=True,
        )

    def _serve_cluster_egress(self, deadline: float) -> None:
        """Run the proxy through which kube-apiserver reaches the kubelet and the pods.

        It listens on the control plane's :attr:`~ControlPlane.cluster_egress_socket`
        from inside the namespace and dials only the node's address and its pods'.
        """
        sock = self._cp.cluster_egress_socket
        self._spawn(
            "egress-proxy",
            self.in_netns(
                sys.executable,
                "-m",
                "cbop_testing.envtest.egressproxy",
                f"--socket={sock}",
                f"--allow={NODE_IP}/32",
                f"--allow={POD_SUBNET}",
            ),
        )

        def listening() -> bool:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.connect(str(sock))
            return True

        self._wait("egress-proxy", deadline, listening)

    def _write_serving_certificate(self) -> tuple[Path, Path]:
        """Write the kubelet's serving certificate (node name and address, cluster CA)."""
        pki = self.workdir / "kubelet" / "pki"
        pki.mkdir(mode=0o700, parents=True, exist_ok=True)
        pair = self._cp.issue_certificate(
            f"system:node:{self.name}",
            ("system:nodes",),
            client=False,
            server=True,
            dns_names=(self.name,),
            ip_addresses=(NODE_IP,),
        )
        paths = (pki / "kubelet-serving.crt", pki / "kubelet-serving.key")
        for path, data in zip(paths, (pair.cert_pem, pair.key_pem), strict=True):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        return paths

    def forward_to_node(self, address: str, port: int) -> int:
        """Relay a new host loopback port to ``address:port`` inside the node's namespace.

        Args:
            address: An address inside the namespace (``127.0.0.1``, a pod's IP).
            port: The TCP port there.

        Returns:
            The port on the host's ``127.0.0.1`` that reaches it; the relay lives until
            :meth:`stop`.
        """
        workdir = self.workdir
        local = process.free_ports(1)[0]
        sock = workdir / f"fwd-{local}.sock"
        self._relay(
            f"relay-{local}",
            f"UNIX-LISTEN:{sock},unlink-early",
            f"TCP:{address}:{port}",
            in_netns=True,
        )
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        self._relay(
            f"relay-{local}-host",
            f"TCP-LISTEN:{local},bind=127.0.0.1",
            f"UNIX-CONNECT:{sock}",
            in_netns=False,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", local), 1):
                return local
            time.sleep(0.05)
        raise NodeError(f"the relay to {address}:{port} did not start")

    # ------------------------------------------------------------------- logs

    def pod_log(self, namespace: str, pod: str, container: str) -> str:
        """Return the current log of a container of a pod on this node ('' when none).

        The kubelet's log files are read directly (CRI format: time, stream, tag and the
        line), without the API server; ``kubectl logs`` shows the same lines.
        """
        logs = self.workdir / "pod-logs"
        texts = []
        for directory in sorted(logs.glob(f"{namespace}_{pod}_*/{container}")):
            for path in sorted(directory.glob("*.log"), key=lambda p: p.stat().st_mtime):
                texts.append(path.read_text(errors="replace"))
        return "".join(texts)

    def tail_logs(self, lines: int = 60) -> str:
        """Return the last ``lines`` lines of each component's log, under a header each."""
        if self._workdir is None:
            return "(node not running)"
        parts = []
        for path in sorted((self._workdir / "logs").glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"==> {path.name} <==\n" + "\n".join(text))
        return "\n".join(parts)
