#!/usr/bin/env bash
# Builds helm from the Go module pinned in hack/helm into
# ${XDG_CACHE_HOME:-~/.cache}/cbop/bin/helm-<version>/ (reused when present) and prints
# the path of the binary. Progress and the build time go to stderr. How it builds:
# hack/go-build.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(grep -oE "^\s*helm.sh/helm/v3 v[0-9.]+" "$here/helm/go.mod" | awk '{print $2}')"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/cbop/bin/helm-${version}"
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock 9
if [[ ! -x "$cache/helm" ]]; then
  command -v go >/dev/null || { echo "build-helm: go not found on PATH" >&2; exit 1; }
  "$here/go-build.sh" build-helm "$here/helm" "$cache" \
    "-X helm.sh/helm/v3/internal/version.version=${version}" helm.sh/helm/v3/cmd/helm
fi
echo "$cache/helm"
