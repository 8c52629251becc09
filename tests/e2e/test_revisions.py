"""Revisions on a real API server: one immutable ConfigMap per content version.

- A change makes a new revision and keeps the old one; ``status.revision`` names the
  current one; a revert to earlier content creates no ConfigMap and leaves the old
  revision as it was; the steady state writes nothing (no resourceVersion of the
  namespace's ConfigMaps and bundles changes over three resyncs).
- Collection (``--revision-grace 2``): the bundle holds its newest ``keep`` revisions;
  an older one nothing names is deleted by cbop, one that another object also owns
  (as a 0.2.0 ReplicaSet did) keeps the bundle's reference and is deleted by cbop once
  kube-controller-manager's garbage collector has removed that owner's.
- The CRD refuses ``keep`` outside 1..20 and a ``configMapName`` too long for the
  revision suffix at admission; a bundle whose own name is too long (which a rule on
  ``spec`` cannot see) is reported ``Ready=False``, reason ``InvalidSpec``, naming the
  limit, and its plain ConfigMap is still kept.
- Without the pin policy installed, a bundle with revisions is ``Ready=True`` (its
  message about the ConfigMap alone) and ``Pinned=False``, reason ``PolicyMissing``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from cbop.api import content_hash
from cbop.api.revisions import LABEL_REVISION_OF, revision_name
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, KubeClient

from .harness import Operator, bundle, ready, set_spec, wait_for

ON = {"enabled": True}
#: cbop's collection grace in these tests (seconds).
GRACE = "2"


def _revision(data: dict[str, str], name: str = "web-conf") -> str:
    return revision_name(name, content_hash(data, {}))


def _status_revision(kube: KubeClient, namespace: str, name: str, expected: str) -> bool:
    obj = ready(kube, namespace, name)
    return obj is not None and (obj.get("status") or {}).get("revision") == expected


def _names(kube: KubeClient, namespace: str) -> set[str]:
    return {cm["metadata"]["name"] for cm in kube.list(CONFIGMAPS, namespace)["items"]} - {
        "kube-root-ca.crt"
    }


def _versions(kube: KubeClient, namespace: str) -> dict[str, str]:
    """The resourceVersion of each ConfigMap and ConfigBundle of ``namespace``, by name."""
    out = {
        cm["metadata"]["name"]: cm["metadata"]["resourceVersion"]
        for cm in kube.list(CONFIGMAPS, namespace)["items"]
    }
    for b in kube.list(CONFIGBUNDLES, namespace)["items"]:
        out[f"ConfigBundle/{b['metadata']['name']}"] = b["metadata"]["resourceVersion"]
    return out


def _assert_quiet(kube: KubeClient, namespace: str, seconds: float = 6.0) -> None:
    """Nothing in ``namespace`` is written over three 2 s resyncs (nor created, nor deleted)."""
    before = _versions(kube, namespace)
    time.sleep(seconds)
    assert _versions(kube, namespace) == before


def test_a_change_makes_a_new_revision_and_a_revert_writes_none(
    kube: KubeClient, namespace: str, cbop: Callable[..., Operator]
) -> None:
    cbop()
    first, second = {"app.conf": "level=info\n"}, {"app.conf": "level=debug\n"}
    spec: dict[str, Any] = {"configMapName": "web-conf", "data": first, "revisions": ON}
    kube.create(CONFIGBUNDLES, namespace, bundle("web", spec))
    wait_for(
        lambda: _status_revision(kube, namespace, "web", _revision(first)),
        30,
        message="status.revision of the first content",
    )
    old = kube.get(CONFIGMAPS, namespace, _revision(first))
    assert old["immutable"] is True
    assert old["data"] == first
    assert old["metadata"]["labels"][LABEL_REVISION_OF] == "web"
    (ref,) = old["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["controller"]) == ("ConfigBundle", "web", False)
    # This control plane serves MutatingAdmissionPolicy, but the pin policy is not
    # installed: Ready stays about the ConfigMap, Pinned says so.
    conditions = {
        c["type"]: c for c in kube.get(CONFIGBUNDLES, namespace, "web")["status"]["conditions"]
    }
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Ready"]["message"].startswith("ConfigMap web-conf matches the spec (")
    assert "revision" not in conditions["Ready"]["message"]
    pinned = conditions["Pinned"]
    assert (pinned["status"], pinned["reason"]) == ("False", "PolicyMissing")
    assert "cbop-pin-pods" in pinned["message"]

    # A change: a new revision, the old one kept as it was.
    set_spec(kube, namespace, "web", {**spec, "data": second})
    wait_for(
        lambda: _status_revision(kube, namespace, "web", _revision(second)),
        30,
        message="status.revision of the second content",
    )
    assert _names(kube, namespace) == {"web-conf", _revision(first), _revision(second)}
    assert kube.get(CONFIGMAPS, namespace, "web-conf")["data"] == second
    assert kube.get(CONFIGMAPS, namespace, _revision(second))["data"] == second
    kept = kube.get(CONFIGMAPS, namespace, _revision(first))
    assert kept["metadata"]["resourceVersion"] == old["metadata"]["resourceVersion"]

    # A revert: no ConfigMap created, both revisions untouched, status points back.
    before = _versions(kube, namespace)
    set_spec(kube, namespace, "web", spec)
    wait_for(
        lambda: _status_revision(kube, namespace, "web", _revision(first)),
        30,
        message="status.revision back at the first content",
    )
    time.sleep(2)
    after = _versions(kube, namespace)
    assert set(after) == set(before)
    changed = {name for name in after if after[name] != before[name]}
    assert changed == {"web-conf", "ConfigBundle/web"}
    assert kube.get(CONFIGMAPS, namespace, "web-conf")["data"] == first

    # Steady state: resyncs every 2 s write nothing.
    _assert_quiet(kube, namespace)


def test_a_revision_deleted_by_hand_is_made_again(
    kube: KubeClient, namespace: str, cbop: Callable[..., Operator]
) -> None:
    cbop()
    data = {"k": "v"}
    kube.create(
        CONFIGBUNDLES,
        namespace,
        bundle("web", {"configMapName": "web-conf", "data": data, "revisions": ON}),
    )
    name = _revision(data)
    wait_for(lambda: _status_revision(kube, namespace, "web", name), 30, message="revision")
    uid = kube.get(CONFIGMAPS, namespace, name)["metadata"]["uid"]
    kube.delete(CONFIGMAPS, namespace, name)

    def recreated() -> bool:
        try:
            return bool(kube.get(CONFIGMAPS, namespace, name)["metadata"]["uid"] != uid)
        except ApiError as err:
            if err.is_not_found:
                return False
            raise

    wait_for(recreated, 10, message="the revision made again")


def _gone(kube: KubeClient, namespace: str, name: str) -> bool:
    try:
        kube.get(CONFIGMAPS, namespace, name)
    except ApiError as err:
        if err.is_not_found:
            return True
        raise
    return False


def test_older_revisions_are_collected_once_nothing_else_owns_them(
    kube: KubeClient, namespace: str, cbop: Callable[..., Operator]
) -> None:
    cbop("--revision-grace", GRACE)
    keep2 = {"enabled": True, "keep": 2}
    c1, c2, c3 = ({"v": str(i)} for i in (1, 2, 3))
    spec: dict[str, Any] = {"configMapName": "web-conf", "data": c1, "revisions": keep2}
    kube.create(CONFIGBUNDLES, namespace, bundle("web", spec))
    wait_for(lambda: _status_revision(kube, namespace, "web", _revision(c1)), 30, message="c1")
    # Another owner of the first revision (as cbop 0.2.0 made a ReplicaSet that reads it).
    holder = kube.create(
        CONFIGMAPS, namespace, {"metadata": {"name": "holder"}, "data": {"x": "y"}}
    )
    kube.patch(
        CONFIGMAPS,
        namespace,
        _revision(c1),
        [
            {
                "op": "add",
                "path": "/metadata/ownerReferences/-",
                "value": {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "holder",
                    "uid": holder["metadata"]["uid"],
                },
            }
        ],
        patch_type="json",
    )
    set_spec(kube, namespace, "web", {**spec, "data": c2})
    wait_for(lambda: _status_revision(kube, namespace, "web", _revision(c2)), 30, message="c2")
    time.sleep(1.1)  # creationTimestamp has whole seconds
    set_spec(kube, namespace, "web", {**spec, "data": c3})
    wait_for(lambda: _status_revision(kube, namespace, "web", _revision(c3)), 30, message="c3")

    # Beyond keep, but another owner holds it: the bundle keeps its reference and writes
    # nothing to it.
    refs = kube.get(CONFIGMAPS, namespace, _revision(c1))["metadata"]["ownerReferences"]
    assert sorted(r["name"] for r in refs) == ["holder", "web"]
    assert _names(kube, namespace) == {
        "web-conf",
        "holder",
        _revision(c1),
        _revision(c2),
        _revision(c3),
    }
    # c2 older than c3 but within keep: c4 would release it; here c1 is out, c2 and c3 in.
    # The holder goes; the collector removes its reference, which wakes the bundle,
    # and cbop deletes the revision it now holds alone.
    kube.delete(CONFIGMAPS, namespace, "holder")
    wait_for(lambda: _gone(kube, namespace, _revision(c1)), 30, message="c1 collected")
    assert _names(kube, namespace) == {"web-conf", _revision(c2), _revision(c3)}

    # One more change: c2 had the bundle alone, so cbop deletes it.
    time.sleep(1.1)
    c4 = {"v": "4"}
    set_spec(kube, namespace, "web", {**spec, "data": c4})
    # Collection runs before the create (a quota full of old revisions must not refuse the
    # new one), so c2 can be gone a moment before c4 exists.
    wait_for(lambda: _gone(kube, namespace, _revision(c2)), 30, message="c2 deleted")
    wait_for(lambda: _status_revision(kube, namespace, "web", _revision(c4)), 30, message="c4")
    assert _names(kube, namespace) == {"web-conf", _revision(c3), _revision(c4)}
    _assert_quiet(kube, namespace)


def test_a_revision_left_with_no_owner_is_deleted_by_its_bundle(
    kube: KubeClient, namespace: str, cbop: Callable[..., Operator]
) -> None:
    # The garbage collector never deletes an object without owners: a revision whose
    # references were all taken off is cbop's to collect, found through its label.
    cbop("--revision-grace", GRACE)
    keep1 = {"enabled": True, "keep": 1}
    c1, c2 = {"v": "1"}, {"v": "2"}
    spec: dict[str, Any] = {"configMapName": "web-conf", "data": c1, "revisions": keep1}
    kube.create(CONFIGBUNDLES, namespace, bundle("web", spec))
    wait_for(lambda: _status_revision(kube, namespace, "web", _revision(c1)), 30, message="c1")
    holder = kube.create(
        CONFIGMAPS, namespace, {"metadata": {"name": "holder"}, "data": {"x": "y"}}
    )
    owned = {"apiVersion": "v1", "kind": "ConfigMap", "name": "holder"}
    kube.patch(
        CONFIGMAPS,
        namespace,
        _revision(c1),
        [
            {
                "op": "add",
                "path": "/metadata/ownerReferences/-",
                "value": {**owned, "uid": holder["metadata"]["uid"]},
            }
        ],
        patch_type="json",
    )
    set_spec(kube, namespace, "web", {**spec, "data": c2})
    wait_for(lambda: _status_revision(kube, namespace, "web", _revision(c2)), 30, message="c2")
    assert _revision(c1) in _names(kube, namespace)  # the holder still owns it
    kube.patch(
        CONFIGMAPS,
        namespace,
        _revision(c1),
        [{"op": "replace", "path": "/metadata/ownerReferences", "value": []}],
        patch_type="json",
    )
    wait_for(lambda: _gone(kube, namespace, _revision(c1)), 30, message="c1 collected")
    assert _names(kube, namespace) == {"web-conf", "holder", _revision(c2)}


@pytest.mark.parametrize("keep", [0, 21], ids=["keep-0", "keep-21"])
def test_keep_outside_its_bounds_is_refused_at_admission(
    kube: KubeClient, namespace: str, keep: int
) -> None:
    spec = {"data": {"a": "1"}, "revisions": {"enabled": True, "keep": keep}}
    with pytest.raises(ApiError) as refused:
        kube.create(CONFIGBUNDLES, namespace, bundle("app", spec))
    assert refused.value.status == 422
    assert "spec.revisions.keep" in refused.value.message


def test_keep_defaults_to_three_and_accepts_its_bounds(kube: KubeClient, namespace: str) -> None:
    made = kube.create(CONFIGBUNDLES, namespace, bundle("dflt", {"revisions": {"enabled": True}}))
    assert made["spec"]["revisions"] == {"enabled": True, "keep": 3}
    for keep in (1, 20):
        spec = {"revisions": {"enabled": True, "keep": keep}}
        kube.create(CONFIGBUNDLES, namespace, bundle(f"keep-{keep}", spec))


def test_a_configmapname_too_long_for_the_suffix_is_refused_at_admission(
    kube: KubeClient, namespace: str
) -> None:
    spec = {"configMapName": "c" * 243, "revisions": ON}
    with pytest.raises(ApiError) as refused:
        kube.create(CONFIGBUNDLES, namespace, bundle("long", spec))
    assert refused.value.status == 422
    assert "at most 242 characters" in refused.value.message
    # 242 is fine; so is any valid name with revisions off.
    kube.create(CONFIGBUNDLES, namespace, bundle("fits", {**spec, "configMapName": "c" * 242}))
    kube.create(CONFIGBUNDLES, namespace, bundle("off", {"configMapName": "c" * 243}))


def test_a_bundle_name_too_long_for_the_suffix_is_invalid_and_its_configmap_kept(
    kube: KubeClient, namespace: str, cbop: Callable[..., Operator]
) -> None:
    cbop()
    name = "b" * 250
    kube.create(CONFIGBUNDLES, namespace, bundle(name, {"data": {"a": "1"}, "revisions": ON}))

    def invalid() -> dict[str, Any] | None:
        status = kube.get(CONFIGBUNDLES, namespace, name).get("status") or {}
        for cond in status.get("conditions") or ():
            if cond["type"] == "Ready" and cond["reason"] == "InvalidSpec":
                return dict(cond)
        return None

    cond = wait_for(invalid, 30, message="Ready=False, InvalidSpec")
    assert cond["status"] == "False"
    assert "at most 242" in cond["message"]
    assert kube.get(CONFIGMAPS, namespace, name)["data"] == {"a": "1"}
    assert _names(kube, namespace) == {name}
