#!/usr/bin/env bash
# Builds the local control-plane binaries (kube-apiserver, kube-controller-manager,
# kubectl, etcd) from the pinned Go wrapper modules in hack/k8s and hack/etcd into a
# cache outside the repository, keyed by version, and prints the directory.
# Binaries already present (and, for the Kubernetes ones, reporting the pinned version)
# are not rebuilt; the Go toolchain is needed only when something must be built.
# Honours KUBEBUILDER_ASSETS: when it is set, nothing is built and that directory is
# printed instead. Concurrent runs wait for each other (flock on the cache directory).
# Progress and build times go to stderr; stdout is only the directory.
# With --check nothing is built: it exits 0 when every binary is present and current,
# else 1 naming the binaries a run would build.
# How it builds (hack/go-build.sh): the Kubernetes binaries in one `go build`, so their
# links run in parallel with the last compiles, and without symbol tables or DWARF.
set -euo pipefail

check_only=false
case "${1:-}" in
  "") ;;
  --check) check_only=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

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
  local bin="$cache/$1" out
  [[ -x "$bin" ]] || return 1
  # The version output is read whole before it is compared: piping it into `grep -q`
  # (which exits at the first match) can kill the binary with SIGPIPE, and under
  # pipefail that made a current binary look stale at random.
  case "$1" in
    etcd) return 0 ;; # etcd's version is compiled in, not stamped
    kubectl)
      out="$("$bin" version --client 2>/dev/null)" || return 1
      [[ "$out" == *"Client Version: ${k8s_version}"* ]]
      ;;
    *)
      out="$("$bin" --version 2>/dev/null)" || return 1
      [[ "$out" == *"Kubernetes ${k8s_version}"* ]]
      ;;
  esac
}

stale=()
for name in etcd kube-apiserver kube-controller-manager kubectl; do
  up_to_date "$name" || stale+=("$name")
done
if $check_only; then
  if ((${#stale[@]})); then
    echo "build-control-plane: missing or not ${k8s_version} in $cache: ${stale[*]}" >&2
    exit 1
  fi
  echo "$cache"
  exit 0
fi
if ((${#stale[@]})) && ! command -v go >/dev/null 2>&1; then
  echo "build-control-plane: the Go toolchain is required to build ${stale[*]} (go not found on PATH)" >&2
  exit 1
fi

k8s_stale=()
for name in "${stale[@]}"; do
  [[ "$name" == etcd ]] || k8s_stale+=("k8s.io/kubernetes/cmd/$name")
done
# etcd first: the Kubernetes build then finds the standard library compiled. Meanwhile
# the Kubernetes module's sources download (go list loads the packages, compiles nothing).
if [[ " ${stale[*]} " == *" etcd "* ]]; then
  if ((${#k8s_stale[@]})); then
    (cd "$here/k8s" && exec go list -deps "${k8s_stale[@]}" >/dev/null 2>&1) &
    trap 'kill $! 2>/dev/null || true' EXIT
  fi
  "$here/go-build.sh" build-control-plane "$here/etcd" "$cache" "" go.etcd.io/etcd/server/v3=etcd
  wait
  trap - EXIT
fi
if ((${#k8s_stale[@]})); then
  "$here/go-build.sh" build-control-plane "$here/k8s" "$cache" "$k8s_ldflags" "${k8s_stale[@]}"
fi
echo "$cache"
