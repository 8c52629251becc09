"""The ClusterConfigBundle reconciler: performs :func:`cbop.clusterbundle.decision.decide`.

One reconcile of a ClusterConfigBundle (key: its name) reads the caches (the
ClusterConfigBundles, the Namespaces, the ConfigBundles), lets the decision say what
to write, writes it (stamp creates, updates and deletes), and writes the status when
it changed. Its error policy, in the words of sample-controller:

- the ClusterConfigBundle gone or being deleted: nothing (garbage collection removes
  its stamps through their owner references);
- a lost race (409 on update, 409 AlreadyExists on create: the cache had not caught
  up): :class:`cbop.runtime.Requeue`, a quiet rate-limited retry;
- a stamp refused by the API server (403 or 422: an admission policy, a quota): the
  namespace is failed with the server's message, the other namespaces carry on, the
  status says so, and the key is retried with the workqueue's rate limiter
  (exponential backoff, never a hot loop) through :class:`cbop.runtime.Requeue`;
- a namespace being deleted, or gone: skipped (no error, no retry);
- anything else: raised, so the controller retries it rate-limited.

Its own writes are remembered until the caches show them (:class:`OwnWrites` for the
status and the stamps it updated, a short-lived memo of the stamps it created), so a
reconcile that comes before the watch events decides from what was written, and a
world that did not change gets no write at all. Status writes go out at most once per
second per ClusterConfigBundle; a change within that second is written when it ends
(``requeue_after``).
"""

from __future__ import annotations

import contextvars
import datetime
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Protocol

import cachetools
import structlog

from cbop.api import LABEL_CLUSTER_BUNDLE, ClusterReason
from cbop.clusterbundle.decision import Create, Delete, Failure, Update, decide, status_of
from cbop.keys import key_of
from cbop.kube import CLUSTERCONFIGBUNDLES, CONFIGBUNDLES, NAMESPACES, ApiError
from cbop.runtime.ownwrites import OwnWrites
from cbop.runtime.reconcile import Requeue
from cbop.runtime.seams import Client, EventSink

__all__ = [
    "CLUSTER_BUNDLE_INDEX",
    "DEFAULT_PARALLELISM",
    "FIELD_MANAGER",
    "STATUS_INTERVAL",
    "ClusterBundleReconciler",
    "Done",
    "ListingLister",
    "index_by_cluster_bundle",
]

log = structlog.get_logger("cbop.clusterbundle")

#: The field manager of every write.
FIELD_MANAGER: Final = "cbop-clusterbundle"
#: Seconds between two status writes of one ClusterConfigBundle, at least.
STATUS_INTERVAL: Final = 1.0
#: Name of the ConfigBundle cache's index from the label ``cbop.dev/cluster-bundle`` to
#: the stamps carrying it.
CLUSTER_BUNDLE_INDEX: Final = "cluster-bundle"
#: Stamp writes one reconcile sends at once, unless told.
DEFAULT_PARALLELISM: Final = 4
#: Seconds a created stamp is remembered while the cache does not show it yet.
_CREATED_TTL: Final = 30.0


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


class ClusterBundleReconciler:
    """Reconciles one ClusterConfigBundle (see the module docstring).

    Args:
        client: the client it writes with (fenced under leader election).
        cluster_bundles: lister of the ClusterConfigBundles.
        namespaces: lister of the Namespaces.
        bundles: lister of every ConfigBundle, with :data:`CLUSTER_BUNDLE_INDEX`.
        recorder: where the NamespaceServed / NamespaceReleased Events go (None: none).
        monotonic: seconds for the status write interval (tests: a fake clock's).
        now: the wall clock for condition times (UTC).
        parallelism: stamp writes one reconcile sends at once (the API server serves
            them concurrently: a thousand namespaces are not written one by one).
    """

    def __init__(
        self,
        *,
        client: Client,
        cluster_bundles: ListingLister,
        namespaces: ListingLister,
        bundles: ListingLister,
        recorder: EventSink | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        parallelism: int = DEFAULT_PARALLELISM,
    ) -> None:
        #: Stamp writes one reconcile sends at once.
        self.parallelism = max(1, parallelism)
        self._client = client
        self._cluster_bundles = cluster_bundles
        self._namespaces = namespaces
        self._bundles = bundles
        self._recorder = recorder
        self._monotonic = monotonic
        self._now = now
        # Status writes not yet in the cache (value: the server's answer).
        self._status_writes: OwnWrites[Mapping[str, Any]] = OwnWrites()
        # Stamp updates not yet in the cache (value: the server's answer).
        self._stamp_writes: OwnWrites[Mapping[str, Any]] = OwnWrites()
        # Stamps created and not yet in the cache: key -> the server's answer.
        self._created: cachetools.TTLCache[str, Mapping[str, Any]] = cachetools.TTLCache(
            maxsize=100_000, ttl=_CREATED_TTL, timer=monotonic
        )
        self._lock = threading.Lock()
        self._last_status_write: dict[str, float] = {}

    # ------------------------------------------------------------------ reading

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

    # ------------------------------------------------------------------ reconcile

    def reconcile(self, key: str) -> Done:
        """Reconcile the ClusterConfigBundle named ``key``.

        Raises:
            Requeue: a lost race, or a stamp refused (retried rate-limited).
            ApiError, ConnectionFailed: another failure (retried rate-limited).
        """
        cached = self._cluster_bundles.get(None, key)
        if cached is None:
            with self._lock:
                self._last_status_write.pop(key, None)
            return Done()
        written = self._status_writes.pending(key, cached)
        current = written if written is not None else cached
        if current["metadata"].get("deletionTimestamp"):
            return Done()  # garbage collection removes the stamps
        name = str(current["metadata"]["name"])
        plan = decide(
            current,
            namespaces=self._namespaces.list(),
            bundle_at=lambda namespace: self._stamp_at(namespace, name),
            stamps=self._bundles.by_index(CLUSTER_BUNDLE_INDEX, name),
            others=self._cluster_bundles.list(),
        )
        refusals: list[Failure] = []
        outcomes = self._act_all(current, plan.actions, refusals)
        failed = [o for o in outcomes if isinstance(o, Exception)]
        if failed:
            raise failed[0]  # no status from a pass that did not finish: retried
        writes = sum(1 for o in outcomes if o is True)
        status = status_of(current, plan, refusals, now=self._now())
        done = self._write_status(key, current, status, writes)
        if refusals:
            log.info(
                "stamps refused; retrying with backoff",
                namespaces=[f.namespace for f in refusals[:5]],
                refused=len(refusals),
            )
            raise Requeue(f"{len(refusals)} stamps refused")
        return done

    def _act_all(
        self,
        owner: Mapping[str, Any],
        actions: Sequence[Create | Update | Delete],
        refusals: list[Failure],
    ) -> list[bool | Exception]:
        """Perform ``actions``, up to :attr:`parallelism` at once; return each outcome.

        An outcome is whether the action was written, or the exception it raised (every
        action is attempted whatever the others do). Each runs in a copy of the caller's
        context, so its log lines carry the reconcile's fields.
        """

        def attempt(action: Create | Update | Delete) -> bool | Exception:
            try:
                return self._act(owner, action, refusals)
            except Exception as err:  # noqa: BLE001 - handed back to the caller
                return err

        if len(actions) <= 1 or self.parallelism <= 1:
            return [attempt(a) for a in actions]
        workers = min(self.parallelism, len(actions))
        with ThreadPoolExecutor(workers, thread_name_prefix="clusterbundle-write") as pool:
            futures = [pool.submit(contextvars.copy_context().run, attempt, a) for a in actions]
            return [f.result() for f in futures]

    def _act(
        self, owner: Mapping[str, Any], action: Create | Update | Delete, refusals: list[Failure]
    ) -> bool:
        """Perform one action; return whether it was written. Refusals are collected."""
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
            return self._failed(action, err, refusals)

    def _failed(
        self, action: Create | Update | Delete, err: ApiError, refusals: list[Failure]
    ) -> bool:
        """Sort an API error of one action: skip, collect a refusal, or raise."""
        if _namespace_going(err):
            return False  # a terminating or deleted namespace: skipped, not retried
        if isinstance(action, Delete) and (err.is_not_found or err.is_conflict):
            return False  # gone already, or replaced (the precondition on its UID)
        if err.is_already_exists or err.is_conflict:
            raise Requeue(str(err)) from err
        if err.is_forbidden or err.is_invalid:
            with self._lock:
                refusals.append(
                    Failure(action.namespace, ClusterReason.REFUSED, err.message or str(err))
                )
            return False
        raise err

    def _write_status(
        self, key: str, current: Mapping[str, Any], status: Mapping[str, Any], writes: int
    ) -> Done:
        """Write ``status`` when it differs, at most every :data:`STATUS_INTERVAL` s."""
        if current.get("status") == status:
            return Done(writes=writes)
        now = self._monotonic()
        with self._lock:
            last = self._last_status_write.get(key)
        if last is not None and now - last < STATUS_INTERVAL:
            return Done(requeue_after=STATUS_INTERVAL - (now - last), writes=writes)
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
                return Done(writes=writes)
            raise
        with self._lock:
            self._last_status_write[key] = now
        self._status_writes.record(key, current, answer, answer)
        return Done(writes=writes, status_written=True)

    def _event(self, owner: Mapping[str, Any], reason: str, message: str) -> None:
        if self._recorder is not None:
            self._recorder.event(owner, "Normal", reason, message)


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
