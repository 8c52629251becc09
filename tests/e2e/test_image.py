"""``make image`` for real: the Dockerfile built with podman, then the image inspected and run.

The image is built on the local Debian base (no registry here); tests/e2e/test_pods.py
runs it on a real node.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.e2e.images import BUILD_TIMEOUT, cbop_image, cbop_version, podman_env

pytestmark = pytest.mark.node

RUN_TIMEOUT = 120.0


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        env=podman_env(),
        check=False,
    )


@pytest.fixture(scope="module")
def image() -> str:
    return cbop_image()


@pytest.mark.timeout(BUILD_TIMEOUT + 120)
def test_make_image_tags_the_version_and_dev(image: str) -> None:
    ids = set()
    for tag in (f"cbop:{cbop_version()}", "cbop:dev"):
        result = _podman("image", "inspect", "--format", "{{.Id}}", tag)
        assert result.returncode == 0, result.stderr
        ids.add(result.stdout.strip())
    assert len(ids) == 1, ids


@pytest.mark.timeout(BUILD_TIMEOUT + 120)
def test_the_image_runs_cbop_as_non_root_with_a_read_only_root(image: str) -> None:
    config = json.loads(_podman("image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["cbop"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == cbop_version()
    assert labels["org.opencontainers.image.title"] == "cbop"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.description"]
    # As the Deployment runs it: read-only root, no capabilities, no privilege escalation.
    locked = ["--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    version = _podman("run", "--rm", *locked, image, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"cbop {cbop_version()}"
    whoami = _podman("run", "--rm", *locked, "--entrypoint", "id", image, "-u")
    assert whoami.stdout.strip() == "65532"
    # The commands a user without a checkout runs from the image.
    for command in ("release", "migrate-storage"):
        helped = _podman("run", "--rm", *locked, image, command, "--help")
        assert helped.returncode == 0, helped.stderr
        assert helped.stdout.startswith(f"usage: cbop {command}"), helped.stdout


@pytest.mark.timeout(BUILD_TIMEOUT + 120)
def test_the_image_has_no_pip_setuptools_or_compiler(image: str) -> None:
    probe = (
        "import importlib.util, shutil; "
        "print([m for m in ('pip', 'setuptools', 'wheel') if importlib.util.find_spec(m)]); "
        "print([c for c in ('pip', 'pip3', 'gcc', 'cc', 'make') if shutil.which(c)])"
    )
    result = _podman("run", "--rm", "--entrypoint", "python3", image, "-c", probe)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "[]"], result.stdout
