"""The pod-pinning admission policy agrees with the mapping cbop writes (docs/revisions.md).

The shipped MutatingAdmissionPolicy (manifests/revisions/pin_pods.yaml) reads the pod's
own ``cbop.dev/revisions`` annotation on pods labelled ``cbop.dev/pinned: "true"``;
these tests tie its CEL to what :mod:`cbop.revisions.model` writes and parses, and the
chart's copy to the manifest's. tests/e2e/test_pin_policy.py runs it on an API server.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from cbop.api.revisions import REVISION_HASH_DIGITS, revision_name
from cbop.revisions.model import (
    ANNOTATION_REVISIONS,
    LABEL_PINNED,
    format_mapping,
    parse_mapping,
    valid_pair,
)
from cbop.revisions.policy import POLICY_LABEL, POLICY_NAME

REPO = Path(__file__).parents[2]


def _manifest() -> list[dict[str, Any]]:
    text = (REPO / "manifests/revisions/pin_pods.yaml").read_text()
    return list(yaml.safe_load_all(text))


def _chart() -> list[dict[str, Any]]:
    """The chart's template with its conditions true and the release name empty."""
    text = (REPO / "charts/cbop/templates/pin_pods.yaml").read_text()
    lines = [line for line in text.splitlines() if not re.fullmatch(r"\s*\{\{-?.*\}\}\s*", line)]
    rendered = "\n".join(lines).replace("{{ .Release.Name }}-", "")
    return list(yaml.safe_load_all(rendered))


def test_the_chart_ships_the_manifests_policy_and_binding() -> None:
    manifest, chart = _manifest(), _chart()
    assert [d["kind"] for d in manifest] == [
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    ]
    assert [(d["kind"], d["metadata"]["name"], d["spec"]) for d in chart] == [
        (d["kind"], d["metadata"]["name"], d["spec"]) for d in manifest
    ]
    key, value = POLICY_LABEL
    assert all(d["metadata"]["labels"][key] == value for d in manifest + chart)


def test_the_policy_has_no_params_and_matches_pods_of_pinned_templates() -> None:
    policy, binding = _manifest()
    assert policy["metadata"]["name"] == binding["spec"]["policyName"] == POLICY_NAME
    assert "paramKind" not in policy["spec"]
    assert "paramRef" not in binding["spec"]
    constraints = policy["spec"]["matchConstraints"]
    assert constraints["objectSelector"] == {"matchLabels": {LABEL_PINNED: "true"}}
    assert constraints["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}
    ]
    (condition,) = [c for c in policy["spec"]["matchConditions"] if c["name"] == "has-revisions"]
    assert f"'{ANNOTATION_REVISIONS}' in object.metadata.annotations" in condition["expression"]
    assert policy["spec"]["failurePolicy"] == "Ignore"


def _mutations(policy: dict[str, Any]) -> list[str]:
    return [re.sub(r"\s+", " ", m["jsonPatch"]["expression"]) for m in policy["spec"]["mutations"]]


def _patches(expression: str) -> list[tuple[str, str, str]]:
    """(op, path pattern, value) of each JSONPatch literal in ``expression``."""
    out = []
    for op, path, value in re.findall(
        r"JSONPatch\{ op: '(\w+)', path: (.*?), value: (.*?)\}", expression
    ):
        pattern = re.sub(r"' \+ string\((\w)\) \+ '", r"{\1}", path.strip())
        out.append((op, pattern.strip("'").replace("' + '", ""), value.strip()))
    return out


_REFERENCES = {
    "/spec/volumes/{i}/configMap/name": "v.configMap.name",
    "/spec/volumes/{i}/projected/sources/{j}/configMap/name": "s.configMap.name",
    "/spec/containers/{i}/envFrom/{j}/configMapRef/name": "e.configMapRef.name",
    "/spec/containers/{i}/env/{j}/valueFrom/configMapKeyRef/name": (
        "e.valueFrom.configMapKeyRef.name"
    ),
    "/spec/initContainers/{i}/envFrom/{j}/configMapRef/name": "e.configMapRef.name",
    "/spec/initContainers/{i}/env/{j}/valueFrom/configMapKeyRef/name": (
        "e.valueFrom.configMapKeyRef.name"
    ),
}


def test_the_policy_replaces_the_name_of_every_kind_of_reference_and_nothing_else() -> None:
    policy, _ = _manifest()
    patches = [p for expression in _mutations(policy) for p in _patches(expression)]
    assert {path: value for _, path, value in patches} == {
        path: f"variables.pins[{field}]" for path, field in _REFERENCES.items()
    }
    assert len(patches) == len(_REFERENCES)
    # Only replaces of a name that is there: no entry is added, moved or removed.
    assert {op for op, _, _ in patches} == {"replace"}
    # Each name is replaced only when the mapping has it, and read where it is replaced.
    for expression in _mutations(policy):
        for _, _, value in _patches(expression):
            field = value.removeprefix("variables.pins[").removesuffix("]")
            assert f"{field} in variables.pins" in expression
            assert f"has({field})" in expression


def test_init_containers_are_pinned_as_containers_are() -> None:
    policy, _ = _manifest()
    volumes, containers, init = _mutations(policy)
    assert "initContainers" not in containers
    assert "containers" not in volumes
    as_init = containers.replace("containers", "initContainers")
    assert init == f"has(object.spec.initContainers) ? {as_init} : []"


def test_pods_that_read_configmaps_only_through_env_or_projections_are_matched() -> None:
    policy, _ = _manifest()
    condition = next(
        re.sub(r"\s+", " ", c["expression"])
        for c in policy["spec"]["matchConditions"]
        if c["name"] == "reads-configmaps"
    )
    for reads in (
        "has(v.configMap)",
        "has(v.projected)",
        "object.spec.containers.exists(c, has(c.envFrom) || has(c.env))",
        "object.spec.initContainers.exists(c, has(c.envFrom) || has(c.env))",
    ):
        assert reads in condition


def _pins_expression(policy: dict[str, Any]) -> str:
    variables = {
        v["name"]: re.sub(r"\s+", " ", v["expression"]) for v in policy["spec"]["variables"]
    }
    return variables["pairs"] + " " + variables["pins"]


def test_the_policy_reads_the_annotation_as_cbop_writes_and_parses_it() -> None:
    policy, _ = _manifest()
    cel = _pins_expression(policy)
    # Pairs split on commas, trimmed, the plain name before the first "=".
    assert f"object.metadata.annotations['{ANNOTATION_REVISIONS}']" in cel
    assert ".split(',').map(p, p.trim()).filter(p, p.indexOf('=') > 0)" in cel
    # Of pairs naming the same ConfigMap, the last counts (as parse_mapping).
    assert "variables.pairs.all(k, q, k <= i || !q.startsWith(" in cel
    assert parse_mapping("a=a-0000000000,a=a-1111111111") == {"a": "a-1111111111"}
    # A pair counts when its revision is "<plain>-" and the suffix revision_name adds.
    suffix = re.search(r"\.matches\('(.*?)'\)", cel)
    assert suffix is not None
    hex_digits = "0123456789abcdef" * 4
    pins = {"web-conf": revision_name("web-conf", "sha256:" + hex_digits), "a.b": "a.b-" + "f" * 10}
    for pair in format_mapping(pins).split(","):
        plain, _, revision = pair.partition("=")
        assert valid_pair(plain, revision)
        assert re.fullmatch(suffix.group(1), revision[len(plain) + 1 :])
        assert len(revision) == len(plain) + 1 + REVISION_HASH_DIGITS
    assert parse_mapping(format_mapping(pins)) == pins
    assert not re.fullmatch(suffix.group(1), "f" * (REVISION_HASH_DIGITS + 1))
    assert not re.fullmatch(suffix.group(1), "F" * REVISION_HASH_DIGITS)


def test_the_policy_does_not_mutate_what_a_pod_create_lacks() -> None:
    policy, _ = _manifest()
    text = " ".join(_mutations(policy)) + json.dumps(policy["spec"]["matchConditions"])
    assert "ephemeralContainers" not in text  # never set at CREATE
    assert policy["spec"]["reinvocationPolicy"] == "Never"
