"""The pod-pinning admission policy agrees with the pins cbop writes (docs/revisions.md).

The shipped MutatingAdmissionPolicy (manifests/revisions/) reads the pins ConfigMap by
name and its entries by the pod's template digest; these tests tie its CEL to the names
and the key format that cbop.api.revisions defines, and the chart's copy to the
manifest's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from cbop.api.revisions import (
    PARAMS_NAME,
    PINS_KEY_DIGITS,
    REVISION_HASH_DIGITS,
    owner_pins_key,
    parse_pins,
    pins_key,
    pins_value,
    revision_name,
)
from cbop.rollout import ANNOTATION_CONFIG_HASH

REPO = Path(__file__).parents[2]


def _manifest() -> list[dict[str, Any]]:
    text = (REPO / "manifests/revisions/pin_revisions.yaml").read_text()
    return list(yaml.safe_load_all(text))


def _chart() -> list[dict[str, Any]]:
    """The chart's template with its conditions true and the release name empty."""
    text = (REPO / "charts/cbop/templates/pin_revisions.yaml").read_text()
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


def test_the_policy_reads_the_pins_cbop_writes() -> None:
    policy, binding = _manifest()
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["paramRef"] == {
        "name": PARAMS_NAME,
        "parameterNotFoundAction": "Allow",
    }
    assert "namespace" not in binding["spec"]["paramRef"]  # the pod's own namespace
    assert policy["spec"]["failurePolicy"] == "Ignore"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}
    ]
    # The key the CEL takes from the annotation is pins_key's: skip "sha256:", take 40.
    digest = "sha256:" + "0123456789abcdef" * 4
    start = len("sha256:")
    assert digest[start : start + PINS_KEY_DIGITS] == pins_key(digest)
    cel = re.sub(r"\s+", " ", " ".join(str(c["expression"]) for c in _expressions(policy)))
    annotation = f"object.metadata.annotations['{ANNOTATION_CONFIG_HASH}']"
    key_expr = f"{annotation}.substring({start}, {start + PINS_KEY_DIGITS})"
    assert cel.count(f"{annotation}.substring(") == cel.count(key_expr) == 2
    assert f"size({annotation}) >= {start + PINS_KEY_DIGITS}" in cel


def _expressions(policy: dict[str, Any]) -> list[dict[str, Any]]:
    spec = policy["spec"]
    return [*spec["matchConditions"], *spec["variables"]]


def _mutations(policy: dict[str, Any]) -> list[str]:
    """The JSONPatch expressions of ``policy``, whitespace collapsed."""
    out = []
    for mutation in policy["spec"]["mutations"]:
        assert mutation["patchType"] == "JSONPatch"
        out.append(re.sub(r"\s+", " ", mutation["jsonPatch"]["expression"]).strip())
    return out


def _patches(expression: str) -> list[tuple[str, str, str]]:
    """(op, path with ``{i}``, ``{j}`` for indexes, value) of each JSONPatch in ``expression``."""
    found = []
    for op, path, value in re.findall(
        r"JSONPatch\{ op: '(\w+)', path: (.*?), value: (.*?)\}", expression
    ):
        flat = re.sub(r"' \+ string\((\w)\) \+ '", r"{\1}", path.replace("' + '", ""))
        found.append((op, flat.strip("'").replace("' '", ""), value))
    return found


#: Every place a new pod names a ConfigMap (ephemeral containers are never in a CREATE),
#: and the field the name is read from.
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
    # Each name is replaced only when the pins have it, and read where it is replaced.
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
    return variables["lines"] + " " + variables["pins"]


def test_the_policy_reads_an_entry_as_cbop_writes_and_parses_it() -> None:
    policy, _ = _manifest()
    cel = _pins_expression(policy)
    # Lines split on newline, trimmed, the plain name before the first "=".
    assert ".split('\\n').map(l, l.trim()).filter(l, l.indexOf('=') > 0)" in cel
    # Of lines naming the same ConfigMap, the last counts (as parse_pins).
    assert "variables.lines.all(k, m, k <= i || !m.startsWith(" in cel
    assert parse_pins("a=a-0000000000\na=a-1111111111\n") == {"a": "a-1111111111"}
    # A line counts when its revision is "<plain>-" and the suffix revision_name adds.
    suffix = re.search(r"\.matches\('(.*?)'\)", cel)
    assert suffix is not None
    hex_digits = "0123456789abcdef" * 4
    pins = {"web-conf": revision_name("web-conf", "sha256:" + hex_digits), "a.b": "a.b-" + "f" * 10}
    for line in pins_value(pins).splitlines():
        plain, _, revision = line.partition("=")
        assert revision.startswith(plain + "-")
        assert re.fullmatch(suffix.group(1), revision[len(plain) + 1 :])
        assert len(revision) == len(plain) + 1 + REVISION_HASH_DIGITS
    assert parse_pins(pins_value(pins)) == pins
    assert not re.fullmatch(suffix.group(1), "f" * (REVISION_HASH_DIGITS + 1))
    assert not re.fullmatch(suffix.group(1), "F" * REVISION_HASH_DIGITS)


def test_the_policy_does_not_mutate_what_a_pod_create_lacks() -> None:
    policy, _ = _manifest()
    text = " ".join(_mutations(policy)) + json.dumps(policy["spec"]["matchConditions"])
    assert "ephemeralContainers" not in text  # never set at CREATE
    assert policy["spec"]["reinvocationPolicy"] == "Never"


def test_the_policy_keys_a_pod_without_digest_as_cbop_keys_its_workload() -> None:
    """``Kind.name``: the controller's kind and name, a Deployment's through its ReplicaSet
    ``<deployment>-<pod-template-hash>``; the key chosen in the match condition and in
    the variable alike; a pod with a digest never keyed by its owner."""
    policy, _ = _manifest()
    assert owner_pins_key("Deployment", "web") == "Deployment.web"
    assert owner_pins_key("StatefulSet", "db") == "StatefulSet.db"
    assert owner_pins_key("DaemonSet", "agent") == "DaemonSet.agent"
    (condition,) = [c for c in policy["spec"]["matchConditions"] if c["name"] == "has-pins"]
    (key,) = [v for v in policy["spec"]["variables"] if v["name"] == "key"]
    for expression in (condition["expression"], key["expression"]):
        cel = re.sub(r"\s+", " ", str(expression))
        assert "'Deployment.' + r.name.substring(0, size(r.name) - " in cel
        assert "size(object.metadata.labels['pod-template-hash']) - 1)" in cel
        assert "r.name.endsWith('-' + object.metadata.labels['pod-template-hash'])" in cel
        assert "r.kind + '.' + r.name" in cel
        assert "has(r.controller) && r.controller" in cel
        # The digest first: a pod with the annotation is keyed by it alone.
        assert cel.index(f"'{ANNOTATION_CONFIG_HASH}' in object.metadata.annotations) ?") < (
            cel.index("r.kind + '.' + r.name")
        )
    (lines,) = [v for v in policy["spec"]["variables"] if v["name"] == "lines"]
    assert re.sub(r"\s+", "", lines["expression"]).startswith("params.data[variables.key].split(")
