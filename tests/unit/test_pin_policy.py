"""The pod-pinning admission policy agrees with the pins cbop writes (docs/revisions.md).

The shipped MutatingAdmissionPolicy (manifests/revisions/) reads the pins ConfigMap by
name and its entries by the pod's template digest; these tests tie its CEL to the names
and the key format that cbop.api.revisions defines, and the chart's copy to the
manifest's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from cbop.api.revisions import PARAMS_NAME, PINS_KEY_DIGITS, owner_pins_key, pins_key
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
    (pins,) = [v for v in policy["spec"]["variables"] if v["name"] == "pins"]
    assert pins["expression"] == "params.data[variables.key].split('\\n')"
