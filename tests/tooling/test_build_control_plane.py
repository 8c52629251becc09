"""hack/build-control-plane.sh: the up-to-date check against stand-in binaries.

The stand-ins are shell scripts in a temporary ``XDG_CACHE_HOME`` that print what the
real binaries print for their version. The real kubectl writes more after the version
line; a stand-in that writes a lot after it makes any early-closing reader (``grep -q``)
kill it with SIGPIPE every time, which is how the check used to fail at random; so a few
runs suffice here (tests/tooling/test_dev_targets.py runs the check 100 times on the real
binaries).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "build-control-plane.sh"
RUNS = 10


def _pinned(go_mod: str, module: str) -> str:
    text = (REPO / "hack" / go_mod).read_text(encoding="utf-8")
    match = re.search(rf"^\s*{re.escape(module)} (v[0-9.]+)", text, re.MULTILINE)
    assert match, f"{module} is not pinned in hack/{go_mod}"
    return match.group(1)


K8S = _pinned("k8s/go.mod", "k8s.io/kubernetes")
ETCD = _pinned("etcd/go.mod", "go.etcd.io/etcd/server/v3")
# Far more than a pipe buffer (64 KiB), written after the version line.
TRAILER = "head -c 262144 /dev/zero | tr '\\0' x"


def _stand_in(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A filled binary cache of stand-ins reporting the pinned versions."""
    bin_dir = tmp_path / "cbop" / "bin" / f"k8s-{K8S}-etcd-{ETCD}"
    bin_dir.mkdir(parents=True)
    _stand_in(bin_dir / "etcd", "echo etcd")
    for name in ("kube-apiserver", "kube-controller-manager"):
        _stand_in(bin_dir / name, f"echo 'Kubernetes {K8S}'; {TRAILER}")
    _stand_in(
        bin_dir / "kubectl",
        f"echo 'Client Version: {K8S}'; echo 'Kustomize Version: v5.7.1'; {TRAILER}",
    )
    return bin_dir


def _run(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBEBUILDER_ASSETS"}
    env["XDG_CACHE_HOME"] = str(cache.parents[2])
    # No Go toolchain: a run that decides to build fails instead of compiling.
    env["PATH"] = "/usr/bin:/bin"
    return subprocess.run(
        [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_current_binaries_are_never_rebuilt(cache: Path) -> None:
    for _ in range(RUNS):
        result = _run(cache)
        assert (result.returncode, result.stdout.strip()) == (0, str(cache)), result.stderr
        assert "building" not in result.stderr


def test_check_passes_on_current_binaries(cache: Path) -> None:
    codes = [_run(cache, "--check").returncode for _ in range(RUNS)]
    assert codes == [0] * RUNS


@pytest.mark.parametrize(
    ("name", "body"),
    [
        pytest.param("kubectl", "echo 'Client Version: v1.0.0'", id="kubectl-other-version"),
        pytest.param("kube-apiserver", "echo 'Kubernetes v0.0.0-master'", id="unstamped"),
        pytest.param("kube-controller-manager", "exit 1", id="fails"),
        pytest.param("etcd", None, id="missing"),
    ],
)
def test_check_names_stale_binaries(cache: Path, name: str, body: str | None) -> None:
    if body is None:
        (cache / name).unlink()
    else:
        _stand_in(cache / name, body)
    result = _run(cache, "--check")
    assert result.returncode == 1
    assert result.stderr.rstrip().endswith(f"in {cache}: {name}"), result.stderr
    assert result.stdout == ""


def test_build_without_go_says_so(cache: Path) -> None:
    (cache / "kubectl").unlink()
    result = _run(cache)
    assert result.returncode == 1
    assert "the Go toolchain is required to build kubectl" in result.stderr
