"""A controller's definition: everything the process needs to know of it, in one place.

A controller package (``cbop.configbundle``, ``cbop.rollout``, ...) exports one
:class:`ControllerDefinition`, and the process (``cbop.manager``, ``cbop.cli``) knows
controllers only through these:

- its **flags** (:class:`Flag`): the command line offers them (each with its
  ``CBOP_*`` variable), and their values reach the controller as ``settings``;
- whether it runs (``enabled``, from those settings);
- the **resources it watches** (for the size of the connection pool: one watch per
  resource and namespace) and how many controllers (worker pools) it adds;
- its **RBAC needs** (:class:`PolicyRule`): the shipped ClusterRole and the Helm chart
  are checked against them by a test, so a rule cannot be forgotten;
- what it adds when one of its boolean flags is on (:class:`OptIn`): more informers,
  and RBAC shipped in roles of their own, installed only with that flag (Secrets);
- how it is **installed**: once per process, ``install(context)`` makes what lives as
  long as the process (its metrics, against ``context.registry``) and returns the setup
  function the manager runs against every scope (the single leader's, or each shard's
  as it is acquired), which builds the controllers with :class:`cbop.runtime.Builder`.

Adding a controller is then a new package with its definition, and one line in the
registry (``cbop.controllers``); the command line and the manager stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cbop.kube import Resource
from cbop.runtime.scope import Scope
from cbop.runtime.seams import EventSink

__all__ = ["Context", "ControllerDefinition", "Flag", "OptIn", "PolicyRule", "SetupFunc"]

#: Builds a controller's controllers into one scope.
SetupFunc = Callable[[Scope], object]


@dataclass(frozen=True)
class Flag:
    """A command-line flag a controller owns: ``--<name>``, variable ``CBOP_<NAME>``.

    Attributes:
        name: the long option without dashes (``rollout``); its value is
            ``settings[name with "-" as "_"]``.
        default: the default value; its type is the flag's (a ``bool`` gives
            ``--name`` / ``--no-name``).
        help: one line for ``cbop --help`` (the default is appended).
    """

    name: str
    default: bool | int | float | str
    help: str

    @property
    def dest(self) -> str:
        """The key of the flag's value in ``settings``."""
        return self.name.replace("-", "_")


@dataclass(frozen=True)
class PolicyRule:
    """One RBAC rule a controller needs (``rbac.authorization.k8s.io/v1`` PolicyRule).

    Attributes:
        api_groups: API groups (``""`` for the core group).
        resources: resources, subresources as ``plural/sub``.
        verbs: verbs.
        why: what the controller does with them (docs/deploy.md explains each).
        resource_names: the objects the rule is limited to (RBAC's ``resourceNames``);
            empty: every object of the resources.
    """

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    why: str = ""
    resource_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class OptIn:
    """What a controller adds while one of its boolean flags is on.

    The flag is off by default; its RBAC is shipped in roles of their own, installed
    only with it (``manifests/<flag>/``, the chart's ``<flag>.enabled``), so with the
    flag off cbop's ServiceAccount has none of it.

    Attributes:
        flag: the :attr:`Flag.dest` of the boolean flag (``secrets``).
        informers: resources it watches once more per scope while on (each one more
            watch).
        rbac: cluster-wide rules it needs while on (a ClusterRole of their own).
        namespace_rbac: rules in cbop's own namespace (a Role of their own).
    """

    flag: str
    informers: tuple[Resource, ...] = ()
    rbac: tuple[PolicyRule, ...] = ()
    namespace_rbac: tuple[PolicyRule, ...] = ()

    def on(self, settings: Mapping[str, Any]) -> bool:
        """Whether the flag is on in ``settings``."""
        return bool(settings.get(self.flag))


@dataclass(frozen=True)
class Context:
    """What a controller's ``install`` receives from the process.

    Attributes:
        settings: every flag value of every controller, by :attr:`Flag.dest`.
        workers: worker threads per controller (``--workers``).
        priority_queue: whether workqueues are priority queues (``--priority-queue``).
        recorder: the process's one Event recorder.
        registry: the process's ``prometheus_client.CollectorRegistry`` (the runtime
            never touches it; controllers register their metrics on it).
        cached: ``fn(resource) -> objects`` in the caches of every scope the process
            serves now (for collectors read at scrape time).
    """

    settings: Mapping[str, Any]
    workers: int
    priority_queue: bool
    recorder: EventSink
    registry: Any
    cached: Callable[[Resource], list[Mapping[str, Any]]]


def _always(settings: Mapping[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class ControllerDefinition:
    """One controller package, as the process sees it (see the module docstring).

    Attributes:
        name: the package's name in logs and docs (``configbundle``, ``rollout``).
        summary: one line: what it does.
        install: ``fn(context) -> setup``: called once per process when enabled.
        flags: the command-line flags it owns.
        enabled: ``fn(settings) -> bool``: whether it runs (default: always).
        resources: the resources its informers watch (shared ones too).
        more_informers: resources it watches once more per scope, through an informer of
            its own with another label selector (the ConfigBundle controller's source
            ConfigMaps beside the managed ones): each is one more watch.
        controllers: how many controllers (worker pools) its setup adds per scope.
        rbac: the RBAC rules it needs.
        opt_ins: what it adds while one of its boolean flags is on.
    """

    name: str
    summary: str
    install: Callable[[Context], SetupFunc]
    flags: tuple[Flag, ...] = ()
    enabled: Callable[[Mapping[str, Any]], bool] = _always
    resources: tuple[Resource, ...] = ()
    more_informers: tuple[Resource, ...] = ()
    controllers: int = 1
    rbac: tuple[PolicyRule, ...] = field(default_factory=tuple)
    opt_ins: tuple[OptIn, ...] = ()

    @staticmethod
    def settings_of(definitions: Sequence[ControllerDefinition]) -> dict[str, Any]:
        """Return every flag's default value of ``definitions``, by :attr:`Flag.dest`."""
        return {flag.dest: flag.default for d in definitions for flag in d.flags}
