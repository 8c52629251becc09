"""Binary lookup of cbop_testing.envtest: TEST_ASSET_* > KUBEBUILDER_ASSETS > build cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cbop_testing.envtest import BinariesUnavailableError, cache_dir, find_binaries
from cbop_testing.envtest.binaries import BINARY_NAMES, pinned_versions

ENV_VARS = (
    "KUBEBUILDER_ASSETS",
    "TEST_ASSET_ETCD",
    "TEST_ASSET_KUBE_APISERVER",
    "TEST_ASSET_KUBE_CONTROLLER_MANAGER",
    "TEST_ASSET_KUBECTL",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def fake_binary(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_cache_dir_follows_pinned_versions_and_xdg(tmp_path: Path) -> None:
    k8s, etcd = pinned_versions()
    assert k8s.startswith("v1.")
    assert etcd.startswith("v3.")
    assert cache_dir() == tmp_path / "xdg-cache" / "cbop" / "bin" / f"k8s-{k8s}-etcd-{etcd}"


def test_kubebuilder_assets_then_cache_for_what_it_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets = tmp_path / "assets"
    for name in ("etcd", "kube-apiserver", "kubectl"):  # what setup-envtest ships
        fake_binary(assets, name)
    kcm = fake_binary(cache_dir(), "kube-controller-manager")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))

    found = find_binaries(build=False)

    assert found.etcd == (assets / "etcd").resolve()
    assert found.kube_apiserver == (assets / "kube-apiserver").resolve()
    assert found.kubectl == (assets / "kubectl").resolve()
    assert found.kube_controller_manager == kcm
    assert dict(found.origins)["etcd"] == "KUBEBUILDER_ASSETS"
    assert dict(found.origins)["kube-controller-manager"] == str(cache_dir())


def test_test_asset_variables_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assets = tmp_path / "assets"
    for name in BINARY_NAMES:
        fake_binary(assets, name)
    own = fake_binary(tmp_path / "elsewhere", "my-apiserver")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setenv("TEST_ASSET_KUBE_APISERVER", str(own))

    found = find_binaries(build=False)

    assert found.kube_apiserver == own
    assert dict(found.origins)["kube-apiserver"] == "TEST_ASSET_KUBE_APISERVER"
    assert found.by_name()["etcd"] == (assets / "etcd").resolve()


def test_every_binary_by_test_asset_needs_no_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    variables = dict(zip(BINARY_NAMES, ENV_VARS[1:], strict=True))
    for name, variable in variables.items():
        monkeypatch.setenv(variable, str(fake_binary(tmp_path / "bin", name)))
    found = find_binaries(build=False)
    assert {n: p.name for n, p in found.by_name().items()} == {n: n for n in BINARY_NAMES}


def test_missing_binaries_are_named_in_the_error() -> None:
    with pytest.raises(BinariesUnavailableError) as err:
        find_binaries(build=False)
    message = str(err.value)
    assert "etcd, kube-apiserver, kube-controller-manager, kubectl not found" in message
    assert "TEST_ASSET_KUBE_CONTROLLER_MANAGER" in message
    assert str(cache_dir()) in message
    assert "building was not allowed" in message


def test_a_variable_naming_nothing_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_ASSET_ETCD", str(tmp_path / "no-such-etcd"))
    with pytest.raises(BinariesUnavailableError, match=r"TEST_ASSET_ETCD=.* is not an executable"):
        find_binaries(build=False)


def test_kubebuilder_assets_must_be_a_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "missing"))
    with pytest.raises(BinariesUnavailableError, match=r"KUBEBUILDER_ASSETS=.* is not a directory"):
        find_binaries(build=False)


def test_failed_build_explains_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A PATH with the script's tools but no Go toolchain: the script refuses to build,
    # and the error says why.
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("bash", "grep", "awk", "mkdir", "flock", "dirname", "mv", "env"):
        found = shutil.which(tool)
        if found is not None:
            (tools / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(tools))
    with pytest.raises(BinariesUnavailableError, match=r"failed .*Go toolchain"):
        find_binaries(build=True)
