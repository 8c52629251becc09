#!/usr/bin/env bash
# Builds the binaries of the local node (make dev-cluster WITH_NODE=1, the pod e2e tests):
# kubelet and kube-scheduler from the same pinned k8s.io/kubernetes module as the control
# plane (hack/k8s), and containerd 2 with its runc shim and ctr from hack/containerd,
# into a cache outside the repository keyed by both versions; prints the directory.
# runc, socat (the API server relay), the CNI plugins and catatonit (the pause image)
# are Debian packages, installed here when missing.
# Binaries already present and reporting the pinned version are not rebuilt. Concurrent
# runs wait for each other (flock). Progress and build times go to stderr.
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

build() { # build <module dir> <package> <binary name> <ldflags> [go build args...]
  local dir="$1" pkg="$2" name="$3" ldflags="$4"
  shift 4
  if up_to_date "$name"; then
    return 0
  fi
  command -v go >/dev/null 2>&1 || {
    echo "build-node: the Go toolchain is required to build $name (go not found on PATH)" >&2
    exit 1
  }
  echo "build-node: building $name ($pkg) into $cache" >&2
  local start=$SECONDS
  (cd "$dir" && go build -trimpath -ldflags="$ldflags" "$@" -o "$cache/$name.tmp" "$pkg")
  mv "$cache/$name.tmp" "$cache/$name"
  echo "build-node: built $name in $((SECONDS - start))s" >&2
}

# No btrfs/devmapper snapshotters (they need C headers); overlayfs and native remain.
ctrd_tags=(-tags "no_btrfs no_devmapper no_zfs")
build "$here/containerd" github.com/containerd/containerd/v2/cmd/containerd containerd "$ctrd_ldflags" "${ctrd_tags[@]}"
CGO_ENABLED=0 build "$here/containerd" github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 containerd-shim-runc-v2 "$ctrd_ldflags"
build "$here/containerd" github.com/containerd/containerd/v2/cmd/ctr ctr "$ctrd_ldflags" "${ctrd_tags[@]}"
build "$here/k8s" k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler "$k8s_ldflags"
build "$here/k8s" k8s.io/kubernetes/cmd/kubelet kubelet "$k8s_ldflags"
echo "$cache"
