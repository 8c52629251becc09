#!/usr/bin/env bash
# Builds the local node's pod sandbox image, localhost/cbop-pause:<catatonit version>,
# from Debian's static catatonit (installed when missing); reused when present.
# Prints the image name.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
"$here/../apt-tools.sh" podman=podman catatonit=catatonit
version="$(dpkg-query -W -f='${Version}' catatonit | tr -c 'A-Za-z0-9_.\n-' '_')"
image="localhost/cbop-pause:$version"
if ! podman image exists "$image"; then
  context="$(mktemp -d)"
  trap 'rm -rf "$context"' EXIT
  cp "$here/pause/Containerfile" "$(command -v catatonit)" "$context/"
  podman build --quiet --network none --tag "$image" "$context" >/dev/null
fi
echo "$image"
