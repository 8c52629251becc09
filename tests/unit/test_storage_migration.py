"""``cbop migrate-storage`` refuses to pretend: a CRD that does not serve and store the
version this cbop writes stops it, in one line, before any object is written.

The pure check on CRDs as read, and the whole run against the fake API server (as
sample-controller's tests do: the calls made are the ones compared)."""

from __future__ import annotations

from typing import Any

import pytest

from cbop.api import VERSION
from cbop.kube import CONFIGBUNDLES, CUSTOM_RESOURCE_DEFINITIONS
from cbop.storagemigration import CrdTooOld, check_versions, migrate_storage
from cbop_testing.fakekube import FakeKube


def crd(plural: str, *versions: tuple[str, bool, bool], stored: list[str] | None = None) -> Any:
    """A CRD of group cbop.dev with ``(name, served, storage)`` versions."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cbop.dev"},
        "spec": {
            "group": "cbop.dev",
            "scope": "Namespaced",
            "names": {"plural": plural, "kind": "ConfigBundle"},
            "versions": [{"name": n, "served": sv, "storage": st} for n, sv, st in versions],
        },
        "status": {"storedVersions": stored or [n for n, _, st in versions if st]},
    }


#: What 0.1.0 installed: v1alpha1 served and stored.
OLD = crd("configbundles", ("v1alpha1", True, True))
#: What this release installs: v1beta1 stored, v1alpha1 served (deprecated).
NEW = crd("configbundles", ("v1alpha1", True, False), ("v1beta1", True, True))


def test_the_current_crds_pass() -> None:
    assert VERSION == "v1beta1"
    check_versions([NEW, crd("clusterconfigbundles", ("v1beta1", True, True))])


@pytest.mark.parametrize(
    ("found", "said"),
    [
        (OLD, "configbundles.cbop.dev does not serve cbop.dev/v1beta1 (it serves v1alpha1, "
              "stores v1alpha1)"),
        (crd("configbundles", ("v1alpha1", True, True), ("v1beta1", True, False)),
         "configbundles.cbop.dev does not store cbop.dev/v1beta1 (it serves v1alpha1, "
         "v1beta1, stores v1alpha1)"),
        (crd("configbundles", ("v1alpha1", True, False), ("v1beta1", False, True)),
         "configbundles.cbop.dev does not serve cbop.dev/v1beta1 (it serves v1alpha1, "
         "stores v1beta1)"),
    ],
    ids=["0.1.0-crd", "served-not-stored", "stored-not-served"],
)  # fmt: skip
def test_a_crd_without_the_version_is_named_in_one_line(found: Any, said: str) -> None:
    with pytest.raises(CrdTooOld) as caught:
        check_versions([found, crd("clusterconfigbundles", ("v1beta1", True, True))])
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(said)
    assert "clusterconfigbundles" not in message
    assert "apply the new CRD first" in message


def test_nothing_is_written_when_a_crd_is_too_old() -> None:
    """Only 0.1.0's CRD installed, bundles stored as v1alpha1: without the check this
    reported "stored as v1alpha1 only; nothing to do" and exited 0."""
    kube = FakeKube()
    kube.tracker.add(CUSTOM_RESOURCE_DEFINITIONS, OLD)
    kube.tracker.add(
        CONFIGBUNDLES,
        {"metadata": {"name": "b", "namespace": "n"}, "spec": {"data": {"a": "1"}}},
    )
    with pytest.raises(CrdTooOld, match=r"does not serve cbop\.dev/v1beta1"):
        migrate_storage(kube)
    assert kube.write_actions() == []
    assert [a.verb for a in kube.actions] == ["list"]
