"""Each controller declares its flags, informers and RBAC in one place, and the process
and the shipped manifests follow those declarations."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from cbop.cli import build_parser, controller_settings
from cbop.controllers import CONTROLLERS
from cbop.manager import PROCESS_RBAC, enabled_controllers
from cbop.runtime.definition import PolicyRule

REPO = Path(__file__).resolve().parents[2]


def _granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups") or ()
        for resource in rule.get("resources") or ()
        for verb in rule.get("verbs") or ()
    }


def _needed(rules: tuple[PolicyRule, ...]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.api_groups
        for resource in rule.resources
        for verb in rule.verbs
    }


def _chart_cluster_role() -> dict[str, Any]:
    """The chart's ClusterRole rendered with every condition true (text substitution:
    control lines dropped, inline expressions replaced)."""
    text = (REPO / "charts/cbop/templates/clusterrole.yaml").read_text()
    lines = [line for line in text.splitlines() if not re.fullmatch(r"\s*\{\{-?.*\}\}\s*", line)]
    rendered = re.sub(r"\{\{[^}]*\}\}", "x", "\n".join(lines))
    role: dict[str, Any] = yaml.safe_load(rendered)
    return role


@pytest.mark.parametrize(
    "role",
    [
        yaml.safe_load((REPO / "manifests/rbac/cluster_role.yaml").read_text()),
        _chart_cluster_role(),
    ],
    ids=["manifests", "chart"],
)
def test_the_shipped_cluster_role_grants_exactly_what_the_definitions_declare(
    role: dict[str, Any],
) -> None:
    needed = _needed(PROCESS_RBAC)
    for definition in CONTROLLERS:
        needed |= _needed(definition.rbac)
    granted = _granted(role["rules"])
    assert needed - granted == set(), "declared but not granted"
    assert granted - needed == set(), "granted but declared by no controller"


def test_every_controller_flag_is_offered_with_its_default_and_reaches_the_settings() -> None:
    parser = build_parser()
    args = parser.parse_args([])
    settings = controller_settings(args)
    for definition in CONTROLLERS:
        for flag in definition.flags:
            assert settings[flag.dest] == flag.default
            assert any(f"--{flag.name}" in a.option_strings for a in parser._actions)
    assert {d.name for d in enabled_controllers(settings)} == {
        "configbundle",
        "rollout",
        "clusterbundle",
    }
    off = controller_settings(parser.parse_args(["--no-rollout", "--no-cluster-bundles"]))
    assert {d.name for d in enabled_controllers(off)} == {"configbundle"}


def test_controller_names_are_unique_and_declare_their_informers() -> None:
    names = [d.name for d in CONTROLLERS]
    assert len(set(names)) == len(names)
    for definition in CONTROLLERS:
        assert definition.resources, definition.name
        assert definition.controllers >= 1
