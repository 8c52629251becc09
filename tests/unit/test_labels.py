"""Label values made from names: every name the API server accepts gives a valid label.

A name is a DNS subdomain of up to 253 characters; a label value holds at most 63
(apimachinery's ``IsValidLabelValue``, mirrored by :data:`VALID`). Every label cbop
derives from a name goes through :func:`cbop.api.label_value`: a ConfigMap's
``cbop.dev/bundle``, a stamp's ``cbop.dev/cluster-bundle`` and a shard group Lease's
``cbop.dev/shard-group``. Each is checked here with names of every length that matters,
and so is every comparison that looks the value up again.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest

from cbop.api import LABEL_BUNDLE, LABEL_CLUSTER_BUNDLE, label_value, parse_spec
from cbop.clusterbundle.decision import (
    Create,
    Delete,
    decide,
    decide_namespace,
    desired_stamp,
    is_controlled_by,
)
from cbop.clusterbundle.reconcile import index_by_cluster_bundle
from cbop.configbundle.desired import desired_configmap
from cbop.sharding.leases import GROUP_LABEL, group_labels, group_selector

#: apimachinery's label value: empty, or up to 63 characters, alphanumeric at both ends,
#: ``-``, ``_`` and ``.`` inside.
VALID = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
#: Names of every length that matters: short, 63 (the last kept whole), 64, the 66 of the
#: field case, one whose 54th character is a dot, and the longest name there is.
NAMES = [
    "ca",
    "a" * 63,
    "b" * 64,
    "platform-trusted-certificate-authorities-for-every-team-namespaces",
    "x" * 53 + ".y" + "z" * 20,
    "n" * 253,
]


def _valid(value: str) -> bool:
    return len(value) <= 63 and bool(VALID.match(value))


@pytest.mark.parametrize("name", NAMES, ids=[f"{len(n)}-chars" for n in NAMES])
def test_every_name_gives_a_valid_label_value(name: str) -> None:
    value = label_value(name)
    assert _valid(value), value
    if len(name) <= 63:
        assert value == name
    else:
        assert len(value) <= 63
        assert value.endswith("-" + hashlib.sha256(name.encode()).hexdigest()[:8])


def test_the_cut_is_the_one_configmaps_have_always_carried() -> None:
    """``cbop.dev/bundle`` values written by earlier releases stay as they are."""
    name = "c" * 70
    assert label_value(name) == "c" * 54 + "-" + hashlib.sha256(name.encode()).hexdigest()[:8]


def test_names_sharing_their_first_54_characters_get_different_values() -> None:
    prefix = "team-" * 11
    assert label_value(prefix + "alpha-config") != label_value(prefix + "bravo-config")


def _ccb(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "cbop.dev/v1beta1",
        "kind": "ClusterConfigBundle",
        "metadata": {"name": name, "uid": "u1", "generation": 1, "creationTimestamp": "t"},
        "spec": {"namespaceSelector": {}, "template": {"data": {"a": "1"}}},
    }


@pytest.mark.parametrize("name", NAMES, ids=[f"{len(n)}-chars" for n in NAMES])
def test_a_cluster_bundle_of_any_name_stamps_valid_labels_and_knows_its_stamps(name: str) -> None:
    owner = _ccb(name)
    verdict = decide_namespace(owner, {"metadata": {"name": "team-a"}}, current=None)
    assert isinstance(verdict.action, Create)
    stamp = verdict.action.body
    assert stamp == desired_stamp(owner, "team-a")
    assert stamp["metadata"]["name"] == name
    label = stamp["metadata"]["labels"][LABEL_CLUSTER_BUNDLE]
    assert _valid(label)
    # The stamp as created: in sync, found by its label in the index, releasable.
    stamp["metadata"].update(uid="s1", resourceVersion="1", generation=1)
    assert index_by_cluster_bundle(stamp) == [label_value(name)]
    assert decide_namespace(owner, {"metadata": {"name": "team-a"}}, current=stamp).action is None
    # Its owner reference taken off by hand: adopted back through the label.
    orphan = {**stamp, "metadata": {**stamp["metadata"], "ownerReferences": []}}
    assert is_controlled_by(orphan, owner)
    # The namespace leaves the selector: the stamp, found by its label, is deleted.
    left = decide(
        {**owner, "spec": {**owner["spec"], "namespaceSelector": {"matchLabels": {"x": "y"}}}},
        namespaces=[{"metadata": {"name": "team-a"}}],
        bundle_at=lambda ns: None,
        stamps=[stamp],
    )
    assert left.actions == (Delete("team-a", name, "s1"),)


@pytest.mark.parametrize("name", NAMES, ids=[f"{len(n)}-chars" for n in NAMES])
def test_a_configbundle_of_any_name_labels_its_configmap_validly(name: str) -> None:
    bundle = {
        "apiVersion": "cbop.dev/v1beta1",
        "kind": "ConfigBundle",
        "metadata": {"name": name, "namespace": "team-a", "uid": "b1", "generation": 1},
        "spec": {"data": {"a": "1"}},
    }
    desired = desired_configmap(bundle, parse_spec(bundle))
    assert desired.labels[LABEL_BUNDLE] == label_value(name)
    assert all(_valid(v) for v in desired.labels.values())


@pytest.mark.parametrize("group", ["cbop-leader", "l" * 200], ids=["default", "200-chars"])
def test_a_shard_group_of_any_lease_name_labels_and_selects_validly(group: str) -> None:
    labels = group_labels(group, "member")
    assert all(_valid(v) for v in labels.values())
    assert group_selector(group) == f"{GROUP_LABEL}={labels[GROUP_LABEL]}"
