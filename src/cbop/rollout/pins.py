"""The pins: which revision ConfigMaps a pod template digest reads (docs/revisions.md).

One ConfigMap per namespace, :data:`cbop.api.revisions.PARAMS_NAME`, holds one entry per
template digest (:func:`cbop.api.revisions.pins_key`) whose value names, for each
managed ConfigMap the template reads whose bundle keeps revisions, the revision of the
content the digest covers (:func:`cbop.api.revisions.pins_value`). The rollout writes
an entry before it writes the template annotation, so the history
(:mod:`cbop.rollout.history`) and the admission policy find it for every ReplicaSet or
ControllerRevision of that template. This module writes the entries; the collection
of entries nothing references any more (:mod:`cbop.rollout.unpin`) removes them, and
:class:`PinsGuard` orders the two within the process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from cbop.api import LABEL_MANAGED_BY, MANAGED_BY_VALUE
from cbop.api.revisions import (
    LABEL_REVISION_OF,
    PARAMS_NAME,
    PINS_FROZEN,
    is_frozen,
    parse_pins,
    pins_key,
    pins_value,
    revision_name,
)
from cbop.clock import Clock, RealClock
from cbop.kube import CONFIGMAPS, ApiError
from cbop.rollout.decision import ManagedConfigMap
from cbop.runtime.seams import Client, Lister

__all__ = ["DEFAULT_PINS_GRACE", "PinsGuard", "pins_for", "write_owner_pins", "write_pins"]

#: Seconds an entry is kept after it was written or first seen, referenced or not.
DEFAULT_PINS_GRACE: Final = 60.0


class PinsGuard:
    """Orders the rollout's pins writes and the collection of entries, in one process.

    The rollout writes an entry, then the template annotation; the collection
    (:class:`cbop.rollout.unpin.PinsCollector`) drops an entry no workload, ReplicaSet
    or ControllerRevision carries. Two races lie between them, both closed here:

    - the collection looks between the rollout's entry write and its annotation
      write (or before the annotation reaches the workload cache): an entry the
      rollout claimed within the last ``grace`` seconds (:meth:`pinning`) is never
      dropped (:meth:`drop` filters it under the same lock);
    - the rollout finds in its cache the entry of a digest it rolls back to (a revert),
      and writes nothing, while the collection drops that very entry: :meth:`pinning`
      tells the rollout the entry was dropped within the last ``grace`` seconds, and
      the rollout then writes it whatever its cache says.

    Both sides take one lock; :meth:`drop` holds it while the patch is sent, so a
    rollout never claims a key half-way through its drop. Memory: one float per key
    claimed or dropped within the last ``grace`` seconds. Thread-safe.

    Args:
        grace: seconds (see above); also the collection's minimum age of an entry.
        clock: the time source (tests: ``FakeClock``).
    """

    def __init__(self, *, grace: float = DEFAULT_PINS_GRACE, clock: Clock | None = None) -> None:
        self.grace = grace
        self.clock: Clock = clock or RealClock()
        self._lock = threading.Lock()
        self._claimed: dict[tuple[str, str], float] = {}
        self._dropped: dict[tuple[str, str], float] = {}

    def pinning(self, namespace: str, key: str) -> bool:
        """Claim entry ``key`` of ``namespace``'s pins for a rollout about to roll to it.

        Returns:
            Whether the collection dropped that entry within the last ``grace``
            seconds: the cache may still show it, so the rollout must write it anyway.
        """
        with self._lock:
            now = self.clock.now()
            self._prune(now)
            self._claimed[(namespace, key)] = now
            return (namespace, key) in self._dropped

    def drop(
        self, namespace: str, keys: Sequence[str], send: Callable[[list[str]], None]
    ) -> list[str]:
        """Drop the entries ``keys`` of ``namespace``'s pins no rollout has claimed lately.

        Args:
            namespace: the pins' namespace.
            keys: the entries the collection found unreferenced and old enough.
            send: ``fn(keys)``, the write removing them (called under the lock, only
                with a non-empty list).

        Returns:
            The keys passed to ``send`` (``[]``: nothing sent).

        Raises:
            Whatever ``send`` raises (nothing is recorded as dropped then).
        """
        with self._lock:
            now = self.clock.now()
            self._prune(now)
            chosen = [k for k in keys if (namespace, k) not in self._claimed]
            if chosen:
                send(chosen)
                for key in chosen:
                    self._dropped[(namespace, key)] = now
            return chosen

    def _prune(self, now: float) -> None:
        for book in (self._claimed, self._dropped):
            for item in [k for k, at in book.items() if now - at >= self.grace]:
                del book[item]


def pins_for(
    configmaps: Lister, namespace: str, managed: Iterable[ManagedConfigMap]
) -> dict[str, str]:
    """Return plain name -> revision name for the ``managed`` ConfigMaps that have one.

    Args:
        configmaps: the managed-ConfigMap cache (revisions carry cbop's label, so it
            holds them).
        namespace: the workload's namespace.
        managed: the managed ConfigMaps a template digest covers.

    Returns:
        The pairs whose revision (:func:`cbop.api.revisions.revision_name` of the name
        and content hash) is in the cache with the ``cbop.dev/revision-of`` label;
        empty when no bundle the template reads keeps revisions.
    """
    out = {}
    for cm in managed:
        try:
            name = revision_name(cm.name, cm.content_hash)
        except ValueError:
            continue
        revision = configmaps.get(namespace, name)
        labels = ((revision or {}).get("metadata") or {}).get("labels") or {}
        if LABEL_REVISION_OF in labels:
            out[cm.name] = name
    return out


def write_pins(
    client: Client,
    configmaps: Lister,
    namespace: str,
    digest: str,
    pins: Mapping[str, str],
    *,
    force: bool = False,
) -> bool:
    """Make the pins ConfigMap of ``namespace`` hold ``pins`` under ``digest``'s key.

    Writes nothing when the cached pins ConfigMap has the entry already; else one
    merge patch of the entry, or, when the ConfigMap does not exist, one create
    (labelled ``app.kubernetes.io/managed-by: cbop``, so the managed-ConfigMap cache
    holds it). Other entries are never touched.

    Args:
        client: the API client.
        configmaps: the managed-ConfigMap cache.
        namespace: the namespace of the workload.
        digest: the template digest (``sha256:<hex>``).
        pins: plain name -> revision name (empty: nothing is written).
        force: patch the entry even when the cache shows it (the collection dropped it
            moments ago: :meth:`PinsGuard.pinning`).

    Returns:
        Whether a request was sent.

    Raises:
        ApiError, ConnectionFailed: the write failed (a create that lost a race is
            answered with the patch instead).
    """
    key = pins_key(digest)
    if not pins or not key:
        return False
    return _write_entry(client, configmaps, namespace, key, pins_value(pins), force=force)


def write_owner_pins(
    client: Client,
    configmaps: Lister,
    namespace: str,
    key: str,
    pins: Mapping[str, str],
    *,
    freeze: bool = False,
) -> bool:
    """Keep the entry of a workload whose template carries no digest yet (``Kind.name``).

    Until the workload's first rollout the entry follows the revisions of the content
    its pods read (``pins``); the rollout that first writes the template annotation
    freezes it (``freeze``: the :data:`cbop.api.revisions.PINS_FROZEN` line is added to
    the pairs it holds), so a pod of the old template created afterwards (mid-rollout,
    or after a ``kubectl rollout undo`` to it) still gets the revision that template ran
    with. A frozen entry is never written again.

    Args:
        client: the API client.
        configmaps: the managed-ConfigMap cache.
        namespace: the workload's namespace.
        key: :func:`cbop.api.revisions.owner_pins_key` of the workload.
        pins: plain name -> revision name now (empty: nothing is written, unless
            ``freeze``).
        freeze: freeze the entry that is there (nothing when there is none).

    Returns:
        Whether a request was sent.

    Raises:
        ApiError, ConnectionFailed: the write failed.
    """
    if not key:
        return False
    cached = configmaps.get(namespace, PARAMS_NAME)
    value = (cached.get("data") or {}).get(key) if cached is not None else None
    if isinstance(value, str) and is_frozen(value):
        return False
    if freeze:
        if not isinstance(value, str):
            return False
        frozen = pins_value(parse_pins(value)) + PINS_FROZEN + "\n"
        return _write_entry(client, configmaps, namespace, key, frozen)
    if not pins:
        return False
    return _write_entry(client, configmaps, namespace, key, pins_value(pins))


def _write_entry(
    client: Client,
    configmaps: Lister,
    namespace: str,
    key: str,
    value: str,
    *,
    force: bool = False,
) -> bool:
    cached = configmaps.get(namespace, PARAMS_NAME)
    if not force and cached is not None and (cached.get("data") or {}).get(key) == value:
        return False
    body: dict[str, Any] = {"data": {key: value}}
    if cached is None:
        try:
            client.create(
                CONFIGMAPS,
                namespace,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": PARAMS_NAME,
                        "namespace": namespace,
                        "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE},
                    },
                    **body,
                },
            )
            return True
        except ApiError as err:
            if not err.is_already_exists:
                raise
    client.patch(CONFIGMAPS, namespace, PARAMS_NAME, body, patch_type="merge")
    return True
