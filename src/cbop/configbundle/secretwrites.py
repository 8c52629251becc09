"""The Secret a bundle with a Secret target keeps: its reads, its writes, and their recovery.

This module owns :class:`SecretWriter`, the :class:`cbop.configbundle.interfaces.TargetWriter`
for Secrets, a sibling of :class:`cbop.configbundle.writes.ConfigMapWriter` with the same
guarantees (docs/secrets.md): a cached read never mutated; create, update (with the
resourceVersion read) and replace (a delete with the uid and resourceVersion as
preconditions, then a create); a write that fails on a stale cache decided again from a
fresh read; a lost race a :class:`cbop.configbundle.interfaces.Requeue`; a refusal no
retry can fix a :class:`cbop.configbundle.interfaces.RejectedError`; stale Secrets the
bundle controls under an old name deleted by uid; the Orphan release. What is its own:
the desired Secret is keyed by the scope's digest key (:mod:`cbop.secretaccess.digestkey`),
and every message of the API server that it passes on has the content's values cut out
(:func:`cbop.configbundle.secret.redact`), so none reaches a status, an Event or a log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from cbop.api import BundleSpec, Kind, Reason, SpecError, target_of
from cbop.configbundle import secret
from cbop.configbundle.decision import SECRET, Action, Decision, decide
from cbop.configbundle.desired import DesiredConfigMap
from cbop.configbundle.interfaces import (
    CONTROLLER_UID_INDEX,
    UNRETRYABLE_STATUSES,
    Client,
    Lister,
    RejectedError,
    Reporting,
    Requeue,
)
from cbop.configbundle.taken import TakenNames
from cbop.kube import SECRETS, ApiError
from cbop.secretaccess.digestkey import DigestKey

__all__ = ["SecretWriter"]

#: What :meth:`SecretWriter._recover` answers when the error must be re-raised.
_GIVE_UP: Final = object()
#: Fresh reads (each followed by a new decision and write) after failed writes, at most.
_RECOVERIES: Final = 2


class SecretWriter:
    """Reads and writes the Secret each bundle with a Secret target keeps (thread-safe).

    Args:
        client: the API client (writes, and the rare fresh read).
        secrets: the managed-Secret cache (label ``app.kubernetes.io/managed-by=cbop``),
            with the ``controller-uid`` index.
        digest_key: the scope's digest key (read on the first :meth:`desired`).
        reports: where Events (``Deleted``) and write counts go.
        field_manager: the field manager sent with writes.
        dry_run: send writes with ``dryRun=All``; a replace sends only its delete, and
            stale Secrets are named, not deleted.
        conflict_recheck: seconds between rechecks of a name taken by a Secret cbop does
            not cache; what :meth:`remember` notes lasts four of them.
    """

    def __init__(
        self,
        *,
        client: Client,
        secrets: Lister,
        digest_key: DigestKey,
        reports: Reporting,
        field_manager: str = "cbop",
        dry_run: bool = False,
        conflict_recheck: float = 15.0,
    ) -> None:
        self._client = client
        self._secrets = secrets
        self._key = digest_key
        self._reports = reports
        self._field_manager = field_manager
        self._dry_run = dry_run
        self._taken = TakenNames(client, SECRETS, ttl=4 * conflict_recheck)

    def key(self) -> bytes:
        """Return the scope's digest key, read (or made) on the first call.

        Raises:
            DigestKeyError, ApiError, ConnectionFailed: it cannot be read or made.
        """
        return self._key.key()

    def desired(self, bundle: Mapping[str, Any], spec: BundleSpec) -> DesiredConfigMap:
        """Return the desired Secret of ``bundle`` (:func:`.secret.desired_secret`).

        Raises:
            DigestKeyError, ApiError, ConnectionFailed: the digest key cannot be read.
        """
        return secret.desired_secret(bundle, spec, self.key())

    # -- reads -----------------------------------------------------------------------

    def cached(self, bundle: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Return the cached Secret the bundle names (:func:`cbop.api.target_of`), or None."""
        target = target_of(bundle)
        if target is None or not target.is_secret:
            return None
        return self._secrets.get(bundle["metadata"]["namespace"], target.name)

    def recheck(self, key: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """Return Secret ``name`` read fresh if the last reconcile of ``key`` found it taken.

        cbop caches only the Secrets it manages, so only a GET tells whether a foreign
        Secret of that name is still there. Without a note: None, and no request.

        Raises:
            ApiError, ConnectionFailed: the GET failed (but for 404).
        """
        return self._taken.recheck(key, namespace, name)

    def remember(self, key: str, *, taken: bool) -> None:
        """Note whether this reconcile of ``key`` found its name taken (for :meth:`recheck`)."""
        self._taken.remember(key, taken=taken)

    # -- writes ----------------------------------------------------------------------

    def apply(
        self,
        bundle: Mapping[str, Any],
        spec: BundleSpec | SpecError,
        decision: Decision,
        current: Mapping[str, Any] | None,
    ) -> tuple[Decision, Mapping[str, Any] | None]:
        """Write what ``decision`` says (if anything), recovering from a stale cache.

        As :meth:`cbop.configbundle.writes.ConfigMapWriter.apply`, deciding again with
        the Secret's rules; an error passed on has the content's values cut out.

        Raises:
            Requeue: 409 Conflict.
            RejectedError: a refusal no retry can fix (422, 413, 400, 415).
            ApiError, ConnectionFailed: any other failure, or a second failure.
        """
        namespace = bundle["metadata"]["namespace"]
        attempts = 0
        while True:
            attempts += 1
            try:
                self._write(namespace, decision)
            except ApiError as err:
                content = decision.desired.binary_data if decision.desired else {}
                if attempts > _RECOVERIES:
                    raise _redacted(err, content) from None
                fresh = self._recover(namespace, spec, decision, _redacted(err, content))
                if fresh is _GIVE_UP:
                    raise _redacted(err, content) from None
                current = fresh if isinstance(fresh, Mapping) else None
                decision = decide(
                    bundle,
                    spec,
                    current,
                    desired_of=self.desired,
                    synced=secret.in_sync,
                    ops=SECRET,
                )
                continue
            return decision, current

    def _write(self, namespace: str, decision: Decision) -> None:
        action, body = decision.action, decision.body
        if body is None or action not in (Action.CREATE, Action.UPDATE, Action.REPLACE):
            return
        name = body["metadata"]["name"]
        common: dict[str, Any] = {"field_manager": self._field_manager, "dry_run": self._dry_run}
        if action is Action.CREATE:
            self._client.create(SECRETS, namespace, body, **common)
            self._reports.count("create", kind=Kind.SECRET)
        elif action is Action.UPDATE:
            self._client.update(SECRETS, namespace, name, body, **common)
            self._reports.count("update", kind=Kind.SECRET)
        else:
            self._client.delete(
                SECRETS, namespace, name, preconditions=decision.precondition, dry_run=self._dry_run
            )
            self._reports.count("delete", kind=Kind.SECRET)
            if not self._dry_run:
                self._client.create(SECRETS, namespace, body, **common)
                self._reports.count("create", kind=Kind.SECRET)

    def _recover(
        self,
        namespace: str,
        spec: BundleSpec | SpecError,
        decision: Decision,
        err: ApiError,
    ) -> Mapping[str, Any] | object | None:
        """Return the Secret read fresh to decide again with, or ``_GIVE_UP``; raise for good.

        ``err`` has its values cut out already.
        """
        if not isinstance(spec, BundleSpec):
            raise RuntimeError("a write failed for a spec that did not parse (a bug)") from err
        name = spec.target.name
        if err.is_conflict:
            raise Requeue(f"Secret {namespace}/{name} changed while being written") from None
        if err.is_already_exists or err.is_not_found:
            return self._taken.fresh(namespace, name)
        if err.is_invalid and decision.action is Action.UPDATE and "immutable" in err.message:
            return self._taken.fresh(namespace, name)
        if err.is_invalid:
            raise RejectedError(err.message) from None
        if err.is_request_entity_too_large:
            size = f"{err.request_bytes:,}-byte " if err.request_bytes is not None else ""
            raise RejectedError(
                f"the API server refused the {size}request writing Secret {name} as too large "
                f"({err.status} {err.message or err.reason}); split the bundle or shrink "
                "its sources",
                Reason.SECRET_TOO_LARGE,
            ) from None
        if err.status in UNRETRYABLE_STATUSES:
            raise RejectedError(
                f"the API server refused the request writing Secret {name}: "
                f"{err.status} {err.message or err.reason}"
            ) from None
        return _GIVE_UP

    def controls_others(self, bundle: Mapping[str, Any], name: str) -> bool:
        """Whether the cache holds a Secret ``bundle`` controls under a name but ``name``."""
        uid = bundle["metadata"]["uid"]
        return any(
            s["metadata"]["name"] != name for s in self._secrets.by_index(CONTROLLER_UID_INDEX, uid)
        )

    def delete_stale(self, bundle: Mapping[str, Any], decision: Decision) -> list[str]:
        """Delete Secrets this bundle controls under a name it no longer declares.

        Each delete carries the Secret's UID; one gone or changed meanwhile is no error.
        Returns their names (in a dry run: that would be deleted).

        Raises:
            ApiError, ConnectionFailed: another failure of a delete.
        """
        if decision.desired is None:
            return []
        uid = bundle["metadata"]["uid"]
        names: list[str] = []
        for found in self._secrets.by_index(CONTROLLER_UID_INDEX, uid):
            meta = found["metadata"]
            if meta["name"] == decision.desired.name:
                continue
            names.append(meta["name"])
            if self._dry_run:
                continue
            try:
                self._client.delete(
                    SECRETS, meta["namespace"], meta["name"], preconditions={"uid": meta["uid"]}
                )
                self._reports.count("delete", kind=Kind.SECRET)
                self._reports.event(
                    bundle,
                    "Normal",
                    "Deleted",
                    f"deleted Secret {meta['name']}: spec.target.name is now "
                    f"{decision.desired.name}",
                )
            except ApiError as err:
                if not (err.is_not_found or err.is_conflict):
                    raise
        return names

    def release(self, bundle: Mapping[str, Any], body: Mapping[str, Any]) -> None:
        """Update the Secret to ``body``, without cbop's ownership (``deletionPolicy: Orphan``).

        Raises:
            Requeue: the Secret changed meanwhile (409).
            ApiError, ConnectionFailed: another failure (its values cut out).
        """
        try:
            self._client.update(
                SECRETS,
                bundle["metadata"]["namespace"],
                body["metadata"]["name"],
                body,
                field_manager=self._field_manager,
            )
            self._reports.count("update", kind=Kind.SECRET)
        except ApiError as err:
            if err.is_conflict:
                raise Requeue("Secret changed while being released") from None
            if not err.is_not_found:
                content = secret.decode_data(body)
                raise _redacted(err, content) from None


def _redacted(err: ApiError, content: Mapping[str, bytes]) -> ApiError:
    """Return ``err``, or a copy whose message has ``content``'s values cut out."""
    message = secret.redact(err.message, content)
    if message == err.message:
        return err
    copy = ApiError(err.status, err.reason, message, retry_after=err.retry_after)
    copy.request_bytes = err.request_bytes
    return copy
