#!/usr/bin/env bash
# `make release`: the files of a cbop release, for installing it without this repository
# (README, "Installing a release"). Writes into DIST (default dist/, gitignored):
#
#   cbop-<version>-py3-none-any.whl   the wheel (python -m build)
#   cbop-<version>.tar.gz             the sdist: src/cbop, README, CHANGELOG, pyproject
#   cbop-<version>.oci.tar            the image as an OCI archive, named
#                                     docker.io/library/cbop:<version> (the name
#                                     install.yaml's `cbop:<version>` means to a node)
#   cbop-<version>.tgz                the Helm chart (after helm lint --strict)
#   install.yaml                      CRDs, namespace, RBAC, Deployment, Service:
#                                     kubectl kustomize manifests/
#   SHA256SUMS                        sha256sum of the files above
#
# It stops first when a copy of the version differs from src/cbop/__init__.py
# (hack/version.py check). Previous outputs in DIST are replaced; nothing else there is
# touched. Environment: DIST, PYTHON (a python with `build`; default .venv/bin/python),
# BASE_IMAGE (as for make image), KUBECTL and HELM (default: the pinned builds of
# hack/build-control-plane.sh and hack/build-helm.sh). Progress goes to stderr; stdout
# is the list of files written.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/image/containers.conf}"

if ! python3 "$repo/hack/version.py" check >&2; then
  echo "release: the copies above differ from src/cbop/__init__.py; fix them first" >&2
  exit 1
fi
version="$(python3 "$repo/hack/version.py")"
dist="${DIST:-$repo/dist}"
python="${PYTHON:-$repo/.venv/bin/python}"
kubectl="${KUBECTL:-$("$here/build-control-plane.sh")/kubectl}"
helm="${HELM:-$("$here/build-helm.sh")}"

mkdir -p "$dist"
dist="$(cd "$dist" && pwd)"
wheel="cbop-$version-py3-none-any.whl"
sdist="cbop-$version.tar.gz"
image="cbop-$version.oci.tar"
chart="cbop-$version.tgz"
files=("$wheel" "$sdist" "$image" "$chart" install.yaml)
for f in "${files[@]}" SHA256SUMS; do
  rm -f "$dist/$f"
done
start=$SECONDS

echo "release: cbop $version into $dist" >&2
echo "release: sdist, and the wheel from it (python -m build)" >&2
# From a copy of what the sdist holds (pyproject.toml's only-include): hatch would add
# the tree's .gitignore, and the copy leaves out anything else lying in src/cbop.
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/src"
cp -r "$repo/src/cbop" "$stage/src/cbop"
find "$stage/src" -name __pycache__ -prune -exec rm -rf {} +
cp "$repo/README.md" "$repo/CHANGELOG.md" "$repo/pyproject.toml" "$stage/"
"$python" -m build --outdir "$dist" "$stage" >/dev/null 2>"$stage/build.log" || {
  cat "$stage/build.log" >&2
  exit 1
}

echo "release: chart (helm lint --strict, helm package)" >&2
"$helm" lint --strict "$repo/charts/cbop" >/dev/null
"$helm" package "$repo/charts/cbop" --destination "$dist" >/dev/null

echo "release: install.yaml (kubectl kustomize manifests/)" >&2
{
  echo "# cbop $version: the ConfigBundle CRD, namespace cbop-system, RBAC, the Deployment"
  echo "# and the metrics Service. Install or upgrade with:"
  echo "#   kubectl apply --server-side -f install.yaml"
  "$kubectl" kustomize "$repo/manifests"
} >"$dist/install.yaml"

echo "release: image (make image), saved as an OCI archive" >&2
BASE_IMAGE="${BASE_IMAGE:-local}" "$repo/hack/image/build.sh"
# containerd names an imported image by the archive's ref.name: the fully qualified
# name a node's kubelet asks for when a Pod says cbop:<version>. A name of its own, so
# cbop:dev and cbop:<version> stay as make image left them.
name="docker.io/library/cbop:$version"
podman tag "cbop:$version" "$name"
podman save --quiet --format oci-archive --output "$dist/$image" "$name"
podman untag "$name" "$name"

(cd "$dist" && sha256sum "${files[@]}" >SHA256SUMS)
echo "release: done in $((SECONDS - start))s" >&2
for f in "${files[@]}" SHA256SUMS; do
  echo "$dist/$f"
done
