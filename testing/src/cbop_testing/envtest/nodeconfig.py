"""The local node's configuration files: containerd's, the pods' CNI network, the kubelet's.

:class:`~cbop_testing.envtest.node.Node` writes them into its work directory before it
starts containerd and the kubelet; they hold everything that makes the node fit a shared
machine without a registry (see each function).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Final

__all__ = ["NODE_IP", "POD_SUBNET", "write_containerd_config", "write_kubelet_config"]

#: The node's address (on a veth interface inside its network namespace) and its pods'
#: subnet (a CNI bridge there). Documentation and private ranges that exist only inside
#: that namespace.
NODE_IP: Final = "192.0.2.10"
POD_SUBNET: Final = "10.244.0.0/24"


def write_containerd_config(workdir: Path, *, pause_image: str, network: str) -> Path:
    """Write containerd's configuration and the pods' CNI network; return the former's path.

    ``containerd/containerd.toml`` (config version 3): root and state under
    ``workdir/containerd``, sockets in ``workdir``, runc with the cgroupfs driver, the
    sandbox image ``pause_image`` pinned (never garbage-collected), no TCP stream server.
    ``containerd/cni/10-cbop.conflist``: a bridge ``cbop0`` with host-local addresses
    from :data:`POD_SUBNET` and a default route via the bridge, named ``network``.
    """
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
    sandbox = '{pause_image}'
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
    conflist = {
        "cniVersion": "1.0.0",
        "name": network,
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
    (state / "cni" / "10-cbop.conflist").write_text(json.dumps(conflist), encoding="utf-8")
    return state / "containerd.toml"


def write_kubelet_config(
    workdir: Path,
    *,
    client_ca: Path,
    cgroup_root: str,
    serving_cert: Path,
    serving_key: Path,
) -> Path:
    """Write the kubelet's ``KubeletConfiguration`` to ``kubelet/kubelet.yaml``; return it.

    Webhook authentication and authorization (client certificates from ``client_ca``),
    serving on :data:`NODE_IP` with ``serving_cert`` and ``serving_key`` (PEM files; a
    certificate kube-apiserver verifies against the cluster CA), containerd's socket in
    ``workdir``, the cgroupfs driver under ``cgroup_root`` with cgroup v1 allowed, and
    image garbage collection and disk eviction set so that loaded images and pods stay
    on a shared machine's disk.
    """
    kubelet = workdir / "kubelet"
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "address": NODE_IP,
        "tlsCertFile": str(serving_cert),
        "tlsPrivateKeyFile": str(serving_key),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "containerRuntimeEndpoint": f"unix://{workdir / 'containerd.sock'}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
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
    return kubelet / "kubelet.yaml"
