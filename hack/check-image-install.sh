#!/usr/bin/env bash
# Checks the container image's install steps without a container engine.
#
# Does, in fresh temporary virtualenvs, what the Dockerfile's stages do:
#   builder: copy pyproject.toml, README.md and src/ into an empty directory, then
#            pip wheel --no-deps --wheel-dir /wheels .
#   final:   pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# then runs the installed `cbop --version` and `cbop --help` from outside the checkout
# and fails if any step fails. What it cannot check: the base image itself, the USER
# and file permissions inside the image.
#
# The Dockerfile lines mirrored here are checked to be still present, so a change to
# the Dockerfile that this script does not follow fails loudly.
#
# Usage: hack/check-image-install.sh   (PYTHON=python3.11 to choose the interpreter)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dockerfile="$repo/Dockerfile"
if [[ -n "${PYTHON:-}" ]]; then
  python="$PYTHON"
elif command -v python3.11 >/dev/null 2>&1; then
  python=python3.11
else
  python=python3
fi

say() { echo "check-image-install: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

# 1. The Dockerfile still does what this script reproduces.
# shellcheck disable=SC1003 # the backslash ends that Dockerfile line: it is meant literally
for line in \
  'COPY pyproject.toml README.md ./' \
  'COPY src ./src' \
  'RUN pip wheel --no-deps --wheel-dir /wheels .' \
  'RUN pip install --no-cache-dir /wheels/*.whl \' \
  '    && rm -rf /wheels' \
  'USER 65532:65532' \
  'ENTRYPOINT ["cbop"]'; do
  grep -qxF -- "$line" "$dockerfile" \
    || fail "the Dockerfile no longer has the line '$line': update this script to match it"
done

want_version="$(sed -nE 's/^version = "([^"]+)"$/\1/p' "$repo/pyproject.toml" | head -n1)"
[[ -n "$want_version" ]] || fail "no version in pyproject.toml"
py_version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [[ "$py_version" != "3.11" ]]; then
  say "note: the image runs Python 3.11; this check uses $python ($py_version)"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/cbop-image-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
unset PYTHONPATH VIRTUAL_ENV

# 2. Builder stage: the build context holds only what the Dockerfile copies.
say "builder: pip wheel --no-deps ($python $py_version)"
mkdir -p "$work/src" "$work/wheels"
cp "$repo/pyproject.toml" "$repo/README.md" "$work/src/"
cp -R "$repo/src" "$work/src/src"
find "$work/src" -name __pycache__ -type d -prune -exec rm -rf {} +
"$python" -m venv "$work/builder"
(cd "$work/src" && PIP_NO_CACHE_DIR=1 "$work/builder/bin/pip" wheel --quiet --no-deps \
  --wheel-dir "$work/wheels" .) || fail "pip wheel"
shopt -s nullglob
wheels=("$work/wheels"/*.whl)
shopt -u nullglob
[[ ${#wheels[@]} -eq 1 ]] || fail "expected one wheel, got: ${wheels[*]:-none}"
say "built $(basename "${wheels[0]}")"

# 3. Final stage: a clean interpreter with only the wheel and its dependencies.
say "final: pip install --no-cache-dir the wheel"
"$python" -m venv "$work/final"
"$work/final/bin/pip" install --quiet --no-cache-dir "$work/wheels"/*.whl || fail "pip install"
rm -rf "$work/wheels"

# 4. The entry point works, from outside the checkout (nothing there can be imported).
cd /
location="$("$work/final/bin/python" -c 'import cbop; print(cbop.__file__)')"
[[ "$location" == "$work/final/"* ]] || fail "cbop imported from $location, not the install"
version_out="$("$work/final/bin/cbop" --version)" || fail "cbop --version exited non-zero"
[[ "$version_out" == "cbop $want_version" ]] \
  || fail "cbop --version printed '$version_out', expected 'cbop $want_version'"
help_out="$("$work/final/bin/cbop" --help)" || fail "cbop --help exited non-zero"
grep -q -- "--leader-elect" <<<"$help_out" || fail "cbop --help does not list --leader-elect"
say "ok: $version_out installs from its wheel and runs"
