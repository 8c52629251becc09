"""Example objects that use every field of cbop's API, for tests that must cover them all.

:data:`FULL_CONFIGBUNDLE_SPEC` (a ConfigMap target) and :data:`FULL_SECRET_BUNDLE_SPEC`
(a Secret target, whose rules refuse some fields of the other) together set every
property of a ConfigBundle's ``spec``: the version round-trip tests write them through
one served version and read them back through another, so a field that one version
would lose cannot go unnoticed. A unit test (``tests/unit/test_crds.py``) fails when the
CRD's schema gains a property these examples do not set.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["FULL_CONFIGBUNDLE_SPEC", "FULL_SECRET_BUNDLE_SPEC", "configbundle"]

#: A valid ConfigBundle spec with every field set (none at its default).
FULL_CONFIGBUNDLE_SPEC: Final[dict[str, Any]] = {
    "target": {"kind": "ConfigMap"},
    "configMapName": "every-field",
    "data": {"app.properties": "level=info\n", "greeting": "héllo"},
    "binaryData": {"blob.bin": "//4AgA=="},
    "labels": {"team": "platform"},
    "annotations": {"example.com/owner": "platform"},
    "immutable": True,
    "deletionPolicy": "Orphan",
    "suspend": True,
    "revisions": {"enabled": True, "keep": 5},
    "sources": [
        {
            "configMap": {
                "name": "logging-defaults",
                "namespace": "platform",
                "items": [{"key": "log.yaml", "path": "log.yaml"}],
                "optional": True,
            }
        },
        {"configMap": {"name": "team-overrides", "optional": False}},
    ],
    "merge": [{"key": "log.yaml", "format": "yaml"}],
}

#: A valid ConfigBundle spec with a Secret target, setting every field a Secret target
#: may have (none at its default).
FULL_SECRET_BUNDLE_SPEC: Final[dict[str, Any]] = {
    "target": {"kind": "Secret", "name": "every-secret-field", "type": "kubernetes.io/tls"},
    "labels": {"team": "platform"},
    "annotations": {"example.com/owner": "platform"},
    "immutable": True,
    "deletionPolicy": "Orphan",
    "suspend": True,
    "revisions": {"enabled": False, "keep": 4},
    "sources": [
        {
            "secret": {
                "name": "wildcard-tls",
                "namespace": "cert-manager",
                "items": [
                    {"key": "tls.crt", "path": "tls.crt"},
                    {"key": "tls.key", "path": "tls.key"},
                ],
                "optional": True,
            }
        },
        {"configMap": {"name": "tls-extras", "optional": False}},
    ],
    "merge": [{"key": "extra.yaml", "format": "yaml"}],
}


def configbundle(
    name: str, namespace: str, spec: dict[str, Any], *, version: str = "v1beta1"
) -> dict[str, Any]:
    """Return a ConfigBundle of ``cbop.dev/<version>`` named ``namespace/name``."""
    return {
        "apiVersion": f"cbop.dev/{version}",
        "kind": "ConfigBundle",
        "metadata": {"name": name, "namespace": namespace},
        "spec": dict(spec),
    }
