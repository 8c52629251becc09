#!/usr/bin/env bash
# Builds the local control-plane binaries (kube-apiserver, kube-controller-manager,
# kubectl, etcd) from the pinned Go wrapper modules in hack/k8s and hack/etcd into a
# cache outside the repository, keyed by version, and prints the directory.
# Binaries already present (and, for the Kubernetes ones, reporting the pinned version)
# are not rebuilt; the Go toolchain is needed only when something must be built.
# Honours KUBEBUILDER_ASSETS: when it is set, nothing is built and that directory is
# printed instead. Concurrent runs wait for each other (flock on the cache directory).
# Progress and per-binary build times go to stderr; stdout is only the directory.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
k8s_version="$(grep -oE "^\s*k8s.io/kubernetes v[0-9.]+" "$here/k8s/go.mod" | awk '{print $2}')"
etcd_version="$(grep -oE "^\s*go.etcd.io/etcd/server/v3 v[0-9.]+" "$here/etcd/go.mod" | awk '{print $2}')"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/cbop/bin/k8s-${k8s_version}-etcd-${etcd_version}"

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

mkdir -p "$cache"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$cache/.build.lock"
  if ! flock -n 9; then
    echo "build-control-plane: another build into $cache is running; waiting for it" >&2
    flock 9
  fi
fi

# Stamp the Kubernetes binaries with their release version, as Kubernetes' own build
# does (hack/lib/version.sh); otherwise /version and --version say v0.0.0-master.
k8s_minor="${k8s_version#v*.}"
k8s_minor="${k8s_minor%%.*}"
k8s_major="${k8s_version#v}"
k8s_major="${k8s_major%%.*}"
k8s_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X ${pkg}.gitVersion=${k8s_version}"
  k8s_ldflags+=" -X ${pkg}.gitMajor=${k8s_major} -X ${pkg}.gitMinor=${k8s_minor}"
  k8s_ldflags+=" -X ${pkg}.gitTreeState=clean"
done

up_to_date() { # up_to_date <binary name>
  local bin="$cache/$1"
  [[ -x "$bin" ]] || return 1
  # The output is read whole before grep: `binary | grep -q` under pipefail fails when
  # grep exits at the first match and the binary then dies of SIGPIPE.
  local out
  case "$1" in
    etcd) return 0 ;; # etcd's version is compiled in, not stamped
    kubectl) out="$("$bin" version --client 2>/dev/null)" && grep -qF "Client Version: ${k8s_version}" <<<"$out" ;;
    *) out="$("$bin" --version 2>/dev/null)" && grep -qF "Kubernetes ${k8s_version}" <<<"$out" ;;
  esac
}

build() { # build <module dir> <package> <binary name> [ldflags]
  local dir="$1" pkg="$2" name="$3" ldflags="${4:-}"
  if up_to_date "$name"; then
    return 0
  fi
  if ! command -v go >/dev/null 2>&1; then
    echo "build-control-plane: the Go toolchain is required to build $name (go not found on PATH)" >&2
    exit 1
  fi
  echo "build-control-plane: building $name ($pkg) into $cache" >&2
  local start=$SECONDS
  (cd "$dir" && go build -trimpath -ldflags="$ldflags" -o "$cache/$name.tmp" "$pkg")
  mv "$cache/$name.tmp" "$cache/$name"
  echo "build-control-plane: built $name in $((SECONDS - start))s" >&2
}

build "$here/etcd" go.etcd.io/etcd/server/v3 etcd
build "$here/k8s" k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$k8s_ldflags"
build "$here/k8s" k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager "$k8s_ldflags"
build "$here/k8s" k8s.io/kubernetes/cmd/kubectl kubectl "$k8s_ldflags"
echo "$cache"
