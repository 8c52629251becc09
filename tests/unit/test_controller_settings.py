"""Typed settings per controller: each package builds a frozen dataclass of its settings
once from the parsed flags, and a flag is read back with the type of its default."""

from __future__ import annotations

import dataclasses

import pytest

from cbop.cli import build_parser, controller_settings
from cbop.clusterbundle.controller import ClusterBundleSettings
from cbop.configbundle.controller import ConfigBundleSettings
from cbop.controllers import CONTROLLERS
from cbop.rollout.controller import RolloutSettings
from cbop.runtime.definition import Flag, FlagValues

GRACE = Flag("revision-grace", 60.0, "seconds")
SWITCH = Flag("switch", False, "on or off")
COUNT = Flag("count", 3, "how many")


def test_a_flag_reads_as_the_type_of_its_default() -> None:
    flags = FlagValues({"revision_grace": 5, "switch": True, "count": 7})
    assert flags[GRACE] == 5.0
    assert isinstance(flags[GRACE], float)
    assert flags[SWITCH] is True
    assert flags[COUNT] == 7
    assert FlagValues()[GRACE] == 60.0  # missing: its default


@pytest.mark.parametrize(
    ("flag", "value"),
    [(GRACE, "5"), (SWITCH, 1), (COUNT, True), (COUNT, 1.5)],
    ids=["string-for-a-number", "int-for-a-bool", "bool-for-an-int", "float-for-an-int"],
)
def test_a_value_of_another_type_is_refused_naming_the_flag(flag: Flag[int], value: object) -> None:
    with pytest.raises(TypeError, match=f"--{flag.name} takes a"):
        FlagValues({flag.dest: value})[flag]


def test_each_controller_builds_its_frozen_settings_from_the_command_line() -> None:
    parsed = controller_settings(
        build_parser().parse_args(["--revision-grace=90", "--no-rollout", "--cluster-bundles"])
    )
    built = {
        c.definition.name: c.settings
        for c in (d.configure(FlagValues(parsed)) for d in CONTROLLERS)
    }
    # The shipped controllers' settings (a controller added later brings its own).
    shipped = {name: built[name] for name in ("configbundle", "rollout", "clusterbundle")}
    assert shipped == {
        "configbundle": ConfigBundleSettings(revision_grace_seconds=90.0, rollout=False),
        "rollout": RolloutSettings(enabled=False),
        "clusterbundle": ClusterBundleSettings(enabled=True),
    }
    for settings in built.values():
        field = dataclasses.fields(settings)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(settings, field, None)
