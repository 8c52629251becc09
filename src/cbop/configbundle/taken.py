"""Names found taken by an object cbop does not cache, for the target writers.

cbop caches only the ConfigMaps and Secrets it manages, so a bundle whose target name
is held by someone else's object cannot see it go away in the cache: each writer notes
such bundles here and reads the name fresh on their next reconcile instead of trying a
create that is bound to fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cachetools

from cbop.configbundle.interfaces import Client
from cbop.kube import ApiError, Resource
from cbop.locks import YieldingLock, absent


class TakenNames:
    """The bundles (by key) whose target name was last found taken (thread-safe).

    Also the fresh read of such a name, for :meth:`recheck` and for the writers'
    recovery from a stale cache.

    Entries expire after ``ttl`` seconds on their own (a ``cachetools.TTLCache`` of at
    most 100,000 keys).
    """

    def __init__(self, client: Client, resource: Resource, *, ttl: float) -> None:
        self._client = client
        self._resource = resource
        self._taken: cachetools.TTLCache[str, bool] = cachetools.TTLCache(maxsize=100_000, ttl=ttl)
        self._lock = YieldingLock()

    def recheck(self, key: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """Return object ``name`` read fresh if the last reconcile of ``key`` found it taken.

        Without a note (:meth:`remember`): None, and no request.

        Raises:
            ApiError, ConnectionFailed: the GET failed (but for 404).
        """
        if absent(self._taken, key):  # a containment test needs no lock (see locks.absent)
            return None
        return self.fresh(namespace, name)

    def remember(self, key: str, *, taken: bool) -> None:
        """Note whether this reconcile of ``key`` found its name taken (for :meth:`recheck`)."""
        if not taken and absent(self._taken, key):
            return
        with self._lock:
            if taken:
                self._taken[key] = True
            else:
                self._taken.pop(key, None)

    def fresh(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """GET object ``name`` from the API server, bypassing a cache that may be stale.

        Returns None when it does not exist. Raises ApiError (but for 404) and
        ConnectionFailed.
        """
        try:
            return self._client.get(self._resource, namespace, name)
        except ApiError as err:
            if err.is_not_found:
                return None
            raise
