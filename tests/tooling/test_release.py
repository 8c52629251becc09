"""``make release`` for real: the files it writes, each used as a user without this
repository would use it (README, "Installing a release").

``make release DIST=<tmp>`` runs once for the module (its image build reuses podman's
layer cache when ``make image`` ran before). Then: the sums check; the wheel installs
into a fresh virtualenv and runs; the sdist holds cbop's sources and nothing of the
tests or tooling; the chart lints and carries the version; the OCI archive loads into an
empty podman store under the name a node's kubelet asks for and runs; ``install.yaml``
installs on a fresh control plane with ``kubectl apply --server-side``, and applying it
again changes nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from cbop import __version__
from cbop_testing.envtest import ControlPlane, find_binaries
from cbop_testing.envtest.binaries import find_node_binaries
from tests.e2e.harness import REPO, wait_for
from tests.e2e.helm import helm_binary
from tests.e2e.images import BUILD_TIMEOUT, podman_env

pytestmark = pytest.mark.node

VERSION = __version__
#: The image name in the archive: what containerd calls an imported ``cbop:<version>``.
IMAGE = f"docker.io/library/cbop:{VERSION}"
FILES = (
    f"cbop-{VERSION}-py3-none-any.whl",
    f"cbop-{VERSION}.tar.gz",
    f"cbop-{VERSION}.oci.tar",
    f"cbop-{VERSION}.tgz",
    "install.yaml",
)
#: Seconds for make release: an image build (cold: BUILD_TIMEOUT) and python -m build.
RELEASE_TIMEOUT = BUILD_TIMEOUT + 300
#: Seconds for pip to install the wheel and its dependencies into a fresh virtualenv.
PIP_TIMEOUT = 300.0
#: Seconds for a cold build of the node binaries (containerd, ctr: hack/build-node.sh).
NODE_BUILD_TIMEOUT = 900.0
TIMEOUT = 120.0


@dataclass(frozen=True)
class Release:
    """What ``make release`` wrote: its DIST directory and the paths it printed."""

    dist: Path
    printed: list[Path]

    def path(self, name: str) -> Path:
        return self.dist / name


def _run(
    *command: str | Path,
    timeout: float = TIMEOUT,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    result = subprocess.run(
        [str(c) for c in command],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
        check=False,
    )
    assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    dist = tmp_path_factory.mktemp("dist")
    out = _run("make", "--no-print-directory", "release", f"DIST={dist}",
               cwd=REPO, timeout=RELEASE_TIMEOUT)  # fmt: skip
    return Release(dist, [Path(line) for line in out.splitlines() if line.startswith("/")])


@pytest.mark.timeout(RELEASE_TIMEOUT + 60)
def test_release_writes_the_files_and_their_sums(release: Release) -> None:
    assert release.printed == [release.path(name) for name in (*FILES, "SHA256SUMS")]
    assert sorted(p.name for p in release.dist.iterdir()) == sorted((*FILES, "SHA256SUMS"))
    sums = release.path("SHA256SUMS").read_text().splitlines()
    assert [line.split("  ", 1)[1] for line in sums] == list(FILES)
    checked = _run("sha256sum", "--check", "SHA256SUMS", cwd=release.dist)
    assert checked.splitlines() == [f"{name}: OK" for name in FILES]
    # A changed file fails the check.
    tampered = release.dist.parent / "tampered"
    tampered.mkdir(exist_ok=True)
    for name in (*FILES, "SHA256SUMS"):
        (tampered / name).symlink_to(release.path(name))
    (tampered / "install.yaml").unlink()
    (tampered / "install.yaml").write_text(release.path("install.yaml").read_text() + "#\n")
    failed = subprocess.run(["sha256sum", "--check", "SHA256SUMS"], cwd=tampered,
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert failed.returncode == 1
    assert "install.yaml: FAILED" in failed.stdout


@pytest.mark.timeout(RELEASE_TIMEOUT + PIP_TIMEOUT)
def test_the_wheel_installs_into_a_fresh_virtualenv_and_runs(
    release: Release, tmp_path: Path
) -> None:
    wheel = release.path(FILES[0])
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"cbop-{VERSION}.dist-info/METADATA").decode()
    assert "cbop/__init__.py" in names
    assert not [n for n in names if n.startswith(("cbop_testing", "tests/"))], names
    assert f"\nVersion: {VERSION}\n" in metadata

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    pip_env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    _run(venv / "bin" / "pip", "install", "--quiet", wheel, timeout=PIP_TIMEOUT, env=pip_env)
    assert _run(venv / "bin" / "cbop", "--version").strip() == f"cbop {VERSION}"
    installed = _run(venv / "bin" / "python", "-c",
                     "import importlib.metadata as m; print(m.version('cbop'))")  # fmt: skip
    assert installed.strip() == VERSION
    # The test support is a separate project: a user's install never has it.
    missing = subprocess.run([venv / "bin" / "python", "-c", "import cbop_testing"],
                             capture_output=True, check=False)  # fmt: skip
    assert missing.returncode == 1


@pytest.mark.timeout(RELEASE_TIMEOUT + 60)
def test_the_sdist_holds_cbops_sources_and_nothing_else(release: Release) -> None:
    prefix = f"cbop-{VERSION}/"
    with tarfile.open(release.path(FILES[1])) as archive:
        files = {m.name.removeprefix(prefix) for m in archive.getmembers() if m.isfile()}
        pkg_info = archive.extractfile(prefix + "PKG-INFO")
        assert pkg_info is not None
        metadata = pkg_info.read().decode()
    top = {name for name in files if not name.startswith("src/cbop/")}
    assert top == {"PKG-INFO", "pyproject.toml", "README.md", "CHANGELOG.md"}
    sources = {
        p.relative_to(REPO).as_posix()
        for p in (REPO / "src" / "cbop").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert files - top == sources
    assert f"\nVersion: {VERSION}\n" in metadata


@pytest.mark.timeout(RELEASE_TIMEOUT + 60)
def test_the_chart_lints_and_carries_the_version(release: Release) -> None:
    helm = helm_binary()
    chart = release.path(FILES[3])
    _run(helm, "lint", "--strict", chart)
    meta = yaml.safe_load(_run(helm, "show", "chart", chart))
    assert (meta["name"], meta["version"], meta["appVersion"]) == ("cbop", VERSION, VERSION)
    crds = list(yaml.safe_load_all(_run(helm, "show", "crds", chart)))
    assert [c["metadata"]["name"] for c in crds if c] == ["configbundles.cbop.dev"]


@pytest.mark.timeout(RELEASE_TIMEOUT + 300)
def test_the_oci_archive_loads_into_an_empty_store_and_runs(
    release: Release, tmp_path: Path
) -> None:
    archive = release.path(FILES[2])
    with tarfile.open(archive) as tar:
        index_file = tar.extractfile("index.json")
        assert index_file is not None
        index = json.load(index_file)
    (manifest,) = index["manifests"]
    assert manifest["annotations"]["org.opencontainers.image.ref.name"] == IMAGE

    # A store of its own (vfs: no mounts left behind), as a machine without this tree.
    # podman wants a runroot path under 50 characters.
    runroot = Path(tempfile.mkdtemp(prefix="cbop-release-"))
    store = [
        "--root", str(tmp_path / "root"), "--runroot", str(runroot),
        "--storage-driver", "vfs",
    ]  # fmt: skip
    try:
        loaded = _run("podman", *store, "load", "--input", archive, env=podman_env())
        assert IMAGE in loaded, loaded
        inspect = ["image", "inspect", "--format", "{{json .Labels}}", IMAGE]
        labels = json.loads(_run("podman", *store, *inspect, env=podman_env()))
        assert labels["org.opencontainers.image.version"] == VERSION
        locked = ["--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
        printed = _run("podman", *store, "run", "--rm", "--network", "none", *locked, IMAGE,
                       "--version", env=podman_env())  # fmt: skip
        assert printed.strip() == f"cbop {VERSION}"
    finally:
        subprocess.run(["podman", *store, "rmi", "--all", "--force"], env=podman_env(),
                       capture_output=True, timeout=TIMEOUT, check=False)  # fmt: skip
        shutil.rmtree(runroot, ignore_errors=True)


@pytest.mark.timeout(RELEASE_TIMEOUT + NODE_BUILD_TIMEOUT)
def test_containerd_imports_the_archive_under_the_name_install_yaml_uses(
    release: Release,
) -> None:
    (image,) = [
        container["image"]
        for o in yaml.safe_load_all(release.path("install.yaml").read_text())
        if o and o["kind"] == "Deployment"
        for container in o["spec"]["template"]["spec"]["containers"]
    ]
    assert "docker.io/library/" + image == IMAGE  # what a kubelet asks containerd for
    node = find_node_binaries()
    # containerd of its own (a socket path must stay short), as on a node.
    state = Path(tempfile.mkdtemp(prefix="cbop-ctd-"))
    address = state / "sock"
    (state / "config.toml").write_text(
        f'version = 3\nroot = "{state}/root"\nstate = "{state}/state"\n'
        f'[grpc]\n  address = "{address}"\n[ttrpc]\n  address = "{address}.ttrpc"\n'
        '[metrics]\n  address = ""\n'
    )
    ctr = [str(node.path("ctr")), "--address", str(address), "--namespace", "k8s.io"]
    with (state / "containerd.log").open("w") as log:
        containerd = subprocess.Popen(
            [node.path("containerd"), "--config", state / "config.toml"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:

        def serving() -> bool:
            return subprocess.run([*ctr, "version"], capture_output=True, check=False,
                                  timeout=TIMEOUT).returncode == 0  # fmt: skip

        wait_for(serving, 60, message="containerd serving")
        _run(*ctr, "images", "import", "--no-unpack", release.path(FILES[2]))
        names = _run(*ctr, "images", "list", "--quiet").split()
        # The CRI plugin adds a reference by the image's id (sha256:...), no other name.
        assert IMAGE in names, names
        assert all(name == IMAGE or name.startswith("sha256:") for name in names), names
    finally:
        containerd.terminate()
        containerd.wait(timeout=TIMEOUT)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def fresh_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(binaries=find_binaries(), workdir=tmp_path_factory.mktemp("release-cp"))
    plane.start(timeout=120)
    try:
        yield plane
    finally:
        plane.stop()


def _resource_versions(kubectl: list[str], install: Path) -> dict[str, str]:
    items = json.loads(_run(*kubectl, "get", "-f", install, "-o", "json"))["items"]
    return {
        f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o["metadata"][
            "resourceVersion"
        ]
        for o in items
    }


@pytest.mark.timeout(RELEASE_TIMEOUT + 180)
def test_install_yaml_installs_server_side_and_a_second_apply_changes_nothing(
    release: Release, fresh_plane: ControlPlane
) -> None:
    install = release.path("install.yaml")
    objects = [o for o in yaml.safe_load_all(install.read_text()) if o]
    kinds = {o["kind"] for o in objects}
    assert {"CustomResourceDefinition", "Namespace", "ClusterRole", "Deployment"} <= kinds
    kubectl = [str(fresh_plane.binaries.kubectl), "--kubeconfig", str(fresh_plane.kubeconfig_path)]

    applied = _run(*kubectl, "apply", "--server-side", "-f", install)
    assert len(applied.splitlines()) == len(objects), applied
    assert all(line.endswith(" serverside-applied") for line in applied.splitlines()), applied
    _run(*kubectl, "wait", "--for=condition=Established", "--timeout=60s",
         "crd/configbundles.cbop.dev")  # fmt: skip
    deployment = json.loads(
        _run(*kubectl, "get", "deployment", "cbop", "-n", "cbop-system", "-o", "json")
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"cbop:{VERSION}"
    crd = json.loads(_run(*kubectl, "get", "crd", "configbundles.cbop.dev", "-o", "json"))
    assert [v["name"] for v in crd["spec"]["versions"] if v["storage"]] == ["v1beta1"]

    before = _resource_versions(kubectl, install)
    assert len(before) == len(objects)
    again = _run(*kubectl, "apply", "--server-side", "-f", install)
    assert len(again.splitlines()) == len(objects), again
    assert _resource_versions(kubectl, install) == before
