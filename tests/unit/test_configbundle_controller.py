"""The ConfigBundle controller's key mapping: a managed ConfigMap wakes every bundle
that keeps a ConfigMap of its name (case 20: a name handed from one bundle to another
is taken as soon as the old ConfigMap goes, not at the 15 s recheck)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cbop.configbundle import controller as configbundle
from cbop.informers import SharedInformerFactory
from cbop.keys import CONFIGMAP_NAME_INDEX
from cbop.kube import CONFIGBUNDLES
from cbop.runtime import Scope
from cbop_testing.fakekube import FakeKube


def bundle(namespace: str, name: str, config_map_name: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"data": {"k": "v"}}
    if config_map_name is not None:
        spec["configMapName"] = config_map_name
    return {"metadata": {"namespace": namespace, "name": name}, "spec": spec}


def configmap(namespace: str, name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}}


@pytest.fixture
def scope() -> Iterator[Scope]:
    kube = FakeKube()
    informers = SharedInformerFactory(kube, namespaces=["a", "b"], resync_period=0)
    made = Scope(kube, informers=informers)
    yield made
    informers.shutdown()


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (bundle("a", "web"), ["a/web"]),
        (bundle("a", "web", "shared"), ["a/shared"]),
        (bundle("a", "web", "Not_A_Name"), []),
        ({"metadata": {"namespace": "a", "name": "x"}, "spec": "junk"}, []),
    ],
    ids=["default-name", "configMapName", "invalid-name", "invalid-spec"],
)
def test_the_index_value_is_the_key_of_the_configmap_a_bundle_keeps(
    obj: dict[str, Any], expected: list[str]
) -> None:
    assert configbundle.index_by_configmap_name(obj) == expected


def test_a_configmap_event_maps_to_every_bundle_keeping_its_name(scope: Scope) -> None:
    configbundle.setup(scope)
    informers = scope.informers.informers_for(CONFIGBUNDLES)
    assert all(CONFIGMAP_NAME_INDEX in i.indexer().index_names() for i in informers.values())
    for obj in (
        bundle("a", "old", "shared"),
        bundle("a", "new", "shared"),
        bundle("a", "shared"),  # its default name is the same ConfigMap
        bundle("a", "other"),
        bundle("b", "elsewhere", "shared"),  # same name, another namespace
    ):
        informers[obj["metadata"]["namespace"]].indexer().update(obj)
    naming = configbundle.bundles_naming(scope.lister(CONFIGBUNDLES))
    assert naming(configmap("a", "shared")) == ["a/new", "a/old", "a/shared"]
    assert naming(configmap("b", "shared")) == ["b/elsewhere"]
    assert naming(configmap("a", "nobody")) == []
