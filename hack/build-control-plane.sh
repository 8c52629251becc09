#!/usr/bin/env bash
# Builds the local control-plane binaries (kube-apiserver, kube-controller-manager,
# kubectl, etcd) from the pinned Go wrapper modules in hack/k8s and hack/etcd into a
# cache outside the repository, keyed by version, and prints the directory.
# Binaries already present are not rebuilt. Honours KUBEBUILDER_ASSETS: when it is set,
# nothing is built and that directory is printed instead.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
k8s_version="$(grep -oE "^\s*k8s.io/kubernetes v[0-9.]+" "$here/k8s/go.mod" | awk '{print $2}')"
etcd_version="$(grep -oE "^\s*go.etcd.io/etcd/server/v3 v[0-9.]+" "$here/etcd/go.mod" | awk '{print $2}')"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/cbop/bin/k8s-${k8s_version}-etcd-${etcd_version}"

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "build-control-plane: the Go toolchain is required to build the control plane (go not found on PATH)" >&2
  exit 1
fi

mkdir -p "$cache"
build() { # build <module dir> <package> <binary name>
  local dir="$1" pkg="$2" name="$3"
  if [[ -x "$cache/$name" ]]; then
    return 0
  fi
  echo "build-control-plane: building $name ($pkg) into $cache" >&2
  (cd "$dir" && go build -trimpath -o "$cache/$name.tmp" "$pkg")
  mv "$cache/$name.tmp" "$cache/$name"
}

build "$here/etcd" go.etcd.io/etcd/server/v3 etcd
build "$here/k8s" k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver
build "$here/k8s" k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager
build "$here/k8s" k8s.io/kubernetes/cmd/kubectl kubectl
echo "$cache"
