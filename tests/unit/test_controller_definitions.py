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


def _named(rules: list[dict[str, Any]] | tuple[PolicyRule, ...]) -> set[tuple[Any, ...]]:
    """(group, resource, verb, resource names) of each grant, from YAML rules or PolicyRules."""
    out: set[tuple[Any, ...]] = set()
    for rule in rules:
        if isinstance(rule, PolicyRule):
            groups, resources, verbs = rule.api_groups, rule.resources, rule.verbs
            names = tuple(rule.resource_names)
        else:
            groups, resources, verbs = rule["apiGroups"], rule["resources"], rule["verbs"]
            names = tuple(rule.get("resourceNames") or ())
        out |= {(g, r, v, names) for g in groups for r in resources for v in verbs}
    return out


#: Each opt-in's roles in the manifests: its ClusterRole, and its Role in cbop's namespace.
OPT_IN_ROLES = {
    "secrets": ("manifests/secrets/cluster_role.yaml", "manifests/secrets/digest_key_role.yaml"),
}


def test_each_opt_in_ships_exactly_its_rbac_in_roles_of_its_own() -> None:
    """With the flag off nothing of it is granted: its rules are in no base role (the test
    above), and the Component that adds the flag (manifests/<flag>/) holds them all."""
    opt_ins = [o for d in CONTROLLERS for o in d.opt_ins]
    assert {o.flag.name for o in opt_ins} == set(OPT_IN_ROLES)
    base = _granted(
        yaml.safe_load((REPO / "manifests/rbac/cluster_role.yaml").read_text())["rules"]
    )
    for opt_in in opt_ins:
        cluster, namespaced = (
            yaml.safe_load((REPO / p).read_text()) for p in OPT_IN_ROLES[opt_in.flag.name]
        )
        assert (cluster["kind"], namespaced["kind"]) == ("ClusterRole", "Role")
        assert _named(cluster["rules"]) == _named(opt_in.rbac)
        assert _named(namespaced["rules"]) == _named(opt_in.namespace_rbac)
        assert not base & {(g, r, v) for g, r, v, _ in _named(opt_in.rbac)}
        patch = yaml.safe_load(
            (REPO / "manifests" / opt_in.flag.name / "deployment_patch.yaml").read_text()
        )
        assert {"op": "add", "path": "/spec/template/spec/containers/0/args/-",
                "value": f"--{opt_in.flag.name}"} in patch  # fmt: skip


def test_the_secrets_flag_is_off_by_default_and_turns_its_informers_on() -> None:
    parser = build_parser()
    off = controller_settings(parser.parse_args([]))
    on = controller_settings(parser.parse_args(["--secrets", "--secrets-namespace", "a, b"]))
    (secrets,) = [o for d in CONTROLLERS for o in d.opt_ins if o.flag.name == "secrets"]
    assert not secrets.on(off)
    assert secrets.on(on)
    assert on["secrets_namespace"] == "a, b"
