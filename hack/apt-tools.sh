#!/usr/bin/env bash
# Installs Debian packages for the commands that are missing: each argument is
# COMMAND=PACKAGE (e.g. podman=podman). Nothing is done when every command is there.
# Needs root and apt-get (cbop's CI machines and fresh developer machines are Debian).
# Concurrent runs (parallel test workers) wait for each other: apt-get would fail on
# dpkg's lock.
set -euo pipefail
missing_commands() {
  missing=()
  for pair in "$@"; do
    command -v "${pair%%=*}" >/dev/null 2>&1 || missing+=("${pair#*=}")
  done
}
missing_commands "$@"
((${#missing[@]} == 0)) && exit 0
cache="${XDG_CACHE_HOME:-$HOME/.cache}/cbop"
if mkdir -p "$cache" 2>/dev/null && command -v flock >/dev/null 2>&1; then
  exec 8>"$cache/.apt.lock"
  flock 8
  missing_commands "$@"
  ((${#missing[@]} == 0)) && exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "apt-tools: missing Debian packages: ${missing[*]} (install them as root)" >&2
  exit 1
fi
echo "apt-tools: installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
