"""The CRDs: written from one source, every served version with the very same schema.

Conversion strategy None changes ``apiVersion`` alone, so "nothing is lost through
either version" holds exactly when every served version has the same schema: these
tests pin that, field for field, and pin the versions cbop itself uses.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cbop.api import API_VERSION, DEPRECATED_VERSIONS, GROUP, VERSION
from cbop.kube import CONFIGBUNDLES
from cbop_testing.apiexamples import FULL_CONFIGBUNDLE_SPEC, FULL_SECRET_BUNDLE_SPEC

REPO = Path(__file__).resolve().parents[2]
CRDS = sorted((REPO / "manifests" / "crd").glob("*.yaml"))


def _crd(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded


def test_the_crds_are_written_from_their_sources() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "hack" / "gen-crds.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for path in CRDS:
        assert (REPO / "charts" / "cbop" / "crds" / path.name).read_text() == path.read_text()


@pytest.mark.parametrize("path", CRDS, ids=lambda p: p.name)
def test_every_served_version_has_the_same_schema_and_one_is_stored(path: Path) -> None:
    spec = _crd(path)["spec"]
    assert spec["group"] == GROUP
    assert spec["conversion"] == {"strategy": "None"}
    versions = spec["versions"]
    assert all(v["served"] for v in versions)
    assert [v["name"] for v in versions if v["storage"]] == [VERSION]
    first = versions[0]
    for version in versions[1:]:
        for part in ("schema", "subresources", "additionalPrinterColumns"):
            assert version.get(part) == first.get(part), f"{version['name']}: {part}"
    deprecated = [v["name"] for v in versions if v.get("deprecated")]
    # ClusterConfigBundles were born at v1beta1: nothing of theirs is deprecated.
    expected = list(DEPRECATED_VERSIONS) if path.name == "cbop.dev_configbundles.yaml" else []
    assert deprecated == expected
    for version in versions:
        if version.get("deprecated"):
            assert f"use {API_VERSION}" in version["deprecationWarning"]


def test_cbop_reads_and_writes_the_storage_version() -> None:
    assert CONFIGBUNDLES.api_version == f"{GROUP}/{VERSION}" == API_VERSION


_UNSET = object()


def _fields(schema: dict[str, Any], value: Any = _UNSET, path: str = "spec") -> set[str]:
    """The schema's properties (dotted paths, lists as ``[]``) that ``value`` does not set,
    each with everything under it."""
    missing: set[str] = set()
    if schema.get("type") == "object" and "properties" in schema:
        given = value if isinstance(value, dict) else {}
        for name, sub in schema["properties"].items():
            if name not in given:
                missing.add(f"{path}.{name}")
            missing |= _fields(sub, given.get(name, _UNSET), f"{path}.{name}")
    elif schema.get("type") == "array":
        items = value if isinstance(value, list) and value else [_UNSET]
        missing |= set.intersection(*(_fields(schema["items"], i, f"{path}[]") for i in items))
    return missing


def test_the_full_examples_set_every_field_of_the_spec() -> None:
    """The version round trip (tests/e2e/test_api_versions.py) covers every field, nested
    ones too (the target's, each kind of source's)."""
    (path,) = [p for p in CRDS if p.name == "cbop.dev_configbundles.yaml"]
    schema = _crd(path)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    missing = _fields(schema, FULL_CONFIGBUNDLE_SPEC) & _fields(schema, FULL_SECRET_BUNDLE_SPEC)
    assert missing == set()


def test_the_cluster_bundle_template_is_the_configbundle_spec() -> None:
    """spec.template is written from the ConfigBundle's spec, so the two never drift."""
    by_name = {p.name: _crd(p) for p in CRDS}
    bundle = by_name["cbop.dev_configbundles.yaml"]["spec"]["versions"][-1]["schema"]
    cluster = by_name["cbop.dev_clusterconfigbundles.yaml"]["spec"]
    assert cluster["scope"] == "Cluster"
    assert cluster["names"]["shortNames"] == ["ccb"]
    schema = cluster["versions"][0]["schema"]["openAPIV3Schema"]
    template = dict(schema["properties"]["spec"]["properties"]["template"])
    spec = dict(bundle["openAPIV3Schema"]["properties"]["spec"])
    template.pop("description")
    spec.pop("description")
    assert template == spec
    assert "$ref" not in str(schema)
