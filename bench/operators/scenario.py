"""What a scenario is to the harness, and the one way options reach it.

A scenario module exports one object that satisfies :class:`Scenario`, and the registry
(``bench.operators.registry``) lists them; ``__main__`` knows scenarios only through
that tuple. Each scenario's options are a frozen dataclass of defaults (those of the
full run), with ``quick`` overrides for ``--quick``; on the command line
``--set NAME.FIELD=VALUE`` sets one of them, ``NAME`` being any name the scenario is
selected by (``--set s9.namespaces=50``).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.operators.harness import Bench


@dataclass(frozen=True)
class Needs:
    """What a scenario needs of the control plane before it starts.

    Attributes:
        controllers: kube-controller-manager controllers besides the default set.
        audit_rules: audit policy rules (YAML list items) besides the bench's own.
    """

    controllers: tuple[str, ...] = ()
    audit_rules: str = ""


@dataclass
class Run:
    """One run of the benchmark, as the scenarios see it.

    Attributes:
        bench: the bench (client, settings, the operator under test).
        impls: the implementations asked for, in order.
        selected: the scenario names asked for (``--scenarios``).
        options: each scenario's options, by its :attr:`Scenario.name`.
        results: what the run records; each scenario writes its own keys.
        kubectl: the control plane's kubectl.
        kubeconfig_for: ``(namespace, service account) -> kubeconfig`` with that
            account's token (``ControlPlane.kubeconfig_for_service_account``).
    """

    bench: Bench
    impls: tuple[str, ...]
    selected: frozenset[str]
    options: Mapping[str, Any]
    results: dict[str, Any] = field(default_factory=dict)
    kubectl: Path = Path("kubectl")
    kubeconfig_for: Any = None

    def append(self, key: str, record: Mapping[str, Any]) -> None:
        """Add ``record`` to the list ``results[key]``."""
        self.results.setdefault(key, []).append(dict(record))


class Scenario(Protocol):
    """One scenario (or a few measured together, such as S1 with S4 and S5).

    ``names``: the ``--scenarios`` names that select it; the first is :attr:`name`, the
    key of its options. ``per_implementation``: run once per implementation
    (:meth:`accepts` says which), in the order of ``--impls``, or once for the run when
    :meth:`accepts` one of them. ``defaults`` is its options dataclass at the full run's
    sizes; ``quick`` overrides some under ``--quick``.
    """

    @property
    def names(self) -> tuple[str, ...]: ...

    @property
    def per_implementation(self) -> bool: ...

    @property
    def defaults(self) -> Any: ...

    @property
    def quick(self) -> Mapping[str, Any]: ...

    @property
    def needs(self) -> Needs: ...

    def accepts(self, impl: str) -> bool:
        """Whether ``impl`` takes part (for a run-wide scenario: whether it runs)."""
        ...

    def run(self, run: Run, options: Any, impl: str | None) -> None:
        """Measure, writing into ``run.results`` (``impl`` is None for a run-wide one)."""
        ...

    def markdown(self, results: Mapping[str, Any]) -> list[str]:
        """Its sections of the results file (none when it did not run)."""
        ...

    def goals(self, results: Mapping[str, Any]) -> list[str]:
        """Its lines of the results file's Goals section, each with its verdict."""
        ...


class Defaults:
    """What most scenarios leave as it is: run once per run, no quick sizes, nothing
    asked of the control plane, no goals of their own. A scenario class may derive from
    it and override what differs."""

    per_implementation = False
    quick: Mapping[str, Any] = {}
    needs = Needs()

    def goals(self, results: Mapping[str, Any]) -> list[str]:
        return []


def name(scenario: Scenario) -> str:
    return scenario.names[0]


def chosen(scenarios: Iterable[Scenario], selected: Iterable[str]) -> list[Scenario]:
    """The scenarios ``selected`` names, in registry order; unknown names raise ValueError."""
    want = set(selected)
    known = {n for s in scenarios for n in s.names}
    if want - known:
        raise ValueError(f"unknown scenarios: {', '.join(sorted(want - known))}")
    return [s for s in scenarios if want & set(s.names)]


def options(
    scenarios: Sequence[Scenario], settings: Iterable[str], *, quick: bool
) -> dict[str, Any]:
    """Every scenario's options: its defaults, its quick overrides under ``quick``, then
    each ``NAME.FIELD=VALUE`` of ``settings`` (values parsed by the field's type: ``int``,
    ``float``, ``str``, ``bool``, or a comma-separated tuple of those).

    Raises ValueError naming the setting for an unknown scenario or field, or a value of
    the wrong type.
    """
    by_name = {n: s for s in scenarios for n in s.names}
    changes: dict[str, dict[str, Any]] = {
        name(s): dict(s.quick) if quick else {} for s in scenarios
    }
    for item in settings:
        key, sep, text = item.partition("=")
        scenario_name, dot, field_name = key.partition(".")
        if not sep or not dot:
            raise ValueError(f"--set {item}: expected NAME.FIELD=VALUE")
        scenario = by_name.get(scenario_name)
        if scenario is None:
            raise ValueError(f"--set {item}: no scenario is named {scenario_name}")
        types = typing.get_type_hints(type(scenario.defaults))
        if field_name not in types:
            known = ", ".join(sorted(types))
            raise ValueError(f"--set {item}: {scenario_name} has no option {field_name} ({known})")
        try:
            changes[name(scenario)][field_name] = parse(types[field_name], text)
        except ValueError as err:
            raise ValueError(f"--set {item}: {err}") from None
    return {name(s): dataclasses.replace(s.defaults, **changes[name(s)]) for s in scenarios}


def parse(kind: Any, text: str) -> Any:
    """``text`` as a value of type ``kind`` (see :func:`options`); ValueError otherwise."""
    if typing.get_origin(kind) is tuple:
        (item, *_) = typing.get_args(kind)
        return tuple(parse(item, part.strip()) for part in text.split(",") if part.strip())
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"not a bool: {text!r}")
    if kind in (int, float, str):
        return kind(text)
    raise ValueError(f"options of type {kind} cannot be set")


def record(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options as a results file records them (tuples as lists)."""
    return {k: json_ready(dataclasses.asdict(v)) for k, v in options.items()}


def json_ready(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [json_ready(v) for v in value]
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    return value
