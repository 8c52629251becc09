#!/usr/bin/env bash
# Installs Debian packages for the commands that are missing: each argument is
# COMMAND=PACKAGE (e.g. podman=podman). Nothing is done when every command is there.
# Needs root and apt-get (cbop's CI machines and fresh developer machines are Debian).
set -euo pipefail
missing=()
for pair in "$@"; do
  command -v "${pair%%=*}" >/dev/null 2>&1 || missing+=("${pair#*=}")
done
((${#missing[@]} == 0)) && exit 0
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "apt-tools: missing Debian packages: ${missing[*]} (install them as root)" >&2
  exit 1
fi
echo "apt-tools: installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
