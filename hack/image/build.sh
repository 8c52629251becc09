#!/usr/bin/env bash
# `make image`: builds the Dockerfile with podman, tagged cbop:<version> (hack/version.py,
# also the image's OCI version label) and cbop:dev. Installs podman, buildah, runc and mmdebstrap from Debian when missing.
#
# BASE_IMAGE (environment): `local` (the default) builds on the Debian base that
# hack/image/base.sh makes without any registry; any other value is passed to the
# Dockerfile as is (e.g. docker.io/library/python:3.11.14-slim-trixie, its default,
# which needs a reachable registry). The host's CA bundle, when there is one, is given
# to the build as the `ca-bundle` secret for pip (never stored in the image).
# Prints the image's size on stderr; stdout stays empty. With --if-missing it builds
# nothing when cbop:dev exists (tests/builds.py: an early build for the tests that
# leaves a rebuild of a changed tree to the test that needs the image).
set -euo pipefail

if_missing=false
case "${1:-}" in
  "") ;;
  --if-missing) if_missing=true ;;
  *) echo "usage: $0 [--if-missing]" >&2; exit 2 ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
"$repo/hack/apt-tools.sh" podman=podman buildah=buildah runc=runc mmdebstrap=mmdebstrap
if $if_missing && podman image exists cbop:dev; then
  exit 0
fi

version="$(python3 "$repo/hack/version.py")"
base="${BASE_IMAGE:-local}"
if [[ "$base" == local ]]; then
  base="$("$here/base.sh")"
fi
args=(--network host --build-arg "BASE_IMAGE=$base" --build-arg "VERSION=$version"
      --tag "cbop:$version" --tag cbop:dev)
ca="${CBOP_BUILD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
if [[ -s "$ca" ]]; then
  args+=(--secret "id=ca-bundle,src=$ca")
fi
# Concurrent builds (parallel test workers, other checkouts) wait for each other, so
# cbop:dev and cbop:<version> always name the same image.
lock="${XDG_CACHE_HOME:-$HOME/.cache}/cbop/images"
mkdir -p "$lock"
exec 9>"$lock/.build.lock"
flock 9
start=$SECONDS
echo "image: podman build (base $base)" >&2
podman build --quiet "${args[@]}" --file "$repo/Dockerfile" "$repo" >/dev/null
size="$(podman image inspect cbop:dev --format '{{.Size}}')"
echo "image: built cbop:$version and cbop:dev in $((SECONDS - start))s, $((size / 1000000)) MB" >&2
