"""Exceptions raised by :mod:`cbop_testing.envtest`."""

from __future__ import annotations

__all__ = [
    "BinariesUnavailableError",
    "ControlPlaneError",
    "ControlPlaneNotRunningError",
    "ControlPlaneStartError",
    "EnvtestError",
    "NodeError",
]


class EnvtestError(Exception):
    """Base class of every error raised by :mod:`cbop_testing.envtest`."""


class BinariesUnavailableError(EnvtestError):
    """The control-plane binaries could not be found or built; the message says why."""


class ControlPlaneError(EnvtestError):
    """A control-plane operation failed (a component died, a request to etcd failed)."""


class ControlPlaneStartError(ControlPlaneError):
    """A component did not become ready; the message ends with the tail of its log."""


class ControlPlaneNotRunningError(ControlPlaneError):
    """An operation needs a started control plane and this one is not running."""


class NodeError(ControlPlaneError):
    """The node could not be started or a node operation failed; the message says why."""
