"""The source reader alone: the versions of a bundle's sources, and its spec composed.

:class:`cbop.configbundle.sources.SourceReader` over a CacheLister of source
ConfigMaps; no reconciler (tests/unit/test_sources_reconcile.py has the reconciles).
"""

from __future__ import annotations

from typing import Any

from cbop.api import BundleSpec, SpecError, parse_spec
from cbop.configbundle.sources import SourceReader
from cbop_testing.fakekube import CacheLister
from cbop_testing.objects import bundle


def source(name: str, namespace: str = "demo", **data: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": "5",
            "labels": {"cbop.dev/source": "true"},
            "annotations": {"cbop.dev/share-with": "*"},
        },
        "data": data,
    }


def reading(*names: str, namespace: str | None = None) -> dict[str, Any]:
    refs = [
        {"configMap": {"name": n, **({"namespace": namespace} if namespace else {})}} for n in names
    ]
    return bundle({"sources": refs})


def test_a_bundle_without_sources_has_no_inputs_and_its_spec_as_it_is() -> None:
    reader = SourceReader(CacheLister([source("base", a="1")]))
    b = bundle({"data": {"a": "1"}})
    assert reader.inputs(b) is None
    spec = parse_spec(b)
    assert reader.compose(b, spec) is spec


def test_inputs_are_the_versions_of_the_sources_found_in_spec_order() -> None:
    cache = CacheLister([source("base", a="1")])
    reader = SourceReader(cache)
    b = reading("missing", "base")
    assert reader.inputs(b) == (("demo", "missing"), ("demo", "base", "uid-base", "5"))
    cache.add(
        {
            **source("base", a="2"),
            "metadata": {**source("base")["metadata"], "resourceVersion": "6"},
        }
    )
    assert reader.inputs(b) == (("demo", "missing"), ("demo", "base", "uid-base", "6"))


def test_without_a_source_cache_nothing_is_found() -> None:
    reader = SourceReader()
    b = reading("base")
    assert reader.inputs(b) == (("demo", "base"),)
    composed = reader.compose(b, parse_spec(b))
    assert isinstance(composed, SpecError)
    assert composed.spec is not None  # its deletionPolicy is still honoured


def test_compose_puts_the_sources_content_into_the_spec() -> None:
    reader = SourceReader(CacheLister([source("base", a="1", b="2")]))
    b = reading("base")
    composed = reader.compose(b, parse_spec(b))
    assert isinstance(composed, BundleSpec)
    assert composed.data == {"a": "1", "b": "2"}


def test_a_source_outside_the_scope_is_not_found_and_the_scope_is_named() -> None:
    reader = SourceReader(CacheLister([source("base", "other", a="1")]), scope=["demo"])
    b = reading("base", namespace="other")
    composed = reader.compose(b, parse_spec(b))
    assert isinstance(composed, SpecError)
    assert "demo" in composed.message
