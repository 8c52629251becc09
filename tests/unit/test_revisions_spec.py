"""``spec.revisions``: the parse, the name of a revision and its limits."""

from __future__ import annotations

from typing import Any

import pytest

from cbop.api import SpecError
from cbop.api.revisions import (
    MAX_REVISIONED_NAME,
    RevisionsSpec,
    parse_revisions,
    revision_name,
)

HASH = "sha256:7c9d2f41ab" + "0" * 54


def bundle(spec: dict[str, Any], name: str = "app") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "demo"}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({}, RevisionsSpec(False, 3), id="absent-means-off"),
        pytest.param({"revisions": {}}, RevisionsSpec(False, 3), id="empty-defaults"),
        pytest.param({"revisions": {"enabled": True}}, RevisionsSpec(True, 3), id="on"),
        pytest.param(
            {"revisions": {"enabled": True, "keep": 20}}, RevisionsSpec(True, 20), id="max"
        ),
        pytest.param(
            {"revisions": {"enabled": False, "keep": 1}}, RevisionsSpec(False, 1), id="min"
        ),
    ],
)
def test_parse(spec: dict[str, Any], expected: RevisionsSpec) -> None:
    assert parse_revisions(bundle(spec)) == expected


@pytest.mark.parametrize(
    ("revisions", "words"),
    [
        pytest.param({"keep": 0}, "from 1 to 20, not 0", id="keep-0"),
        pytest.param({"keep": 21}, "from 1 to 20, not 21", id="keep-21"),
        pytest.param({"keep": True}, "from 1 to 20", id="keep-bool"),
        pytest.param({"enabled": "yes"}, "enabled must be true or false", id="enabled-str"),
        pytest.param([], "must be an object", id="not-object"),
    ],
)
def test_bad_input_is_refused_naming_the_field(revisions: Any, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        parse_revisions(bundle({"revisions": revisions}))


def test_a_name_too_long_for_the_suffix_is_refused_naming_the_limit() -> None:
    longest = "a" * MAX_REVISIONED_NAME
    assert MAX_REVISIONED_NAME == 242
    on = {"revisions": {"enabled": True}}
    assert parse_revisions(bundle({**on, "configMapName": longest})).enabled
    with pytest.raises(SpecError, match=r"spec.configMapName has 243 characters.*at most 242"):
        parse_revisions(bundle({**on, "configMapName": longest + "a"}))
    with pytest.raises(SpecError, match=r"the bundle's name has 250 characters.*at most 242"):
        parse_revisions(bundle(on, name="b" * 250))
    # Off, the same name is fine: no revision is made.
    assert not parse_revisions(bundle({"configMapName": longest + "a"})).enabled


def test_revision_name_is_the_plain_name_and_ten_hex_digits() -> None:
    assert revision_name("web-conf", HASH) == "web-conf-7c9d2f41ab"
    assert len(revision_name("a" * MAX_REVISIONED_NAME, HASH)) == 253
    with pytest.raises(ValueError, match="not a sha256"):
        revision_name("web-conf", "md5:7c9d2f41ab")
