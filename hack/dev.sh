#!/usr/bin/env bash
# `make dev`: start a local control plane, install the CRD and the samples, then run cbop
# in the foreground. Arguments are passed to cbop.
#
# Environment (the Makefile sets them; defaults in brackets):
#   DEV_CLUSTER_DIR  state directory of the control plane [.dev-cluster in the checkout]
#   METRICS_ADDR     cbop's --metrics-bind-address [127.0.0.1:8080]
#   PROBE_ADDR       cbop's --health-probe-bind-address [127.0.0.1:8081]
#   REUSE_CLUSTER    1: use the control plane already running in DEV_CLUSTER_DIR
#
# It stops only what it started: on exit (Ctrl-C, or cbop failing) it stops the control
# plane it started, never one it reused. Without REUSE_CLUSTER=1 a control plane already
# running in DEV_CLUSTER_DIR is an error. The exit status is cbop's (0 after Ctrl-C).
#
# WITH_NODE=1 (make dev WITH_NODE=1): cbop runs as the shipped Deployment instead, two
# real pods of the image cbop:dev (make image) on a local kubelet node; the script
# follows their logs.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
state="${DEV_CLUSTER_DIR:-$PWD/.dev-cluster}"
metrics="${METRICS_ADDR:-127.0.0.1:8080}"
probes="${PROBE_ADDR:-127.0.0.1:8081}"
envtest=("$py" -m cbop_testing.envtest --state-dir "$state")

# The ports first: a taken one fails here, before a control plane is started for nothing.
"$py" - "$metrics" "$probes" <<'EOF'
import socket, sys
from cbop.health import parse_bind_address

for flag, variable, address in (
    ("--metrics-bind-address", "METRICS_ADDR", sys.argv[1]),
    ("--health-probe-bind-address", "PROBE_ADDR", sys.argv[2]),
):
    try:
        bind = parse_bind_address(address)
        if bind is None:
            continue
        family = socket.AF_INET6 if ":" in bind[0] else socket.AF_INET
        with socket.socket(family) as probe:  # as cbop binds: SO_REUSEADDR, no listen
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(bind)
    except (ValueError, OSError) as err:
        sys.exit(
            f"make dev: {flag} {address}: {getattr(err, 'strerror', None) or err}; "
            f"choose another address, e.g. make dev {variable}=127.0.0.1:{9080 if variable == 'METRICS_ADDR' else 9081}"
        )
EOF

bin_dir="$(hack/build-control-plane.sh)"
kubectl="${KUBECTL:-$bin_dir/kubectl}"

if [[ "${REUSE_CLUSTER:-}" == 1 ]] && "${envtest[@]}" status >/dev/null; then
  echo "make dev: reusing the control plane running in $state; it keeps running afterwards"
else
  code=0
  "${envtest[@]}" start --detach --fail-if-running ${WITH_NODE:+--with-node} >/dev/null || code=$?
  if ((code == 4)); then
    echo "make dev: a control plane already runs in $state (make dev-cluster?)." >&2
    echo "  make dev stops only what it starts: reuse it with 'make dev REUSE_CLUSTER=1'," >&2
    echo "  or stop it first with 'make dev-cluster-down'." >&2
    exit 1
  elif ((code != 0)); then
    exit "$code"
  fi
  trap '"${envtest[@]}" stop >/dev/null 2>&1 || true' EXIT
fi
export KUBECONFIG="$state/kubeconfig"

"$kubectl" apply -f manifests/crd/
hack/wait-crds.sh "$kubectl"
"$kubectl" apply -f manifests/samples/
if [[ -n "${WITH_NODE:-}" ]]; then
  KUBECTL="$kubectl" IMG=cbop:dev hack/deploy.sh
  "$kubectl" -n cbop-system rollout status deployment/cbop --timeout=180s
  "$kubectl" -n cbop-system get pods,lease -o wide
  "$kubectl" get configbundles -A
  echo
  echo "cbop runs as two pods on node $("$kubectl" get nodes -o name); in another shell:"
  echo "  export KUBECONFIG=$KUBECONFIG"
  echo "  $kubectl -n cbop-system get pods,lease"
  echo "  $kubectl -n cbop-system logs deployment/cbop    # kubectl exec works too"
  echo "Their logs follow (from the node's container log files)."
  echo "Ctrl-C stops the node and the control plane."
  tail -F "$state/node/pod-logs"/cbop-system_*/manager/*.log || true
  exit 0
fi
echo
echo "cbop is starting: metrics on http://$metrics/metrics, probes on http://$probes/healthz"
echo "In another shell:"
echo "  export KUBECONFIG=$KUBECONFIG"
echo "  $kubectl get configbundles -A"
if [[ -n "$(trap -p EXIT)" ]]; then
  echo "Ctrl-C stops cbop and the control plane."
else
  echo "Ctrl-C stops cbop; the control plane keeps running."
fi
echo
# Not exec: the EXIT trap must run after cbop stops. A failing cbop fails the script.
.venv/bin/cbop --log-format console --metrics-bind-address "$metrics" \
  --health-probe-bind-address "$probes" "$@"
