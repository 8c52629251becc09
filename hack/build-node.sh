#!/usr/bin/env bash
# Builds the binaries of the local node (make dev-cluster WITH_NODE=1, the pod e2e tests):
# kubelet and kube-scheduler from the same pinned k8s.io/kubernetes module as the control
# plane (hack/k8s), and containerd 2 with its runc shim and ctr from hack/containerd,
# into a cache outside the repository keyed by both versions; prints the directory.
# runc, socat (the API server relay), the CNI plugins and catatonit (the pause image)
# are Debian packages, installed here when missing.
# Binaries already present and reporting the pinned version are not rebuilt. Concurrent
# runs wait for each other (flock). Progress and build times go to stderr. How it
# builds: hack/go-build.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
k8s_version="$(grep -oE "^\s*k8s.io/kubernetes v[0-9.]+" "$here/k8s/go.mod" | awk '{print $2}')"
ctrd_version="$(grep -oE "^\s*github.com/containerd/containerd/v2 v[0-9.]+" "$here/containerd/go.mod" | awk '{print $2}')"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/cbop/bin/node-k8s-${k8s_version}-containerd-${ctrd_version}"

"$here/apt-tools.sh" runc=runc socat=socat nsenter=util-linux catatonit=catatonit \
  /usr/lib/cni/bridge=containernetworking-plugins podman=podman

mkdir -p "$cache"
exec 9>"$cache/.build.lock"
if ! flock -n 9; then
  echo "build-node: another build into $cache is running; waiting for it" >&2
  flock 9
fi

# Release version stamps, as in build-control-plane.sh (Kubernetes' hack/lib/version.sh;
# containerd's Makefile sets version.Version the same way).
k8s_minor="${k8s_version#v*.}"; k8s_minor="${k8s_minor%%.*}"
k8s_major="${k8s_version#v}"; k8s_major="${k8s_major%%.*}"
k8s_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X ${pkg}.gitVersion=${k8s_version} -X ${pkg}.gitMajor=${k8s_major}"
  k8s_ldflags+=" -X ${pkg}.gitMinor=${k8s_minor} -X ${pkg}.gitTreeState=clean"
done
ctrd_ldflags="-X github.com/containerd/containerd/v2/version.Version=${ctrd_version}"

up_to_date() { # up_to_date <binary name>
  local bin="$cache/$1"
  [[ -x "$bin" ]] || return 1
  local out # read whole before grep -q (no SIGPIPE under pipefail)
  case "$1" in
    kubelet | kube-scheduler) out="$("$bin" --version 2>/dev/null)" && grep -qF "Kubernetes ${k8s_version}" <<<"$out" ;;
    containerd | ctr) out="$("$bin" --version 2>/dev/null)" && grep -qF " ${ctrd_version}" <<<"$out" ;;
    *) return 0 ;;
  esac
}

stale() { # stale <binary name>...: print those that are not up to date
  local name
  for name in "$@"; do up_to_date "$name" || echo "$name"; done
}
mapfile -t ctrd_stale < <(stale containerd ctr)
mapfile -t shim_stale < <(stale containerd-shim-runc-v2)
mapfile -t k8s_stale < <(stale kube-scheduler kubelet)
if ((${#ctrd_stale[@]} + ${#shim_stale[@]} + ${#k8s_stale[@]})) && ! command -v go >/dev/null 2>&1; then
  echo "build-node: the Go toolchain is required to build" \
    "${ctrd_stale[*]} ${shim_stale[*]} ${k8s_stale[*]} (go not found on PATH)" >&2
  exit 1
fi

# Two builds side by side (hack/go-build.sh: one `go build` each): containerd's module,
# then kubelet and kube-scheduler, which reuse most of the control plane's compiled
# packages. No btrfs/devmapper snapshotters (they need C headers); overlayfs and native
# remain. The shim is static (CGO_ENABLED=0), as containerd's release builds it.
ctrd() {
  local pkg=github.com/containerd/containerd/v2/cmd
  if ((${#ctrd_stale[@]})); then
    "$here/go-build.sh" build-node "$here/containerd" "$cache" "$ctrd_ldflags" \
      -tags="no_btrfs no_devmapper no_zfs" "${ctrd_stale[@]/#/$pkg/}"
  fi
  if ((${#shim_stale[@]})); then
    CGO_ENABLED=0 "$here/go-build.sh" build-node "$here/containerd" "$cache" "$ctrd_ldflags" \
      "$pkg/containerd-shim-runc-v2"
  fi
}
ctrd &
ctrd_pid=$!
trap wait EXIT # a failed kubelet build still lets the containerd build end
if ((${#k8s_stale[@]})); then
  "$here/go-build.sh" build-node "$here/k8s" "$cache" "$k8s_ldflags" "${k8s_stale[@]/#/k8s.io/kubernetes/cmd/}"
fi
wait $ctrd_pid
trap - EXIT
echo "$cache"
