"""Which objects of a sharded informer are its own: the server's selector or a client-side check.

A sharded informer asks the API server for its slice of each collection with
``shardSelector`` on every list and watch (KEP-5866; what kube-apiserver 1.36 does
with it is in docs/sharding.md). The server confirms that it filtered only for built-in
resources, and ignores the parameter while its feature gate is off, so
:class:`ShardFilter` checks every listed object and every watch event with
:meth:`cbop.shardrange.ShardRange.contains` whatever the server said (a memoised hash per
namespace). When the server filtered, the check drops nothing; when it did not, the
check is the filter, and a server restarted with the gate off mid-watch cannot leak
objects into the shard's cache. A 400 to the parameter drops it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypedDict

import structlog

from cbop.shardrange import ShardRange

__all__ = ["SelectorArgument", "ShardFilter"]

log = structlog.get_logger("cbop.informers")

#: Namespaces whose shard is remembered; the memo is cleared when it grows past this.
_MEMO_LIMIT: Final = 16_384


class SelectorArgument(TypedDict, total=False):
    """The ``shard_selector`` keyword of a list or watch call, present only when sharded."""

    shard_selector: str


class ShardFilter:
    """One reflector's sharding: the selector it sends, the mode the server chose, the check.

    Not thread-safe: used by one reflector thread; :attr:`server_side` may be read from
    any thread (a plain attribute).

    Args:
        shard: the shard the informer holds; ``None`` or a whole-space range
            (:attr:`ShardRange.everything`) makes the filter inactive: no selector is
            sent and every object is kept, exactly as an unsharded informer.
        name: the informer's name, for the mode's log line.
    """

    def __init__(self, shard: ShardRange | None, *, name: str) -> None:
        self.shard = shard if shard is not None and not shard.everything else None
        by_name = self.shard is not None and self.shard.by_name
        # The server shards by namespace (or uid), never by name: no selector then.
        self._selector = self.shard.selector() if self.shard is not None and not by_name else None
        self._field = "name" if by_name else "namespace"
        self._log = log.bind(informer=name, shard=str(self.shard))
        self._memo: dict[str, bool] = {}
        self.server_side: bool | None = None
        """True once a list answer echoed the selector in ``metadata.shardInfo``; False
        once one did not (or the server rejected the parameter, or sent an object of
        another shard); None before the first list and for an inactive filter."""
        self.dropped = 0
        """Objects (listed or watched) dropped by the client-side check so far."""
        self._listed_dropped = 0

    @property
    def active(self) -> bool:
        """Whether the informer is sharded (a selector or the check applies)."""
        return self.shard is not None

    @property
    def selector(self) -> str | None:
        """The ``shardSelector`` to send, or ``None`` (inactive, or the server rejected it)."""
        return self._selector

    def argument(self) -> SelectorArgument:
        """Return ``{"shard_selector": ...}`` to pass to a list or watch, or ``{}``.

        Unsharded calls stay exactly as they were (clients without the keyword work).
        """
        return {"shard_selector": self._selector} if self._selector is not None else {}

    def keep(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` (a dict with ``metadata.namespace``) belongs to the shard.

        Counts the objects it rejects in :attr:`dropped`. Cluster-scoped objects (no
        namespace) hash the empty string, as the API server does. A range
        :attr:`~cbop.shardrange.ShardRange.by_name` hashes ``metadata.name`` instead.
        """
        shard = self.shard
        if shard is None:
            return True
        meta = obj.get("metadata")
        namespace = meta.get(self._field) if isinstance(meta, Mapping) else None
        if not isinstance(namespace, str):
            namespace = ""
        mine = self._memo.get(namespace)
        if mine is None:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            mine = self._memo[namespace] = shard.contains(namespace)
        if not mine:
            self.dropped += 1
        return mine

    def list_started(self) -> None:
        """Mark the start of a full list (all its pages): its drops are counted apart."""
        self._listed_dropped = self.dropped

    def list_answered(self, list_meta: Mapping[str, Any], items: int) -> None:
        """Decide the mode from a full list's last page ``metadata`` (``items``: objects listed).

        ``metadata.shardInfo.selector`` present: the server applied the selector.
        Absent while a selector was sent: the server ignored it (gate off, older server)
        or did not say so (custom resources): the client-side check filters. Logs the
        mode at info when it is first known or changes, with the reason.
        """
        if self.shard is None:
            return
        dropped = self.dropped - self._listed_dropped
        info = list_meta.get("shardInfo")
        echoed = info.get("selector") if isinstance(info, Mapping) else None
        if self.shard.by_name:
            self._set_mode(False, "sharded by object name (no server selector); client-side")
        elif self._selector is None:
            self._set_mode(False, "the server rejected shardSelector; filtering client-side")
        elif echoed:
            self._set_mode(True, "the list answer carries metadata.shardInfo")
        elif dropped:
            self._set_mode(
                False,
                f"the server ignored shardSelector ({dropped} of {items} listed objects are "
                "in other shards; is the ShardedListAndWatch gate off?); filtering client-side",
            )
        else:
            self._set_mode(
                False,
                f"the list answer has no metadata.shardInfo, yet none of its {items} objects "
                "is in another shard (custom resource lists are filtered without it); "
                "checking client-side",
            )

    def watch_dropped(self, obj: Mapping[str, Any]) -> None:
        """Note a watch event of another shard: in server mode the server stopped filtering."""
        if self.server_side:
            meta = obj.get("metadata")
            namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
            self._set_mode(
                False,
                f"a watch event from namespace {namespace!r} is in another shard although "
                "the list was filtered by the server; filtering client-side",
                warn=True,
            )

    def rejected(self, status: int | None) -> bool:
        """Handle a list or watch error answer; return True if the selector was just dropped.

        A 400 while a selector is sent means the server refuses the parameter: it is not
        sent again (for this informer's life) and the client-side check filters; the
        caller lists again at once.
        """
        if status != 400 or self._selector is None:
            return False
        self._selector = None
        self._set_mode(False, "the server answered 400 to shardSelector; filtering client-side")
        return True

    def _set_mode(self, server_side: bool, reason: str, *, warn: bool = False) -> None:
        """Record the mode; log it (with ``reason``) when first known and on each change."""
        if self.server_side is server_side:
            return
        self.server_side = server_side
        mode = "server-side" if server_side else "client-side"
        if warn:
            self._log.warning("shard filtering mode changed", mode=mode, reason=reason)
        else:
            self._log.info("shard filtering", mode=mode, reason=reason)
