#!/usr/bin/env bash
# `make deploy [IMG=name:tag]`: kubectl apply -k manifests/, with the image replaced by
# IMG when it is given (a kustomization in a temporary directory whose only change is
# the `images` entry, as `kustomize edit set image cbop=IMG` would make).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kubectl="${KUBECTL:-$("$repo/hack/build-control-plane.sh")/kubectl}"
img="${IMG:-}"
if [[ -z "$img" ]]; then
  exec "$kubectl" apply -k "$repo/manifests"
fi
name="${img%:*}"
tag="${img##*:}"
[[ "$name" != "$img" ]] || tag=latest
overlay="$(mktemp -d)"
trap 'rm -rf "$overlay"' EXIT
rel="$(realpath --relative-to="$overlay" "$repo/manifests")"
cat >"$overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $rel
images:
  - name: cbop
    newName: $name
    newTag: "$tag"
YAML
"$kubectl" apply -k "$overlay"
