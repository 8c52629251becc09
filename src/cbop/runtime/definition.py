"""A controller's definition: everything the process needs to know of it, in one place.

A controller package exports one :class:`ControllerDefinition`: its flags, the frozen
dataclass of its settings built once from their parsed values (:class:`FlagValues`),
whether it runs, the resources it watches (the connection pool's size), its RBAC needs
(checked against the shipped ClusterRole by a test), and ``install``, called once per
process, which returns the :class:`Setup` the manager runs against each scope. The
process (``cbop.manager``, ``cbop.cli``) knows controllers only through these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from cbop.kube import Resource
from cbop.runtime.scope import Scope
from cbop.runtime.seams import EventSink

__all__ = [
    "Configured",
    "Context",
    "ControllerDefinition",
    "Flag",
    "FlagValues",
    "PolicyRule",
    "Setup",
    "SetupFunc",
    "configure_all",
]

#: Builds a controller's controllers into one scope.
SetupFunc = Callable[[Scope], object]

#: A flag's value type.
T = TypeVar("T", bool, int, float, str)
#: A controller package's settings (a frozen dataclass).
S = TypeVar("S")


@dataclass(frozen=True)
class Flag(Generic[T]):
    """A command-line flag a controller owns: ``--<name>``, variable ``CBOP_<NAME>``.

    Attributes:
        name: the long option without dashes (``rollout``).
        default: the default value; its type is the flag's (a ``bool`` gives
            ``--name`` / ``--no-name``).
        help: one line for ``cbop --help`` (the default is appended).

    Another package may read a flag it does not own through a ``Flag`` of the same
    name and default that it does not list in its definition's ``flags`` (the
    ConfigBundle controller reads ``--rollout``); the command line offers the owner's.
    """

    name: str
    default: T
    help: str = ""

    @property
    def dest(self) -> str:
        """The key of the flag's parsed value (``argparse``'s ``dest``)."""
        return self.name.replace("-", "_")


class FlagValues:
    """The parsed values of the controllers' flags, read back typed by their :class:`Flag`.

    Args:
        values: flag value by :attr:`Flag.dest` (``argparse``'s namespace as a dict);
            a flag missing here reads as its default.
    """

    def __init__(self, values: Mapping[str, object] | None = None) -> None:
        self._values = dict(values or {})

    def __getitem__(self, flag: Flag[T]) -> T:
        """Return ``flag``'s value, of the type of its default (an int reads as a float).

        Raises:
            TypeError: the value is of another type (a caller that built the values
                by hand gave a string for a number, say).
        """
        value = self._values.get(flag.dest, flag.default)
        kind = type(flag.default)
        if kind is float and type(value) is int:
            value = float(value)
        if isinstance(value, kind) and isinstance(value, bool) == (kind is bool):
            return value
        raise TypeError(f"--{flag.name} takes a {kind.__name__}, not {value!r}")


@dataclass(frozen=True)
class PolicyRule:
    """One RBAC rule a controller needs (``rbac.authorization.k8s.io/v1`` PolicyRule).

    Attributes:
        api_groups: API groups (``""`` for the core group).
        resources: resources, subresources as ``plural/sub``.
        verbs: verbs.
        why: what the controller does with them (docs/deploy.md explains each).
    """

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    why: str = ""


@dataclass(frozen=True)
class Context:
    """What a controller's ``install`` receives from the process.

    Attributes:
        workers: worker threads per controller (``--workers``).
        priority_queue: whether workqueues are priority queues (``--priority-queue``).
        recorder: the process's one Event recorder.
        registry: the process's ``prometheus_client.CollectorRegistry`` (the runtime
            never touches it; controllers register their metrics on it).
        cached: ``fn(resource) -> objects`` in the caches of every scope the process
            serves now (for collectors read at scrape time).
    """

    workers: int
    priority_queue: bool
    recorder: EventSink
    registry: Any
    cached: Callable[[Resource], list[Mapping[str, Any]]]


@dataclass(frozen=True)
class Setup:
    """What one controller package adds to the scopes of a process.

    Attributes:
        each_scope: ``fn(scope)``, run in every scope as it is built; its controllers
            read what the scope serves.
        once: ``fn(scope)``, run before ``each_scope`` in the one scope of a group that
            hosts the controllers a group runs once
            (:attr:`cbop.runtime.scope.ScopeSpec.hosts_once`, fenced by that scope's
            lease: the ClusterConfigBundle status writer); None: none.
    """

    each_scope: SetupFunc
    once: SetupFunc | None = None

    def set_up(self, scope: Scope) -> None:
        """Add the controllers to ``scope``: ``once`` first where it hosts them."""
        if self.once is not None and scope.spec.hosts_once:
            self.once(scope)
        self.each_scope(scope)


def _always(settings: object) -> bool:
    return True


@dataclass(frozen=True)
class ControllerDefinition(Generic[S]):
    """One controller package, as the process sees it (see the module docstring).

    Attributes:
        name: the package's name in logs and docs (``configbundle``, ``rollout``).
        summary: one line: what it does.
        settings: ``fn(flags) -> settings``: the package's frozen settings dataclass,
            built once per process from the parsed flags.
        install: ``fn(context, settings) -> setup``: called once per process when
            enabled (a plain function is a :class:`Setup` of ``each_scope`` only).
        flags: the command-line flags it owns.
        enabled: ``fn(settings) -> bool``: whether it runs (default: always).
        resources: the resources its informers watch (shared ones too).
        more_informers: resources it watches once more per scope, through an informer of
            its own with another label selector (the ConfigBundle controller's source
            ConfigMaps beside the managed ones): each is one more watch.
        controllers: how many controllers (worker pools) its setup adds per scope.
        rbac: the RBAC rules it needs.
    """

    name: str
    summary: str
    settings: Callable[[FlagValues], S]
    install: Callable[[Context, S], Setup | SetupFunc]
    flags: tuple[Flag[Any], ...] = ()
    enabled: Callable[[S], bool] = _always
    resources: tuple[Resource, ...] = ()
    more_informers: tuple[Resource, ...] = ()
    controllers: int = 1
    rbac: tuple[PolicyRule, ...] = field(default_factory=tuple)

    def configure(self, flags: FlagValues) -> Configured[S]:
        """Return the definition with its settings built from ``flags``.

        Raises:
            TypeError: a flag's value is not of its type.
        """
        return Configured(self, self.settings(flags))


@dataclass(frozen=True)
class Configured(Generic[S]):
    """A definition and its settings, built once from the parsed flags.

    Attributes:
        definition: the controller package's definition.
        settings: its settings.
    """

    definition: ControllerDefinition[S]
    settings: S

    @property
    def enabled(self) -> bool:
        """Whether the controller runs with these settings."""
        return self.definition.enabled(self.settings)

    def install(self, context: Context) -> Setup:
        """Install the controller in a process; return its :class:`Setup`."""
        made = self.definition.install(context, self.settings)
        return made if isinstance(made, Setup) else Setup(made)


def configure_all(
    definitions: Sequence[ControllerDefinition[Any]], flags: FlagValues
) -> tuple[Configured[Any], ...]:
    """Return every definition configured from ``flags``, enabled or not, in order."""
    return tuple(definition.configure(flags) for definition in definitions)
