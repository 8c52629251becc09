"""A ClusterConfigBundle's namespaceSelector means what a metav1.LabelSelector means,
and its template is the stamped ConfigBundle's spec with the default ConfigMap name."""

from __future__ import annotations

from typing import Any

import pytest

from cbop.api import SelectorError, parse_selector, template_of

TEAM = {"team": "a", "tier": "web"}


@pytest.mark.parametrize(
    ("selector", "labels", "selected"),
    [
        ({}, {}, True),
        ({}, None, True),
        ({"matchLabels": {"team": "a"}}, TEAM, True),
        ({"matchLabels": {"team": "b"}}, TEAM, False),
        ({"matchLabels": {"team": "a", "tier": "db"}}, TEAM, False),
        ({"matchLabels": {"team": "a"}}, None, False),
        (
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
            TEAM,
            True,
        ),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["b"]}]}, TEAM, False),
        ({"matchExpressions": [{"key": "x", "operator": "In", "values": ["a"]}]}, TEAM, False),
        (
            {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]},
            TEAM,
            False,
        ),
        ({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["a"]}]}, TEAM, True),
        ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, TEAM, True),
        ({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, TEAM, False),
        ({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, TEAM, True),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, TEAM, False),
        (
            {
                "matchLabels": {"tier": "web"},
                "matchExpressions": [{"key": "team", "operator": "Exists"}],
            },
            TEAM,
            True,
        ),
        (
            {
                "matchLabels": {"tier": "web"},
                "matchExpressions": [{"key": "team", "operator": "DoesNotExist"}],
            },
            TEAM,
            False,
        ),
    ],
    ids=[
        "empty-selects-all",
        "empty-selects-unlabelled",
        "label-equal",
        "label-differs",
        "all-labels-needed",
        "label-on-unlabelled",
        "in",
        "in-other-value",
        "in-absent-key",
        "notin-present",
        "notin-absent-key-holds",
        "exists",
        "exists-absent",
        "doesnotexist",
        "doesnotexist-present",
        "labels-and-expressions",
        "labels-and-failing-expression",
    ],
)
def test_the_selector_matches_as_a_label_selector(
    selector: dict[str, Any], labels: dict[str, str] | None, selected: bool
) -> None:
    assert parse_selector(selector).matches(labels) is selected


@pytest.mark.parametrize(
    "selector",
    [
        None,
        [],
        {"matchLabels": {"a": 1}},
        {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In"}]},
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["b"]}]},
        {"matchExpressions": [{"operator": "Exists"}]},
    ],
    ids=[
        "null",
        "list",
        "non-string-label",
        "unknown-operator",
        "in-without-values",
        "exists-with-values",
        "no-key",
    ],
)
def test_an_invalid_selector_is_refused(selector: Any) -> None:
    with pytest.raises(SelectorError):
        parse_selector(selector)


def test_the_template_defaults_the_configmap_name_to_the_cluster_bundle_name() -> None:
    template: dict[str, Any] = {"data": {"a": "b"}}
    ccb = {"metadata": {"name": "trusted-ca"}, "spec": {"template": template}}
    assert template_of(ccb) == {"data": {"a": "b"}, "configMapName": "trusted-ca"}
    assert "configMapName" not in template
    named = {"metadata": {"name": "x"}, "spec": {"template": {"configMapName": "y"}}}
    assert template_of(named)["configMapName"] == "y"
