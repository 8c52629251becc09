"""Storage migration: rewrite every stored object of cbop's CRDs in their storage version.

This module owns :func:`migrate_storage`, which ``cbop migrate-storage``
(:mod:`cbop.cli.migrate`) runs after an upgrade. Why: etcd keeps the objects written
before a new storage version in the old one, and a version may only leave a CRD's
``spec.versions`` once ``status.storedVersions`` says nothing is stored in it. So, as
the kube-storage-version-migrator does, each object is read and written back unchanged
(with its resourceVersion: a lost race is read again, a deleted object skipped; no spec
or status changes), and only when every one is done is ``storedVersions`` set to the
storage version alone. Running it twice, or while cbop reconciles, is safe. A CRD that
does not yet serve and store :data:`cbop.api.VERSION` raises :class:`CrdTooOld` before
any write (docs/api-versions.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from cbop.api import GROUP, VERSION
from cbop.kube import CUSTOM_RESOURCE_DEFINITIONS, ApiError, KubeInterface, Resource

__all__ = [
    "ATTEMPTS",
    "CrdMigration",
    "CrdTooOld",
    "MigrationError",
    "check_versions",
    "migrate_storage",
]

#: Tries per object when its update keeps losing optimistic-concurrency races.
ATTEMPTS: Final = 5
#: Objects per LIST page.
_PAGE: Final = 500


class MigrationError(Exception):
    """The migration of a CRD could not finish (its ``storedVersions`` stay as they were)."""


class CrdTooOld(MigrationError):  # noqa: N818 - named for what it says of the cluster
    """An installed CRD does not serve or store the version this cbop writes (one line)."""


@dataclass
class CrdMigration:
    """What :func:`migrate_storage` did for one CRD.

    Attributes:
        crd: the CRD's name.
        storage_version: the version objects are stored in now.
        stored_before: ``status.storedVersions`` before.
        stored_after: ``status.storedVersions`` after (the same when nothing was due).
        rewritten: objects whose update produced a new resourceVersion.
        unchanged: objects whose update was a no-op (already stored in the version).
        gone: objects deleted between the list and their update.
        failed: ``namespace/name: error`` of objects that could not be written.
    """

    crd: str
    storage_version: str
    stored_before: list[str]
    stored_after: list[str]
    rewritten: int = 0
    unchanged: int = 0
    gone: int = 0
    failed: list[str] = field(default_factory=list)

    @property
    def needed(self) -> bool:
        """Whether old versions were listed as stored when the run began."""
        return self.stored_before != [self.storage_version]

    def summary(self) -> str:
        """One line for people: what was found and done."""
        if not self.needed:
            return f"{self.crd}: stored as {self.storage_version} only; nothing to do"
        line = (
            f"{self.crd}: rewrote {self.rewritten} objects in {self.storage_version} "
            f"({self.unchanged} already were, {self.gone} gone meanwhile); storedVersions "
            f"{self.stored_before} -> {self.stored_after}"
        )
        if self.failed:
            line += f"; {len(self.failed)} could not be written, storedVersions kept"
        return line


def _resource(crd: dict[str, Any], version: str) -> Resource:
    spec = crd["spec"]
    return Resource(
        spec["group"],
        version,
        spec["names"]["plural"],
        spec["names"]["kind"],
        namespaced=spec.get("scope") == "Namespaced",
    )


def _storage_version(crd: dict[str, Any]) -> str:
    for version in crd["spec"].get("versions") or ():
        if version.get("storage"):
            return str(version["name"])
    raise MigrationError(f"{crd['metadata']['name']} has no storage version")


def check_versions(
    crds: list[dict[str, Any]],
    version: str = VERSION,
    *,
    then: str = "run migrate-storage again",
) -> None:
    """Check that every CRD serves ``version`` and stores objects in it.

    Args:
        crds: the CustomResourceDefinitions, as read.
        version: the version this cbop reads and writes (default :data:`cbop.api.VERSION`).
        then: what the message says to do once the new CRD is applied.

    Raises:
        CrdTooOld: a CRD lacks it, in one line naming each such CRD, the version it
            lacks, what it serves and stores, and to apply the new CRD first.
    """
    problems = []
    for crd in sorted(crds, key=lambda c: str(c["metadata"]["name"])):
        versions = crd["spec"].get("versions") or ()
        served = [str(v["name"]) for v in versions if v.get("served")]
        stored = [str(v["name"]) for v in versions if v.get("storage")]
        if version in served and stored == [version]:
            continue
        name = crd["metadata"]["name"]
        problems.append(
            f"{name} does not {'store' if version in served else 'serve'} "
            f"{GROUP}/{version} (it serves {', '.join(served) or 'nothing'}, stores "
            f"{', '.join(stored) or 'nothing'})"
        )
    if problems:
        raise CrdTooOld(
            f"{'; '.join(problems)}; this cbop writes {GROUP}/{version}: apply the new CRD "
            "first (install.yaml or manifests/crd/, or `helm show crds` of the new chart, "
            f"with kubectl apply --server-side --force-conflicts), then {then}"
        )


def _rewrite(client: KubeInterface, res: Resource, obj: dict[str, Any], out: CrdMigration) -> None:
    """Write ``obj`` back as read; retry lost races from a fresh read."""
    meta = obj["metadata"]
    namespace, name = meta.get("namespace"), meta["name"]
    for _ in range(ATTEMPTS):
        body = {**obj, "apiVersion": res.api_version, "kind": res.kind}
        try:
            written = client.update(res, namespace, name, body, field_manager="cbop-migrate")
        except ApiError as err:
            if err.is_not_found:
                out.gone += 1
                return
            if not err.is_conflict:
                out.failed.append(f"{namespace + '/' if namespace else ''}{name}: {err}")
                return
            try:
                obj = client.get(res, namespace, name)
            except ApiError as again:
                if again.is_not_found:
                    out.gone += 1
                    return
                raise
            meta = obj["metadata"]
            continue
        if written["metadata"].get("resourceVersion") == meta.get("resourceVersion"):
            out.unchanged += 1
        else:
            out.rewritten += 1
        return
    out.failed.append(f"{namespace + '/' if namespace else ''}{name}: {ATTEMPTS} lost races")


def _trim(client: KubeInterface, name: str, storage: str) -> list[str]:
    """Set the CRD's ``status.storedVersions`` to ``[storage]``; return what it holds."""
    for _ in range(ATTEMPTS):
        crd = client.get(CUSTOM_RESOURCE_DEFINITIONS, None, name)
        status = dict(crd.get("status") or {})
        status["storedVersions"] = [storage]
        try:
            updated = client.update(
                CUSTOM_RESOURCE_DEFINITIONS,
                None,
                name,
                {**crd, "status": status},
                "status",
                field_manager="cbop-migrate",
            )
        except ApiError as err:
            if err.is_conflict:
                continue
            raise
        return list((updated.get("status") or {}).get("storedVersions") or [])
    raise MigrationError(f"{name}: storedVersions not updated after {ATTEMPTS} lost races")


def migrate_storage(
    client: KubeInterface,
    names: list[str] | None = None,
    *,
    progress: Callable[[str], object] | None = None,
) -> list[CrdMigration]:
    """Migrate the stored objects of cbop's CRDs (see the module docstring).

    Args:
        client: an API client allowed to list and update the CRDs' objects, get and list
            CustomResourceDefinitions and update their ``status``.
        names: the CRDs to migrate (``configbundles.cbop.dev``, ...); None: every CRD
            of group ``cbop.dev``.
        progress: called with a line per CRD once it is done (None: silent).

    Returns:
        One :class:`CrdMigration` per CRD, in name order. A CRD with objects that could
        not be written keeps its ``storedVersions`` (see :attr:`CrdMigration.failed`).

    Raises:
        ApiError, ConnectionFailed: a CRD could not be read, listed or updated.
        CrdTooOld: a CRD does not serve or store :data:`cbop.api.VERSION` (nothing is
            written: :func:`check_versions` runs before any object is touched).
        MigrationError: a CRD has no storage version, or its status kept losing races.
    """
    if names is None:
        listed = client.list(CUSTOM_RESOURCE_DEFINITIONS, None)["items"]
        crds = [c for c in listed if c["spec"]["group"] == GROUP]
    else:
        crds = [client.get(CUSTOM_RESOURCE_DEFINITIONS, None, n) for n in names]
    check_versions(crds)
    results = []
    for crd in sorted(crds, key=lambda c: str(c["metadata"]["name"])):
        name = str(crd["metadata"]["name"])
        storage = _storage_version(crd)
        stored = list((crd.get("status") or {}).get("storedVersions") or [])
        out = CrdMigration(name, storage, stored, stored)
        if out.needed:
            res = _resource(crd, storage)
            continue_token: str | None = None
            while True:
                page = client.list(res, None, limit=_PAGE, continue_=continue_token)
                for obj in page.get("items") or ():
                    _rewrite(client, res, obj, out)
                continue_token = (page.get("metadata") or {}).get("continue") or None
                if not continue_token:
                    break
            if not out.failed:
                out.stored_after = _trim(client, name, storage)
        results.append(out)
        if progress is not None:
            progress(out.summary())
    return results
