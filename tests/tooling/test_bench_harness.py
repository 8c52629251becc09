"""The operator benchmark's harness: the registry, options, and the before/after counts.

No control plane: these are the parts of ``bench.operators`` that decide what runs with
which sizes, and how two sets of results are compared.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest
from bench.operators import pooling, scenario
from bench.operators.registry import DEFAULT, SCENARIOS
from bench.operators.scenarios import sources_report
from bench.operators.scenarios.burst import BURST
from bench.operators.scenarios.clusterbundles import CLUSTER_BUNDLES
from bench.operators.scenarios.scale import SCALE


def test_every_scenario_name_selects_one_scenario() -> None:
    names = [n for sc in SCENARIOS for n in sc.names]
    assert len(names) == len(set(names))
    assert {f"s{i}" for i in range(1, 14)} | {"apf"} == set(names)
    assert set(DEFAULT) <= set(names)


def test_quick_overrides_are_options_of_their_scenario() -> None:
    for sc in SCENARIOS:
        fields = {f.name for f in dataclasses.fields(sc.defaults)}
        assert set(sc.quick) <= fields, sc.names
        hints = typing.get_type_hints(type(sc.defaults))
        for name, value in sc.quick.items():
            kind = typing.get_origin(hints[name]) or hints[name]
            assert isinstance(value, kind), (sc.names, name)


def test_chosen_keeps_registry_order_and_refuses_unknown_names() -> None:
    assert scenario.chosen(SCENARIOS, ["s9", "s4", "s7"]) == [BURST, SCALE, CLUSTER_BUNDLES]
    with pytest.raises(ValueError, match="unknown scenarios: s14"):
        scenario.chosen(SCENARIOS, ["s1", "s14"])


def test_s12_audits_its_namespaces_in_full_before_s11s_rules_apply() -> None:
    # The first audit rule that matches a request decides its level.
    rules = "".join(sc.needs.audit_rules for sc in scenario.chosen(SCENARIOS, ["s11", "s12"]))
    full = rules.index("level: RequestResponse")
    assert full < rules.index("level: Metadata")
    assert '"s12-off", "s12-on"' in rules[full : rules.index("level: Metadata")]


def test_options_are_defaults_then_quick_then_settings_by_any_name() -> None:
    full = scenario.options(SCENARIOS, [], quick=False)
    assert full["s1"].sizes == (100, 1000, 3000)
    quick = scenario.options(SCENARIOS, ["s4.unrelated=500", "s7.n=300,600"], quick=True)
    assert quick["s1"].sizes == (100, 300)
    assert quick["s1"].unrelated == 500
    assert quick["s6"].n == (300, 600)
    assert quick["s9"] == full["s9"]
    assert scenario.options(SCENARIOS, ["s11.variants=on"], quick=False)["s11"].variants == ("on",)
    assert scenario.options(SCENARIOS, ["s2.rate=2.5"], quick=False)["s2"].rate == 2.5


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("s9.namespaces", "expected NAME.FIELD=VALUE"),
        ("s99.namespaces=1", "no scenario is named s99"),
        ("s9.nodes=1", "s9 has no option nodes"),
        ("s9.namespaces=many", "invalid literal"),
    ],
)
def test_a_bad_setting_is_refused_with_its_name(setting: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        scenario.options(SCENARIOS, [setting], quick=False)
    assert setting in str(err.value)


def test_flatten_keys_records_by_identity() -> None:
    doc = {
        "s1": [{"impl": "cbop", "n": 100, "converged": 100, "latencies": [0.1, 0.2]}],
        "s9": {"template": {"modified_per_namespace": {"1": 50}}},
    }
    assert dict(pooling.flatten(doc)) == {
        "s1[impl=cbop,n=100].impl": "cbop",
        "s1[impl=cbop,n=100].n": 100,
        "s1[impl=cbop,n=100].converged": 100,
        "s9.template.modified_per_namespace.1": 50,
    }


def test_counts_table_tells_equal_counts_from_different_ones() -> None:
    def doc(writes: float, seconds: float) -> dict[str, typing.Any]:
        requests = {"POST|configmaps|": writes, "WATCH|configmaps|": 3.0, "PUT|leases|": 9.0}
        return {"s1": [{"impl": "cbop", "n": 100, "requests": requests, "seconds": seconds}]}

    lines = pooling.counts_table(
        {"before": [doc(100, 1.0)], "after": [doc(100, 2.0), doc(101, 1.5)]}
    )
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines[2:]}
    # Watches and other resources' requests depend on time, not on the harness.
    assert set(rows) == {"s1[impl=cbop,n=100].requests.POST|configmaps|"}
    assert rows["s1[impl=cbop,n=100].requests.POST|configmaps|"].endswith("| differs |")
    same = pooling.counts_table({"before": [doc(100, 1.0)], "after": [doc(100, 2.0)]})
    assert same[2].endswith("| same |")
    sides = {"before": [doc(100, 1.0)], "after": [doc(100, 2.0), doc(100, 1.5)]}
    timings = pooling.timings_table(sides)
    assert timings[0].endswith("| before | after | after / before |")
    assert timings[2] == "| s1[impl=cbop,n=100].seconds | 1 | 3.500 | 3.50x |"
    runs = pooling.pooled([doc(100, 1.0), doc(101, 2.0)])
    assert "| s1[impl=cbop,n=100].requests.POST|configmaps| | 100 / 101 | differs |" in runs
    assert "| s1[impl=cbop,n=100].seconds | 3 |" in runs


def test_s10_merge_lists_its_variants_in_order_and_refuses_others() -> None:
    def variants(value: str) -> list[str]:
        options = scenario.options(SCENARIOS, [f"s10.merge={value}"], quick=False)["s10"]
        return typing.cast(list[str], options.variants)

    assert scenario.options(SCENARIOS, [], quick=False)["s10"].variants == ["control", "on"]
    assert variants("on") == ["on"]
    assert variants("on, control") == ["on", "control"]
    assert variants("off") == []
    with pytest.raises(ValueError, match="'merged'"):
        variants("control,merged")


def test_s10_merge_cost_is_on_over_control_else_over_the_first_change() -> None:
    def change(cpu: float) -> dict[str, typing.Any]:
        return {"change": {"cpu_seconds_status": cpu}}

    first = {"change": {"cpu_seconds_status": 1.0}}
    both = {"cbop": {**first, "merge": {"control": change(0.8), "on": change(0.88)}}}
    against, extra = sources_report.merge_cost(both) or ("", 0.0)
    assert against == "control"
    assert abs(extra - 0.10) < 1e-9
    alone = {"cbop": {**first, "merge": {"on": change(1.25)}}}
    assert sources_report.merge_cost(alone) == ("first change", 0.25)
    assert sources_report.merge_cost({"cbop": {**first, "merge": {"control": change(1)}}}) is None
