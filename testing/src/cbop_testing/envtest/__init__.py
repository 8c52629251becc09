"""A real local Kubernetes control plane for tests and development.

``cbop_testing.envtest`` starts etcd, kube-apiserver and kube-controller-manager on loopback with
throwaway state, like controller-runtime's envtest plus a controller manager (so
garbage collection and namespace deletion work). Tests use :class:`ControlPlane`;
developers use ``python -m cbop_testing.envtest start|stop|status`` (``make dev-cluster``).
The binaries come from :func:`find_binaries`. See docs/control-plane.md.

The operator itself never imports this package (an import-linter contract).
"""

from cbop_testing.envtest.binaries import Binaries, cache_dir, find_binaries
from cbop_testing.envtest.components import (
    COMPONENTS,
    DEFAULT_CONTROLLERS,
    WRITES_AUDIT_POLICY,
)
from cbop_testing.envtest.controlplane import ControlPlane
from cbop_testing.envtest.errors import (
    BinariesUnavailableError,
    ControlPlaneError,
    ControlPlaneNotRunningError,
    ControlPlaneStartError,
    EnvtestError,
)

__all__ = [
    "COMPONENTS",
    "DEFAULT_CONTROLLERS",
    "WRITES_AUDIT_POLICY",
    "Binaries",
    "BinariesUnavailableError",
    "ControlPlane",
    "ControlPlaneError",
    "ControlPlaneNotRunningError",
    "ControlPlaneStartError",
    "EnvtestError",
    "cache_dir",
    "find_binaries",
]
