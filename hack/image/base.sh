#!/usr/bin/env bash
# Makes the local base image for building cbop's image where no container registry is
# reachable: a minimal Debian bookworm root with its python3 (3.11) and venv support,
# made with mmdebstrap from Debian's package archive and imported into podman's image
# store. The Dockerfile's default base (the official python image) is not used then:
# hack/image/build.sh passes this one as the BASE_IMAGE build argument.
#
# The image is named localhost/cbop-base:<tag>, where the tag is a hash of this script,
# so a changed package list makes a new image; an existing one is reused. Prints the
# image name on stdout (progress on stderr).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
suite=bookworm
packages=python3,python3-venv
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
tag="$suite-$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"
image="localhost/cbop-base:$tag"

if podman image exists "$image"; then
  echo "$image"
  exit 0
fi
for tool in mmdebstrap podman; do
  command -v "$tool" >/dev/null || { echo "base.sh: $tool is missing (hack/image/tools.sh)" >&2; exit 1; }
done

cache="${XDG_CACHE_HOME:-$HOME/.cache}/cbop/images"
mkdir -p "$cache"
exec 9>"$cache/.base.lock"
flock 9
if podman image exists "$image"; then
  echo "$image"
  exit 0
fi
start=$SECONDS
tarball="$cache/cbop-base-$tag.tar"
if [[ ! -s "$tarball" ]]; then
  echo "base.sh: mmdebstrap $suite ($packages) from $mirror" >&2
  # minbase: essential packages and apt only; docs, man pages and locales dropped.
  mmdebstrap --quiet --variant=minbase --format=tar --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "$suite" "$tarball.tmp" "deb $mirror $suite main"
  mv "$tarball.tmp" "$tarball"
fi
podman import --quiet \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  "$tarball" "$image" >/dev/null
rm -f "$tarball"
echo "base.sh: made $image in $((SECONDS - start))s" >&2
echo "$image"
