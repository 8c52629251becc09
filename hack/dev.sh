#!/usr/bin/env bash
# `make dev`: start the local control plane, install the CRD and the samples, then run
# cbop in the foreground. Ctrl-C (or any exit) stops cbop and the control plane.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
bin_dir="$(hack/build-control-plane.sh)"
kubectl="${KUBECTL:-$bin_dir/kubectl}"

$py -m cbop.envtest start --detach
state="${XDG_CACHE_HOME:-$HOME/.cache}/cbop/dev-cluster"
export KUBECONFIG="$state/kubeconfig"
trap '$py -m cbop.envtest stop >/dev/null 2>&1 || true' EXIT

"$kubectl" apply -f manifests/crd/
"$kubectl" wait --for condition=established --timeout=60s crd/configbundles.cbop.dev
"$kubectl" apply -k manifests/samples/
echo
echo "cbop is starting; in another shell:"
echo "  export KUBECONFIG=$KUBECONFIG"
echo "  $kubectl get configbundles -A"
echo "Ctrl-C stops cbop and the control plane."
echo
# Not exec: the EXIT trap must run after cbop stops.
.venv/bin/cbop --log-format console --metrics-bind-address 127.0.0.1:8080 \
  --health-probe-bind-address 127.0.0.1:8081 "$@" || true
