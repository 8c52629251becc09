#!/usr/bin/env bash
# `make dev`: start the local control plane, install the CRD and the samples, then run
# cbop in the foreground. Ctrl-C (or any exit) stops cbop and the control plane.
# WITH_NODE=1 (make dev WITH_NODE=1): cbop runs as the shipped Deployment instead, two
# real pods of the image cbop:dev (make image) on a local kubelet node; the script
# follows their logs.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
bin_dir="$(hack/build-control-plane.sh)"
kubectl="${KUBECTL:-$bin_dir/kubectl}"

$py -m cbop.envtest start --detach ${WITH_NODE:+--with-node}
state="${XDG_CACHE_HOME:-$HOME/.cache}/cbop/dev-cluster"
export KUBECONFIG="$state/kubeconfig"
trap '$py -m cbop.envtest stop >/dev/null 2>&1 || true' EXIT

"$kubectl" apply -f manifests/crd/
"$kubectl" wait --for condition=established --timeout=60s crd/configbundles.cbop.dev
"$kubectl" apply -k manifests/samples/
if [[ -n "${WITH_NODE:-}" ]]; then
  KUBECTL="$kubectl" IMG=cbop:dev hack/deploy.sh
  "$kubectl" -n cbop-system rollout status deployment/cbop --timeout=180s
  "$kubectl" -n cbop-system get pods,lease -o wide
  "$kubectl" get configbundles -A
  echo
  echo "cbop runs as two pods on node $("$kubectl" get nodes -o name); in another shell:"
  echo "  export KUBECONFIG=$KUBECONFIG"
  echo "  $kubectl -n cbop-system get pods,lease"
  echo "Their logs follow (the API server cannot reach the kubelet, so not kubectl logs)."
  echo "Ctrl-C stops the node and the control plane."
  tail -F "$state/node/pod-logs"/cbop-system_*/manager/*.log || true
  exit 0
fi
echo
echo "cbop is starting; in another shell:"
echo "  export KUBECONFIG=$KUBECONFIG"
echo "  $kubectl get configbundles -A"
echo "Ctrl-C stops cbop and the control plane."
echo
# Not exec: the EXIT trap must run after cbop stops.
.venv/bin/cbop --log-format console --metrics-bind-address 127.0.0.1:8080 \
  --health-probe-bind-address 127.0.0.1:8081 "$@" || true
