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

Host settings the kubelet changes: it sets ``vm.overcommit_memory``, ``kernel.panic``,
``kernel.panic_on_oops`` and related sysctls (its ``protectKernelDefaults: false``
behaviour); :meth:`Node.stop` restores the values found at start. Cgroups (v1 with the
cgroupfs driver, ``failCgroupV1: false``; v2 works as well) live under a cgroup root of
the node's own name, removed at stop.

Needs root, ``ip`` (iproute2), ``socat``, ``runc``, the CNI plugins and ``podman`` (to
hand images to containerd without a registry: ``podman save | ctr images import``);
``hack/build-node.sh`` installs them from Debian.

Layout of the work directory::

    containerd/  containerd's root and state; containerd.toml; cni/ (the CNI config)
    kubelet/     the kubelet's root directory; kubelet.yaml, its configuration
    pod-logs/    container logs, <namespace>_<pod>_<uid>/<container>/<n>.log
    logs/        containerd.log, kubelet.log, kube-scheduler.log, relay logs
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
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Final, Self

from cbop_testing.envtest import process
from cbop_testing.envtest.binaries import repo_root
from cbop_testing.envtest.controlplane import KUBERNETES_SERVICE_IP, ControlPlane
from cbop_testing.envtest.errors import BinariesUnavailableError, ControlPlaneError

__all__ = ["NODE_BINARY_NAMES", "Node", "NodeBinaries", "find_node_binaries"]

#: Executables built by ``hack/build-node.sh``.
NODE_BINARY_NAMES: Final[tuple[str, ...]] = (
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "kube-scheduler",
    "kubelet",
)
#: The node's address (on a veth interface inside its network namespace) and its pods'
#: subnet (a CNI bridge there). Documentation and private ranges that exist only inside
#: that namespace.
NODE_IP: Final = "192.0.2.10"
POD_SUBNET: Final = "10.244.0.0/24"
#: Host sysctls the kubelet sets (Kubernetes' container manager), restored at stop.
_KERNEL_TUNABLES: Final[tuple[str, ...]] = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
_CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
#: Seconds between readiness polls.
_POLL: Final = 0.5
#: Seconds a component gets to exit after SIGTERM before SIGKILL.
_STOP_GRACE: Final = 15.0
_COMMAND_TIMEOUT: Final = 120.0


class NodeError(ControlPlaneError):
    """The node could not be started or a node operation failed; the message says why."""


@dataclass(frozen=True, slots=True)
class NodeBinaries:
    """The directory holding :data:`NODE_BINARY_NAMES` (``hack/build-node.sh``'s cache)."""

    directory: Path

    def path(self, name: str) -> Path:
        """Return the absolute path of one executable, e.g. ``path("kubelet")``."""
        return self.directory / name


def find_node_binaries() -> NodeBinaries:
    """Build (if missing) and return the node binaries with ``hack/build-node.sh``.

    A cold build takes about 8 minutes on two cores (containerd and its shim, ctr,
    kube-scheduler, kubelet; the kubelet reuses most of the control plane's build).

    Raises:
        BinariesUnavailableError: Not a source checkout, or the build failed.
    """
    root = repo_root()
    if root is None:
        raise BinariesUnavailableError("hack/build-node.sh not found (not a source checkout)")
    result = subprocess.run(
        ["bash", str(root / "hack" / "build-node.sh")],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    directory = Path(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else None
    if result.returncode != 0 or directory is None:
        raise BinariesUnavailableError(f"hack/build-node.sh failed (exit {result.returncode})")
    missing = [n for n in NODE_BINARY_NAMES if not os.access(directory / n, os.X_OK)]
    if missing:
        raise BinariesUnavailableError(f"{', '.join(missing)} missing from {directory}")
    return NodeBinaries(directory)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run(args: Sequence[str], *, stdin: IO[bytes] | None = None) -> str:
    result = subprocess.run(
        list(args),
        stdin=stdin,
        capture_output=True,
        timeout=_COMMAND_TIMEOUT,
        check=False,
    )
    if result.returncode != 0:
        raise NodeError(
            f"{' '.join(args)} failed (exit {result.returncode}): "
            f"{result.stderr.decode(errors='replace').strip()}"
        )
    return result.stdout.decode(errors="replace")


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
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, IO[bytes]] = {}
        self._tunables: dict[str, str] = {}
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
        return _run(
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
            if self._children:
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
        for sub in ("containerd/cni", "kubelet", "pod-logs", "logs"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        process.register(self)
        self._save_tunables()
        self._make_netns()
        self._relay_apiserver()

        began = time.monotonic()
        self._write_containerd_config(workdir)
        path = f"{binaries.directory}:{os.environ.get('PATH', '/usr/sbin:/usr/bin')}"
        self._spawn(
            "containerd",
            self.in_netns(
                "env",
                f"PATH={path}",
                str(binaries.path("containerd")),
                "--config",
                str(workdir / "containerd" / "containerd.toml"),
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
                f"--secure-port={_free_port()}",
                "--leader-elect=false",
            ],
        )
        kubeconfig = self._cp.kubeconfig_for_user(f"system:node:{self.name}", ("system:nodes",))
        self._write_kubelet_config(workdir)
        self._make_cgroup_root()
        self._spawn(
            "kubelet",
            self.in_netns(
                str(binaries.path("kubelet")),
                f"--config={workdir / 'kubelet' / 'kubelet.yaml'}",
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
            popen = self._children.pop("kubelet", None)
            if popen is not None:
                process.terminate(popen, _STOP_GRACE)
            self._kill_cgroup_tree()
            for name in list(self._children):
                process.terminate(self._children.pop(name), _STOP_GRACE)
            workdir = self._workdir
            if workdir is not None:
                # Shims and relays outlive containerd (they run in their own sessions).
                for pid in process.processes_mentioning(str(workdir)):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                self._unmount_under(workdir)
            self._remove_cgroup_tree()
            if self._netns_made:
                subprocess.run(["ip", "netns", "delete", self.netns], check=False)
                self._netns_made = False
            self._restore_tunables()
            for log in self._logs.values():
                with contextlib.suppress(OSError):
                    log.close()
            self._logs.clear()
            process.unregister(self)
            if workdir is not None and self._own_workdir:
                shutil.rmtree(workdir, ignore_errors=True)
            self._workdir = None

    # ------------------------------------------------------------- components

    def _spawn(self, name: str, args: Sequence[str]) -> None:
        workdir = self.workdir
        log = (workdir / "logs" / f"{name}.log").open("ab")
        self._logs[name] = log
        log.write(("=== " + " ".join(args) + "\n").encode())
        log.flush()
        self._children[name] = process.spawn(args, log, cwd=workdir)

    def _wait(self, name: str, deadline: float, probe: object) -> None:
        assert callable(probe)
        last = "no answer yet"
        while True:
            for component, popen in self._children.items():
                if popen.poll() is not None:
                    raise NodeError(
                        f"{component} exited with status {popen.returncode} while waiting "
                        f"for {name}; logs:\n{self.tail_logs(40)}"
                    )
            try:
                if probe():
                    return
            except (NodeError, OSError, ValueError) as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                raise NodeError(
                    f"{name} was not ready in time (last: {last}); logs:\n{self.tail_logs(40)}"
                )
            time.sleep(_POLL)

    def _containerd_ready(self) -> bool:
        self.ctr("version")
        return True

    def _node_ready(self) -> bool:
        out = _run(
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
                timeout=_COMMAND_TIMEOUT,
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
        _run(["ip", "netns", "add", self.netns])
        self._netns_made = True
        ns = ["ip", "-n", self.netns]
        _run([*ns, "link", "set", "lo", "up"])
        # The kubernetes Service's ClusterIP is local inside the namespace (a relay
        # listens there); nothing else is routed anywhere.
        _run([*ns, "addr", "add", f"{KUBERNETES_SERVICE_IP}/32", "dev", "lo"])
        # The node's own address, on one end of a veth pair whose both ends stay inside
        # (the dummy link type is not available on every kernel).
        _run([*ns, "link", "add", "node0", "type", "veth", "peer", "name", "node0-peer"])
        _run([*ns, "addr", "add", f"{NODE_IP}/24", "dev", "node0"])
        _run([*ns, "link", "set", "node0-peer", "up"])
        _run([*ns, "link", "set", "node0", "up"])
        _run([*ns, "route", "add", "default", "dev", "node0"])

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
        local = _free_port()
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

    # --------------------------------------------------------- configuration

    def _write_containerd_config(self, workdir: Path) -> None:
        state = workdir / "containerd"
        (state / "containerd.toml").write_text(
            f"""version = 3
root = '{state / "root"}'
state = '{state / "state"}'
[grpc]
  address = '{workdir / "containerd.sock"}'
[ttrpc]
  address = '{workdir / "containerd.sock.ttrpc"}'
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{self._pause_image}'
[plugins.'io.containerd.cri.v1.runtime']
  netns_mounts_under_state_dir = true
  # Without CAP_SYS_RESOURCE (as on cbop's CI machines) runc cannot lower a process's
  # oom_score_adj below ours (the kubelet asks -998 for sandboxes): clamp it instead.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '{shutil.which("runc") or "runc"}'
        Root = '{state / "runc"}'
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/usr/lib/cni', '/opt/cni/bin']
    conf_dir = '{state / "cni"}'
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
""",
            encoding="utf-8",
        )
        network = {
            "cniVersion": "1.0.0",
            "name": self.netns,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cbop0",
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_SUBNET}]],
                        # Via the bridge, whose address is local to the node's namespace
                        # like the kubernetes Service's ClusterIP.
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(state / "cni-ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        (state / "cni" / "10-cbop.conflist").write_text(json.dumps(network), encoding="utf-8")

    def _write_kubelet_config(self, workdir: Path) -> None:
        kubelet = workdir / "kubelet"
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self._cp.ca_path)},
            },
            "authorization": {"mode": "Webhook"},
            "address": NODE_IP,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "containerRuntimeEndpoint": f"unix://{workdir / 'containerd.sock'}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            # This project's machines run cgroup v1; Kubernetes keeps it behind this flag.
            "failCgroupV1": False,
            "failSwapOn": False,
            "podLogsDir": str(workdir / "pod-logs"),
            "rotateCertificates": False,
            "serializeImagePulls": False,
            # The images are loaded, never pulled: garbage collection must keep them,
            # and a shared machine's full disk must not evict the pods.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "maxPods": 30,
            "resolvConf": "/etc/resolv.conf",
            "staticPodPath": "",
            "syncFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s",
        }
        (kubelet / "kubelet.yaml").write_text(json.dumps(config, indent=2), encoding="utf-8")

    # -------------------------------------------------------- host resources

    def _save_tunables(self) -> None:
        for key in _KERNEL_TUNABLES:
            with contextlib.suppress(OSError):
                self._tunables[key] = (Path("/proc/sys") / key).read_text().strip()

    def _restore_tunables(self) -> None:
        for key, value in self._tunables.items():
            with contextlib.suppress(OSError):
                (Path("/proc/sys") / key).write_text(value)
        self._tunables.clear()

    def _hierarchies(self) -> list[Path]:
        """Cgroup v1 hierarchies (the named systemd one too), or the v2 mount."""
        if (_CGROUP_ROOT / "cgroup.controllers").exists():
            return [_CGROUP_ROOT]
        return [
            p
            for p in sorted(_CGROUP_ROOT.iterdir())
            if p.is_dir() and not p.is_symlink() and p.name != "unified"
        ]

    def _make_cgroup_root(self) -> None:
        for hierarchy in self._hierarchies():
            target = hierarchy / self.name
            target.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (target / knob).write_text((hierarchy / knob).read_text())

    def _kill_cgroup_tree(self) -> None:
        """SIGKILL every process in the node's cgroups (the containers), until none is left."""
        for _ in range(20):
            pids: set[int] = set()
            for hierarchy in self._hierarchies():
                root = hierarchy / self.name
                if not root.is_dir():
                    continue
                for procs in root.rglob("cgroup.procs"):
                    with contextlib.suppress(OSError, ValueError):
                        pids.update(int(p) for p in procs.read_text().split())
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)

    def _remove_cgroup_tree(self) -> None:
        for hierarchy in self._hierarchies():
            root = hierarchy / self.name
            if not root.is_dir():
                continue
            for directory in sorted(
                (p for p in root.rglob("*") if p.is_dir()),
                key=lambda p: len(p.parts),
                reverse=True,
            ):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                root.rmdir()

    @staticmethod
    def _unmount_under(workdir: Path) -> None:
        prefix = str(workdir) + "/"
        mounts = []
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4].replace("\\040", " ")
                if point.startswith(prefix):
                    mounts.append(point)
        for point in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)

    # ------------------------------------------------------------------- logs

    def pod_log(self, namespace: str, pod: str, container: str) -> str:
        """Return the current log of a container of a pod on this node ('' when none).

        The API server cannot reach the kubelet inside the namespace (``kubectl logs``
        does not work); the kubelet's log files are read directly.
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
