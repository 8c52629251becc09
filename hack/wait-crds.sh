#!/usr/bin/env bash
# Wait until the API server serves every CRD of manifests/crd/ (condition Established).
#
#   wait-crds.sh [kubectl]      # default: kubectl on PATH; 60 s at most
#
# `kubectl wait --for condition=established` exits at once with "status.conditions
# accessor error" while a CRD just created has no conditions yet, so it is asked again
# each second until every CRD is Established or 60 s have passed (exit 1, with
# kubectl's last error).
set -euo pipefail

kubectl="${1:-kubectl}"
cd "$(dirname "$0")/.."
deadline=$((SECONDS + 60))
until out="$("$kubectl" wait --for condition=established --timeout=60s -f manifests/crd/ 2>&1)"; do
  if ((SECONDS >= deadline)); then
    echo "$out" >&2
    echo "wait-crds.sh: the CRDs of manifests/crd/ are not Established after 60 s" >&2
    exit 1
  fi
  sleep 1
done
echo "$out"
