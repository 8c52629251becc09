"""The ClusterConfigBundle reconcilers: stamp work per namespace, status per bundle.

Two reconcilers share the caches and one :class:`Outcomes` table.
:class:`StampReconciler` (key ``<namespace>/<name>``) performs
:func:`cbop.clusterbundle.decision.decide_namespace`: it creates, puts back or deletes
the one stamp of a ClusterConfigBundle in one namespace, and puts what only the write
shows (an admission refusal) in :class:`Outcomes`. :class:`StatusReconciler` (key: the
ClusterConfigBundle's name) aggregates the status from the caches and those refusals,
and writes it when it changed, at most once per :data:`STATUS_INTERVAL`.

The stamp work's error policy, as sample-controller's: a lost race is a quiet
:class:`cbop.runtime.Requeue`; a 403 (a policy, a quota: lifted any time) is retried
with backoff; a refusal no retry can overcome (422, 400, 413, 415) fails the namespace
with the server's message and is a :class:`cbop.runtime.reconcile.TerminalError` until
something changes; a namespace being deleted is skipped. Own writes are remembered until
the caches show them (:class:`cbop.runtime.OwnWrites`), so an unchanged world gets no
write.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import cachetools
import structlog

from cbop.api import LABEL_CLUSTER_BUNDLE, ClusterReason, label_value
from cbop.clusterbundle import report
from cbop.clusterbundle.decision import (
    Create,
    Delete,
    Failure,
    Update,
    decide,
    decide_namespace,
    status_of,
)
from cbop.clusterbundle.outcomes import Outcomes
from cbop.keys import key_of, split_key
from cbop.kube import CLUSTERCONFIGBUNDLES, CONFIGBUNDLES, NAMESPACES, ApiError
from cbop.runtime.ownwrites import OwnWrites
from cbop.runtime.reconcile import Requeue, TerminalError
from cbop.runtime.seams import Client, EventSink

__all__ = [
    "CLUSTER_BUNDLE_INDEX",
    "FIELD_MANAGER",
    "REPORT_INTERVAL",
    "STATUS_DEBOUNCE",
    "STATUS_INTERVAL",
    "UNSEEN_REASONS",
    "Done",
    "ListingLister",
    "Outcomes",
    "ReportReconciler",
    "StampReconciler",
    "StatusReconciler",
    "index_by_cluster_bundle",
]

log = structlog.get_logger("cbop.clusterbundle")

#: The field manager of every write.
FIELD_MANAGER: Final = "cbop-clusterbundle"
#: Seconds between two status writes of one ClusterConfigBundle, at least.
STATUS_INTERVAL: Final = 1.0
#: Seconds between two status computations of one ClusterConfigBundle, at least (each
#: reads every namespace; a burst of stamp events is folded into one).
STATUS_DEBOUNCE: Final = 0.5
#: Name of the ConfigBundle cache's index from the label ``cbop.dev/cluster-bundle`` to
#: the stamps carrying it.
CLUSTER_BUNDLE_INDEX: Final = "cluster-bundle"
#: Reasons of the failures no stamp shows (:class:`Outcomes` records them).
UNSEEN_REASONS: Final = frozenset({ClusterReason.REFUSED, ClusterReason.CONFIGBUNDLE_CONFLICT})
#: Seconds between two report writes of one shard on one ClusterConfigBundle, at least.
REPORT_INTERVAL: Final = 1.0
#: Seconds a created stamp is remembered while the cache does not show it yet.
_CREATED_TTL: Final = 30.0
#: Refusals of a stamp write that the same request can never overcome (the request
#: itself is wrong: 422 Invalid, 400 Bad Request, 413 Request Entity Too Large, 415
#: Unsupported Media Type). 403 is not among them: a quota or a policy may be lifted.
_FINAL_STATUSES: Final = frozenset({400, 413, 415, 422})


@dataclass(frozen=True)
class _Refusal:
    """A stamp write the API server refused: the failure to report, and whether to retry."""

    failure: Failure
    retry: bool


def index_by_cluster_bundle(bundle: Mapping[str, Any]) -> list[str]:
    """Index function of the ConfigBundle cache: the ``cbop.dev/cluster-bundle`` label value."""
    labels = (bundle.get("metadata") or {}).get("labels") or {}
    value = labels.get(LABEL_CLUSTER_BUNDLE)
    return [value] if isinstance(value, str) and value else []


class ListingLister(Protocol):
    """A :class:`cbop.runtime.seams.Lister` that also lists everything it caches."""

    def get(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """Return the cached object or None."""
        ...

    def by_index(self, index_name: str, value: str) -> Sequence[Mapping[str, Any]]:
        """Return the cached objects whose index ``index_name`` yields ``value``."""
        ...

    def list(self) -> Sequence[Mapping[str, Any]]:
        """Return every cached object."""
        ...


@dataclass(frozen=True)
class Done:
    """The outcome of one reconcile.

    Attributes:
        requeue_after: seconds until a held-back status write is due, or None.
        writes: stamp writes made (creates, updates, deletes).
        status_written: whether the status was written.
    """

    requeue_after: float | None = None
    writes: int = 0
    status_written: bool = False


class StampReconciler:
    """Reconciles one stamp: key ``<namespace>/<name>`` (see the module docstring).

    Args:
        client: the client it writes with (fenced under leader election).
        cluster_bundles: lister of the ClusterConfigBundles.
        namespaces: lister of the Namespaces.
        bundles: lister of the ConfigBundles (at least those of the namespaces served).
        outcomes: where the failures no stamp shows (a refusal, a foreign ConfigBundle
            in the way) are recorded for the status.
        recorder: where the NamespaceServed / NamespaceReleased Events go (None: none).
        monotonic: seconds for the memo of created stamps (tests: a fake clock's).
        owns: ``fn(namespace) -> bool``, whether this scope serves the namespace (a
            shard: its name hashes into the shard's range); None: every namespace.
    """

    def __init__(
        self,
        *,
        client: Client,
        cluster_bundles: ListingLister,
        namespaces: ListingLister,
        bundles: ListingLister,
        outcomes: Outcomes,
        recorder: EventSink | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        owns: Callable[[str], bool] | None = None,
    ) -> None:
        self._owns = owns
        self._client = client
        self._cluster_bundles = cluster_bundles
        self._namespaces = namespaces
        self._bundles = bundles
        self._outcomes = outcomes
        self._recorder = recorder
        # Stamp updates not yet in the cache (value: the server's answer).
        self._stamp_writes: OwnWrites[Mapping[str, Any]] = OwnWrites()
        # Stamps created and not yet in the cache: key -> the server's answer.
        self._created: cachetools.TTLCache[str, Mapping[str, Any]] = cachetools.TTLCache(
            maxsize=100_000, ttl=_CREATED_TTL, timer=monotonic
        )
        self._lock = threading.Lock()

    def _stamp_at(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """Return the ConfigBundle ``namespace/name`` as this reconciler last knew it."""
        key = key_of(namespace, name)
        cached = self._bundles.get(namespace, name)
        if cached is None:
            with self._lock:
                return self._created.get(key)
        with self._lock:
            self._created.pop(key, None)
        written = self._stamp_writes.pending(key, cached)
        return written if written is not None else cached

    def reconcile(self, key: str) -> Done:
        """Reconcile the stamp ``key`` (``<namespace>/<ClusterConfigBundle name>``).

        Raises:
            Requeue: a lost race, or the stamp refused (retried rate-limited).
            ApiError, ConnectionFailed: another failure (retried rate-limited).
            ValueError: ``key`` has no namespace.
        """
        namespace, name = split_key(key)
        if namespace is None:
            raise ValueError(f"a stamp key needs a namespace: {key!r}")
        if self._owns is not None and not self._owns(namespace):
            return Done()  # another shard's namespace
        cluster_bundle = self._cluster_bundles.get(None, name)
        if cluster_bundle is None:
            return Done()  # its outcomes are forgotten with it
        if cluster_bundle["metadata"].get("deletionTimestamp"):
            self._outcomes.record(name, namespace, None)
            return Done()  # garbage collection removes the stamps
        verdict = decide_namespace(
            cluster_bundle,
            self._namespaces.get(None, namespace),
            current=self._stamp_at(namespace, name),
            others=self._cluster_bundles.list(),
        )
        refusal: _Refusal | None = None
        written = False
        if verdict.action is not None:
            outcome = self._act(cluster_bundle, verdict.action)
            if isinstance(outcome, _Refusal):
                refusal = outcome
            else:
                written = outcome
        unseen = refusal.failure if refusal is not None else None
        if verdict.failure is not None and verdict.failure.reason in UNSEEN_REASONS:
            unseen = verdict.failure  # a foreign bundle: not in a sharded writer's cache
        if self._outcomes.record(name, namespace, unseen) and refusal is not None:
            retry = "retrying with backoff" if refusal.retry else "retried on the next change"
            log.info(f"stamp refused; {retry}", stamp_namespace=namespace)
            self._event(
                cluster_bundle,
                "StampRefused",
                f"the API server refused the stamp in namespace {namespace}: "
                f"{refusal.failure.message}",
                warning=True,
            )
        if refusal is None:
            return Done(writes=int(written))
        if refusal.retry:
            raise Requeue(f"stamp refused: {refusal.failure.message}")
        raise TerminalError(f"stamp refused for good: {refusal.failure.message}")

    def _act(self, owner: Mapping[str, Any], action: Create | Update | Delete) -> bool | _Refusal:
        """Perform one action; return whether it was written, or the refusal met."""
        try:
            if isinstance(action, Create):
                answer = self._client.create(
                    CONFIGBUNDLES, action.namespace, action.body, field_manager=FIELD_MANAGER
                )
                with self._lock:
                    self._created[key_of(action.namespace, str(owner["metadata"]["name"]))] = answer
                self._event(owner, "NamespaceServed", f"serving namespace {action.namespace}")
            elif isinstance(action, Update):
                meta = action.body["metadata"]
                before = self._bundles.get(action.namespace, meta["name"]) or action.body
                answer = self._client.update(
                    CONFIGBUNDLES,
                    action.namespace,
                    meta["name"],
                    action.body,
                    field_manager=FIELD_MANAGER,
                )
                self._stamp_writes.record(
                    key_of(action.namespace, meta["name"]), before, answer, answer
                )
                log.debug("stamp updated to the template", stamp_namespace=action.namespace)
            else:
                self._client.delete(
                    CONFIGBUNDLES,
                    action.namespace,
                    action.name,
                    preconditions={"uid": action.uid} if action.uid else None,
                )
                self._event(owner, "NamespaceReleased", f"released namespace {action.namespace}")
            return True
        except ApiError as err:
            return self._failed(action, err)

    def _failed(self, action: Create | Update | Delete, err: ApiError) -> bool | _Refusal:
        """Sort an API error of one action: skip, return a refusal, or raise."""
        if _namespace_going(err):
            return False  # a terminating or deleted namespace: skipped, not retried
        if isinstance(action, Delete) and (err.is_not_found or err.is_conflict):
            return False  # gone already, or replaced (the precondition on its UID)
        if err.is_already_exists or err.is_conflict:
            raise Requeue(str(err)) from err
        final = err.is_invalid or err.status in _FINAL_STATUSES
        if err.is_forbidden or final:
            failure = Failure(
                action.namespace, ClusterReason.REFUSED, err.message or err.reason or str(err)
            )
            return _Refusal(failure, retry=not final)
        raise err

    def _event(
        self, owner: Mapping[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> None:
        if self._recorder is not None:
            self._recorder.event(owner, "Warning" if warning else "Normal", reason, message)


class StatusReconciler:
    """Writes one ClusterConfigBundle's status: key its name (see the module docstring).

    Args:
        client: the client it writes with (fenced under leader election).
        cluster_bundles: lister of the ClusterConfigBundles.
        namespaces: lister of every Namespace.
        bundles: lister of every stamp, with :data:`CLUSTER_BUNDLE_INDEX`.
        outcomes: the refusals the stamp work met (the same process's).
        monotonic: seconds for the write interval and the debounce (tests: a fake
            clock's).
        now: the wall clock for condition times (UTC).
        reports: ``fn(cluster_bundle) -> failures``: the failures the stamping shards
            report (:func:`cbop.clusterbundle.report.reported`), read instead of
            ``outcomes`` by the sharded writer; ``bundles`` then holds only stamps.
    """

    def __init__(
        self,
        *,
        client: Client,
        cluster_bundles: ListingLister,
        namespaces: ListingLister,
        bundles: ListingLister,
        outcomes: Outcomes,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        reports: Callable[[Mapping[str, Any]], list[Failure]] | None = None,
    ) -> None:
        self._reports = reports
        self._client = client
        self._cluster_bundles = cluster_bundles
        self._namespaces = namespaces
        self._bundles = bundles
        self._outcomes = outcomes
        self._monotonic = monotonic
        self._now = now
        # Status writes not yet in the cache (value: the server's answer).
        self._status_writes: OwnWrites[Mapping[str, Any]] = OwnWrites()
        self._lock = threading.Lock()
        self._last_status_write: dict[str, float] = {}
        self._last_computed: dict[str, float] = {}

    def reconcile(self, key: str) -> Done:
        """Compute the status of the ClusterConfigBundle named ``key``; write it if changed.

        Computed at most every :data:`STATUS_DEBOUNCE` s and written at most every
        :data:`STATUS_INTERVAL` s; a change held back is due at ``requeue_after``.

        Raises:
            Requeue: the write lost a race (retried rate-limited).
            ApiError, ConnectionFailed: another failure (retried rate-limited).
        """
        cached = self._cluster_bundles.get(None, key)
        if cached is None:
            with self._lock:
                self._last_status_write.pop(key, None)
                self._last_computed.pop(key, None)
            self._outcomes.forget(key)
            return Done()
        written = self._status_writes.pending(key, cached)
        current = written if written is not None else cached
        if current["metadata"].get("deletionTimestamp"):
            return Done()
        now = self._monotonic()
        with self._lock:
            last = self._last_computed.get(key)
            if last is not None and now - last < STATUS_DEBOUNCE:
                return Done(requeue_after=STATUS_DEBOUNCE - (now - last))
            self._last_computed[key] = now
        name = str(current["metadata"]["name"])
        plan = decide(
            current,
            namespaces=self._namespaces.list(),
            bundle_at=lambda namespace: self._bundles.get(namespace, name),
            stamps=self._bundles.by_index(CLUSTER_BUNDLE_INDEX, label_value(name)),
            others=self._cluster_bundles.list(),
        )
        status = status_of(current, plan, self._refusals(current, plan.selected), now=self._now())
        return self._write_status(key, current, status)

    def _refusals(self, current: Mapping[str, Any], selected: Sequence[str]) -> list[Failure]:
        """Return the refusals of the selected namespaces: recorded, or as the status said.

        A selected namespace with no outcome recorded yet keeps the ``Refused`` entry the
        status already lists (the stamp work has not met it again since a restart).
        """
        name = str(current["metadata"]["name"])
        wanted = set(selected)
        if self._reports is not None:
            # A report older than a stamp now in place (the refusal lifted, the foreign
            # bundle gone and the stamp made) no longer holds.
            return [
                f
                for f in self._reports(current)
                if f.namespace in wanted and self._bundles.get(f.namespace, name) is None
            ]
        out = [f for f in self._outcomes.failures(name) if f.namespace in wanted]
        for entry in (current.get("status") or {}).get("failedNamespaces") or ():
            namespace = str(entry.get("namespace", ""))
            if (
                entry.get("reason") == ClusterReason.REFUSED
                and namespace in wanted
                and not self._outcomes.known(name, namespace)
            ):
                out.append(Failure(namespace, ClusterReason.REFUSED, str(entry.get("message", ""))))
        return out

    def _write_status(
        self, key: str, current: Mapping[str, Any], status: Mapping[str, Any]
    ) -> Done:
        """Write ``status`` when it differs, at most every :data:`STATUS_INTERVAL` s."""
        if current.get("status") == status:
            return Done()
        now = self._monotonic()
        with self._lock:
            last = self._last_status_write.get(key)
        if last is not None and now - last < STATUS_INTERVAL:
            # Due when both the write interval and the debounce (a computation just
            # happened) have passed.
            return Done(requeue_after=max(STATUS_INTERVAL - (now - last), STATUS_DEBOUNCE))
        body = {**current, "status": status}
        try:
            answer = self._client.update(
                CLUSTERCONFIGBUNDLES,
                None,
                key,
                body,
                subresource="status",
                field_manager=FIELD_MANAGER,
            )
        except ApiError as err:
            if err.is_conflict:
                raise Requeue(str(err)) from err
            if err.is_not_found:
                return Done()
            raise
        with self._lock:
            # From the answer: the next write goes out a full interval after this one
            # landed, however long it took.
            self._last_status_write[key] = self._monotonic()
        self._status_writes.record(key, current, answer, answer)
        return Done(status_written=True)


class ReportReconciler:
    """Reports one shard's failures on a ClusterConfigBundle: key its name (sharded only).

    The value of the shard's annotation (:mod:`cbop.clusterbundle.report`) is the
    failures :class:`Outcomes` holds for the ClusterConfigBundle, plus the entries the
    annotation lists already for namespaces the stamp work has not met since this scope
    started (a new holder of the shard does not clear what it has not looked at yet).
    Written with a JSON merge patch of that one key, only when it differs from the
    cached annotation, and at most once per :data:`REPORT_INTERVAL` (a change within is
    written when it ends; by then the cache shows the previous write, and should it
    not, the same value patched again changes nothing on the server).

    Args:
        client: the shard's client (fenced by the shard's Lease).
        cluster_bundles: lister of every ClusterConfigBundle.
        outcomes: the shard's stamp outcomes.
        key: the shard's annotation key (:func:`cbop.clusterbundle.report.report_key`).
        monotonic: seconds for the write interval (tests: a fake clock's).
    """

    def __init__(
        self,
        *,
        client: Client,
        cluster_bundles: ListingLister,
        outcomes: Outcomes,
        key: str,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._cluster_bundles = cluster_bundles
        self._outcomes = outcomes
        self._key = key
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._last_write: dict[str, float] = {}

    def reconcile(self, key: str) -> Done:
        """Bring the shard's report on ClusterConfigBundle ``key`` up to date.

        Raises:
            ApiError, ConnectionFailed: the patch failed (retried rate-limited).
        """
        cached = self._cluster_bundles.get(None, key)
        if cached is None:
            with self._lock:
                self._last_write.pop(key, None)
            self._outcomes.forget(key)
            return Done()
        if cached["metadata"].get("deletionTimestamp"):
            return Done()
        annotations = cached["metadata"].get("annotations") or {}
        have = annotations.get(self._key)
        failures = self._outcomes.failures(key)
        failures += [f for f in report.decode(have) if not self._outcomes.known(key, f.namespace)]
        want = report.encode(failures)
        if want == have:
            return Done()
        now = self._monotonic()
        with self._lock:
            since = now - self._last_write.get(key, now - REPORT_INTERVAL)
        if since < REPORT_INTERVAL:
            return Done(requeue_after=REPORT_INTERVAL - since)
        try:
            self._client.patch(
                CLUSTERCONFIGBUNDLES,
                None,
                key,
                {"metadata": {"annotations": {self._key: want}}},
                field_manager=FIELD_MANAGER,
            )
        except ApiError as err:
            if err.is_not_found:
                return Done()
            raise
        with self._lock:
            self._last_write[key] = now
        log.info("failures reported for the status writer", failed=len(failures))
        return Done(writes=1)


def _namespace_going(err: ApiError) -> bool:
    """Whether ``err`` says the target namespace is being deleted or does not exist."""
    causes = ((err.body or {}).get("details") or {}).get("causes") or ()
    if any(c.get("reason") == "NamespaceTerminating" for c in causes):
        return True
    text = err.message or ""
    if err.is_forbidden and "being terminated" in text:
        return True
    details = (err.body or {}).get("details") or {}
    return bool(err.is_not_found and details.get("kind") == NAMESPACES.plural)
