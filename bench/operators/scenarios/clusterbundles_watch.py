"""What S9 sees: per namespace, when its ConfigMap matched and when it was done.

Cluster-wide watches on the ConfigBundles, ConfigMaps and ClusterConfigBundle of one
name (the ClusterConfigBundle's, which is also every stamp's and every ConfigMap's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.operators import cluster
from bench.operators.cluster import Expected
from bench.operators.watch import Stream, Tracker
from cbop.kube import CLUSTERCONFIGBUNDLES, CONFIGBUNDLES, CONFIGMAPS, KubeClient, Resource


@dataclass(slots=True)
class _Namespace:
    uid: str | None = None
    ready: bool = False
    generation: int = 0
    #: The stamp's generation must exceed this to count (set by :meth:`Watcher.expect`).
    after_generation: int = -1
    cm_ok: bool = False
    cm_owner: str | None = None
    cm_seen: float | None = None
    stamp_seen: float | None = None
    done: float | None = None
    cm_modified: int = 0


class Watcher(Tracker):
    """Cluster-wide watches on the ConfigBundles, ConfigMaps and ClusterConfigBundle
    named ``name``; per namespace, when its ConfigMap matched and when it was done.

    Done: the ConfigMap matches the expected content (raw: that alone; cbop: also
    controlled by the namespace's stamp, the stamp Ready for its generation). The
    ClusterConfigBundle's MODIFIED events are timestamped, to see its status writes.
    """

    def __init__(self, kube: KubeClient, name: str, want: Expected, *, stamped: bool) -> None:
        named = f"metadata.name={name}"
        super().__init__(
            kube,
            [
                Stream(res, None, field_selector=named)
                for res in (CONFIGBUNDLES, CONFIGMAPS, CLUSTERCONFIGBUNDLES)
            ],
        )
        self._want = want
        self._stamped = stamped
        self._state: dict[str, _Namespace] = {}
        self.cluster_modified: list[float] = []

    def handle(self, res: Resource, kind: str, obj: Mapping[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        if res is CLUSTERCONFIGBUNDLES:
            if kind == "MODIFIED":
                self.cluster_modified.append(now)
            return
        ns = str(meta.get("namespace", ""))
        st = self._state.setdefault(ns, _Namespace())
        gone = kind == "DELETED"
        if res is CONFIGBUNDLES:
            st.uid = None if gone else meta.get("uid")
            if not gone and st.stamp_seen is None:
                st.stamp_seen = now
            st.ready = not gone and cluster.bundle_ready(obj)
            st.generation = int(meta.get("generation") or 0)
        else:
            if kind == "MODIFIED":
                st.cm_modified += 1
            st.cm_ok = not gone and cluster.content_ok(obj, self._want)
            st.cm_owner = None if gone else cluster.controller_uid(obj)
            if st.cm_ok and st.cm_seen is None:
                st.cm_seen = now
        if st.done is None and self._done(st):
            st.done = now
            self.changed()

    def _done(self, st: _Namespace) -> bool:
        if not st.cm_ok:
            return False
        if not self._stamped:
            return True
        fresh = st.generation > st.after_generation
        return st.ready and fresh and st.uid is not None and st.cm_owner == st.uid

    def expect(self, want: Expected) -> None:
        """Expect new content from now on: every namespace is not done, counts reset."""
        with self._lock:
            self._want = want
            for st in self._state.values():
                st.done, st.cm_seen, st.cm_ok, st.cm_modified = None, None, False, 0
                st.after_generation = st.generation
            self.cluster_modified.clear()

    def wait_done(self, namespaces: list[str], timeout: float) -> bool:
        return self.wait_until(
            lambda: all(
                (st := self._state.get(n)) is not None and st.done is not None for n in namespaces
            ),
            timeout,
        )

    def stamps_seen(self, namespaces: list[str]) -> list[float]:
        """When each namespace's stamp was first seen (those seen)."""
        with self._lock:
            out = [self._state.get(n, _Namespace()).stamp_seen for n in namespaces]
        return [t for t in out if t is not None]

    def times(self, namespaces: list[str]) -> dict[str, tuple[float | None, float | None]]:
        """Namespace -> (ConfigMap matching since, done since)."""
        with self._lock:
            out = {}
            for n in namespaces:
                st = self._state.get(n, _Namespace())
                out[n] = (st.cm_seen, st.done)
            return out

    def modified(self, namespaces: list[str]) -> dict[int, int]:
        """How many namespaces saw k ConfigMap MODIFIED events since :meth:`expect`: k -> count."""
        with self._lock:
            out: dict[int, int] = {}
            for n in namespaces:
                k = self._state.get(n, _Namespace()).cm_modified
                out[k] = out.get(k, 0) + 1
            return out
