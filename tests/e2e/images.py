"""The container images the e2e tests build: cbop's (``make image``) and the node's pause.

Both are built once per test session with podman (hack/image/*.sh, which install podman
from Debian when it is missing and make the Debian base without a registry).
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from cbop import __version__

REPO = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = REPO / "hack" / "image" / "containers.conf"
#: Seconds for a cold image build: base image (about 100 s), podman's install from
#: Debian, and pip installing the dependencies from the package index.
BUILD_TIMEOUT = 900.0

_BUILD_LOG: list[str] = []


def podman_env() -> dict[str, str]:
    """Return the environment for podman commands: ours plus ``CONTAINERS_CONF``."""
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def cbop_version() -> str:
    """Return ``cbop.__version__`` (the image's ``cbop:<version>`` tag, hack/version.py)."""
    return __version__


def _run(*command: str, timeout: float) -> str:
    result = subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=podman_env(),
        check=False,
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


@functools.cache
def cbop_image() -> str:
    """Build (or reuse podman's layer cache for) ``cbop:dev`` and return its name.

    The build's own report (its duration and size) is returned by :func:`build_report`.
    """
    _BUILD_LOG.append(_run(str(REPO / "hack" / "image" / "build.sh"), timeout=BUILD_TIMEOUT))
    return "localhost/cbop:dev"


def build_report() -> str:
    """Return what ``hack/image/build.sh`` printed (empty before :func:`cbop_image`)."""
    return "".join(_BUILD_LOG)


@functools.cache
def pause_image() -> str:
    """Build (or reuse) the node's sandbox image and return its name.

    The name is the script's last line on stdout: what installing its tools prints on
    a first run (stderr, or apt's own lines) is no part of it.
    """
    result = subprocess.run(
        [str(REPO / "hack" / "image" / "pause.sh")],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        env=podman_env(),
        check=False,
    )
    assert result.returncode == 0, f"pause.sh failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout.strip().splitlines()[-1]
