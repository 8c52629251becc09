"""Locating the binaries: the control plane's, and the node's.

The control plane's (etcd, kube-apiserver, kube-controller-manager, kubectl) are looked
up as controller-runtime's envtest does: an explicit path per binary in a
``TEST_ASSET_<NAME>`` environment variable wins, then the directory named by
``KUBEBUILDER_ASSETS``. Anything not found that way comes from cbop's own build cache,
``${XDG_CACHE_HOME:-~/.cache}/cbop/bin/k8s-<version>-etcd-<version>/``, which
``hack/build-control-plane.sh`` fills from the Go modules pinned in ``hack/k8s`` and
``hack/etcd``. The script is run when a cached binary is missing.

``setup-envtest`` does not ship kube-controller-manager, so a ``KUBEBUILDER_ASSETS``
directory from it is completed from the cache (or ``TEST_ASSET_KUBE_CONTROLLER_MANAGER``).

The node's (:data:`NODE_BINARY_NAMES`) come from ``hack/build-node.sh``'s cache only
(:func:`find_node_binaries`).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cbop_testing.envtest.errors import BinariesUnavailableError

__all__ = [
    "BINARY_NAMES",
    "NODE_BINARY_NAMES",
    "Binaries",
    "NodeBinaries",
    "build_script",
    "cache_dir",
    "find_binaries",
    "find_node_binaries",
    "pinned_versions",
]

#: Environment variable naming one binary, per binary file name (as envtest's
#: ``TEST_ASSET_*``; the kube-controller-manager one is cbop's addition).
_ASSET_ENV: Final[dict[str, str]] = {
    "etcd": "TEST_ASSET_ETCD",
    "kube-apiserver": "TEST_ASSET_KUBE_APISERVER",
    "kube-controller-manager": "TEST_ASSET_KUBE_CONTROLLER_MANAGER",
    "kubectl": "TEST_ASSET_KUBECTL",
}

#: File names of the binaries, in the order the build script builds them.
BINARY_NAMES: Final[tuple[str, ...]] = tuple(_ASSET_ENV)


@dataclass(frozen=True, slots=True)
class Binaries:
    """Absolute paths of the four control-plane executables.

    Attributes:
        etcd: The etcd server.
        kube_apiserver: kube-apiserver.
        kube_controller_manager: kube-controller-manager.
        kubectl: kubectl (not needed to run the control plane; offered to tests and
            developers).
        origins: Where each binary was found, by file name, e.g.
            ``{"etcd": "TEST_ASSET_ETCD"}``; for error messages and ``status``.
    """

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kubectl: Path
    origins: tuple[tuple[str, str], ...] = ()

    def by_name(self) -> dict[str, Path]:
        """Return the paths keyed by executable file name (``"kube-apiserver"``, ...)."""
        return {
            "etcd": self.etcd,
            "kube-apiserver": self.kube_apiserver,
            "kube-controller-manager": self.kube_controller_manager,
            "kubectl": self.kubectl,
        }


def repo_root() -> Path | None:
    """Return the cbop source checkout holding this package, or None for an installed copy.

    The checkout is the nearest directory above this file that holds
    ``hack/build-control-plane.sh`` (this package lives in ``testing/src/cbop_testing``).
    """
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "hack" / "build-control-plane.sh").is_file():
            return parent
    return None


def build_script() -> Path | None:
    """Return the path of ``hack/build-control-plane.sh``, or None outside a checkout."""
    root = repo_root()
    return None if root is None else root / "hack" / "build-control-plane.sh"


def _module_version(go_mod: Path, module: str) -> str:
    pattern = re.compile(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v[0-9][^\s]*)", re.M)
    match = pattern.search(go_mod.read_text(encoding="utf-8"))
    if match is None:
        raise BinariesUnavailableError(f"{go_mod} does not pin {module}")
    return match.group(1)


def pinned_versions() -> tuple[str, str]:
    """Return ``(kubernetes_version, etcd_version)`` as pinned in ``hack/*/go.mod``.

    Raises:
        BinariesUnavailableError: Outside a source checkout, or when a go.mod does not
            pin the module.
    """
    root = repo_root()
    if root is None:
        raise BinariesUnavailableError(
            "cbop_testing.envtest is not running from a source checkout (hack/ not found), so the "
            "pinned control-plane versions are unknown; set KUBEBUILDER_ASSETS or the "
            "TEST_ASSET_* variables to existing binaries"
        )
    k8s = _module_version(root / "hack" / "k8s" / "go.mod", "k8s.io/kubernetes")
    etcd = _module_version(root / "hack" / "etcd" / "go.mod", "go.etcd.io/etcd/server/v3")
    return k8s, etcd


def cache_dir() -> Path:
    """Return the directory the build script fills for the pinned versions.

    It is ``${XDG_CACHE_HOME:-$HOME/.cache}/cbop/bin/k8s-<k8s>-etcd-<etcd>``, the same
    expression as in ``hack/build-control-plane.sh``.

    Raises:
        BinariesUnavailableError: As :func:`pinned_versions`.
    """
    k8s, etcd = pinned_versions()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cbop" / "bin" / f"k8s-{k8s}-etcd-{etcd}"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _from_environment() -> tuple[dict[str, Path], dict[str, str]]:
    """Resolve what the environment names; raise if it names something unusable."""
    found: dict[str, Path] = {}
    origins: dict[str, str] = {}
    assets = os.environ.get("KUBEBUILDER_ASSETS", "")
    if assets and not Path(assets).is_dir():
        raise BinariesUnavailableError(
            f"KUBEBUILDER_ASSETS={assets!r} is set but is not a directory"
        )
    for name, variable in _ASSET_ENV.items():
        explicit = os.environ.get(variable, "")
        if explicit:
            path = Path(explicit).expanduser().resolve()
            if not _executable(path):
                raise BinariesUnavailableError(
                    f"{variable}={explicit!r} is set but is not an executable file"
                )
            found[name] = path
            origins[name] = variable
        elif assets and _executable(Path(assets) / name):
            found[name] = (Path(assets) / name).resolve()
            origins[name] = "KUBEBUILDER_ASSETS"
    return found, origins


def _run_build_script(missing: list[str]) -> None:
    script = build_script()
    if script is None:
        raise BinariesUnavailableError(
            f"{', '.join(missing)} not found and there is no build script to make them "
            "(not a source checkout); set KUBEBUILDER_ASSETS or TEST_ASSET_* to existing "
            "binaries"
        )
    env = dict(os.environ)
    # The script short-circuits on KUBEBUILDER_ASSETS; here it must fill the cache.
    env.pop("KUBEBUILDER_ASSETS", None)
    try:
        # stdout is the cache directory; progress goes to our stderr, unchanged.
        subprocess.run(
            ["bash", str(script)],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )
    except subprocess.CalledProcessError as exc:
        raise BinariesUnavailableError(
            f"{', '.join(missing)} not found and {script} failed (exit {exc.returncode}); "
            "it needs the Go toolchain and access to the Go module proxy. Alternatively set "
            "KUBEBUILDER_ASSETS or TEST_ASSET_* to existing binaries"
        ) from exc


def find_binaries(*, build: bool = True) -> Binaries:
    """Find the control-plane binaries, building missing ones when allowed.

    Precedence per binary, as controller-runtime's envtest: ``TEST_ASSET_<NAME>``
    (``TEST_ASSET_ETCD``, ``TEST_ASSET_KUBE_APISERVER``, ``TEST_ASSET_KUBECTL``, and
    ``TEST_ASSET_KUBE_CONTROLLER_MANAGER``), then ``$KUBEBUILDER_ASSETS/<name>``, then
    cbop's build cache (see :func:`cache_dir`).

    Args:
        build: Run ``hack/build-control-plane.sh`` when a binary is in none of those
            places. A cold build takes tens of minutes on two cores.

    Returns:
        The resolved paths.

    Raises:
        BinariesUnavailableError: A variable names something that is not there, or a
            binary is missing and cannot be built (``build`` false, no checkout, no Go
            toolchain, or the build failed). The message says which and why.
    """
    found, origins = _from_environment()
    missing = [name for name in BINARY_NAMES if name not in found]
    if missing:
        cache = cache_dir()
        if not all(_executable(cache / name) for name in missing) and build:
            _run_build_script([n for n in missing if not _executable(cache / n)])
        still_missing = [name for name in missing if not _executable(cache / name)]
        if still_missing:
            raise BinariesUnavailableError(
                f"{', '.join(still_missing)} not found: not named by "
                f"{', '.join(_ASSET_ENV[n] for n in still_missing)} or KUBEBUILDER_ASSETS, "
                f"and not in the build cache {cache}"
                + ("" if build else " (building was not allowed)")
                + "; run hack/build-control-plane.sh (make binaries)"
            )
        for name in missing:
            found[name] = cache / name
            origins[name] = str(cache)
    return Binaries(
        etcd=found["etcd"],
        kube_apiserver=found["kube-apiserver"],
        kube_controller_manager=found["kube-controller-manager"],
        kubectl=found["kubectl"],
        origins=tuple((name, origins[name]) for name in BINARY_NAMES),
    )


#: Executables built by ``hack/build-node.sh``.
NODE_BINARY_NAMES: Final[tuple[str, ...]] = (
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "kube-scheduler",
    "kubelet",
)


@dataclass(frozen=True, slots=True)
class NodeBinaries:
    """The directory holding :data:`NODE_BINARY_NAMES` (``hack/build-node.sh``'s cache)."""

    directory: Path

    def path(self, name: str) -> Path:
        """Return the absolute path of one executable, e.g. ``path("kubelet")``."""
        return self.directory / name


def find_node_binaries() -> NodeBinaries:
    """Build (if missing) and return the node binaries with ``hack/build-node.sh``.

    A cold build takes about 8 minutes on two cores (containerd and its shim, ctr,
    kube-scheduler, kubelet; the kubelet reuses most of the control plane's build).

    Raises:
        BinariesUnavailableError: Not a source checkout, or the build failed.
    """
    root = repo_root()
    if root is None:
        raise BinariesUnavailableError("hack/build-node.sh not found (not a source checkout)")
    result = subprocess.run(
        ["bash", str(root / "hack" / "build-node.sh")],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    directory = Path(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else None
    if result.returncode != 0 or directory is None:
        raise BinariesUnavailableError(f"hack/build-node.sh failed (exit {result.returncode})")
    missing = [n for n in NODE_BINARY_NAMES if not os.access(directory / n, os.X_OK)]
    if missing:
        raise BinariesUnavailableError(f"{', '.join(missing)} missing from {directory}")
    return NodeBinaries(directory)
