"""helm, built from the Go module pinned in hack/helm (hack/build-helm.sh)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "cbop"
#: Seconds for a cold helm build on two busy cores.
BUILD_TIMEOUT = 900.0


@functools.cache
def helm_binary() -> str:
    """Build (once) and return the path of the pinned helm."""
    result = subprocess.run(
        ["bash", str(REPO / "hack" / "build-helm.sh")],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()
