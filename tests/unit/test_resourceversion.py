"""resourceVersion ordering (KEP-5504): decimal, no leading zeros, else not comparable."""

from __future__ import annotations

import pytest

from cbop.resourceversion import compare_resource_versions, is_older


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("1", "1", 0),
        ("1", "2", -1),
        ("2", "1", 1),
        ("9", "10", -1),  # by length first: not as strings
        ("100", "99", 1),
        ("123456789012345678901234567890", "123456789012345678901234567891", -1),
        ("0", "1", -1),
    ],
)
def test_well_formed_versions_are_ordered_as_numbers(a: str, b: str, expected: int) -> None:
    assert compare_resource_versions(a, b) == expected
    assert compare_resource_versions(b, a) == -expected


@pytest.mark.parametrize("bad", ["", "01", "00", "-1", "+1", "1.0", " 1", "1a", "١٢"])
def test_anything_else_cannot_be_ordered(bad: str) -> None:
    assert compare_resource_versions(bad, "5") is None
    assert compare_resource_versions("5", bad) is None
    assert not is_older(bad, "5")
    assert not is_older("5", bad)


def test_is_older_is_strict() -> None:
    assert is_older("41", "42")
    assert not is_older("42", "42")
    assert not is_older("43", "42")
