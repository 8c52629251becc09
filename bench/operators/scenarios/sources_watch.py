"""S10's watches: the readers' ConfigMaps (what they hold, when they showed what is
expected, their MODIFIED events) and the bundles' statuses (when each told of a new
content)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from bench.operators.watch import ChangeTracker, Stream
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, KubeClient, Resource

#: Label on every ConfigMap the watch follows (the bundles' and the raw floor's).
OUT_LABEL = "bench.cbop.dev/s10-out"


class Watcher(ChangeTracker):
    """Cluster-wide watches on the ConfigMaps labelled :data:`OUT_LABEL` and on the
    ConfigBundles: per ConfigMap, its value of ``v``, when it first showed what is
    expected, and its MODIFIED events; per bundle, when its status first told of a new
    content (``status.contentHash`` changed since :meth:`expect`, ``Ready=True`` for its
    generation)."""

    def __init__(self, kube: KubeClient) -> None:
        super().__init__(
            kube,
            [
                Stream(CONFIGMAPS, None, label_selector=f"{OUT_LABEL}=1"),
                Stream(CONFIGBUNDLES, None),
            ],
        )
        self._want = ""
        self._done: Callable[[str, Mapping[str, Any]], bool] | None = None
        self.value: dict[str, str | None] = {}
        self.data: dict[str, Mapping[str, Any]] = {}
        self.hashes: dict[str, str | None] = {}
        self._base_hashes: dict[str, str | None] = {}
        self.reported: dict[str, float] = {}

    def expect(
        self, value: str, done: Callable[[str, Mapping[str, Any]], bool] | None = None
    ) -> None:
        """Expect ``v == value`` (and ``done(key, data)`` when given) from now on; the
        times, the MODIFIED counts and the statuses' content hashes start again."""
        with self._lock:
            self._want = value
            self._done = done
            self.seen = {k: time.monotonic() for k in self.value if self._expected(k)}
            self.modified = {}
            self._base_hashes = dict(self.hashes)
            self.reported = {}

    def _expected(self, key: str) -> bool:
        data = self.data.get(key) or {}
        if data.get("v") != self._want:
            return False
        return self._done is None or self._done(key, data)

    def handle(self, res: Resource, kind: str, obj: Mapping[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if res == CONFIGBUNDLES:
            self._status(key, kind, obj, now)
            return
        if kind == "DELETED":
            self.value.pop(key, None)
            self.data.pop(key, None)
            return
        data = obj.get("data") or {}
        self.value[key] = data.get("v")
        self.data[key] = data
        if kind == "MODIFIED":
            self.modified[key] = self.modified.get(key, 0) + 1
        if key not in self.seen and self._expected(key):
            self.seen[key] = now
            self.changed()

    def _status(self, key: str, kind: str, bundle: Mapping[str, Any], now: float) -> None:
        if kind == "DELETED":
            self.hashes.pop(key, None)
            return
        status = bundle.get("status") or {}
        digest = status.get("contentHash")
        self.hashes[key] = digest
        generation = (bundle.get("metadata") or {}).get("generation")
        ready = any(
            c.get("type") == "Ready"
            and c.get("status") == "True"
            and status.get("observedGeneration") == generation
            for c in status.get("conditions") or ()
        )
        if key not in self.reported and ready and digest != self._base_hashes.get(key, digest):
            self.reported[key] = now
            self.changed()

    def wait_reported(self, keys: list[str], timeout: float) -> bool:
        """Wait until every bundle of ``keys`` has told of its new content in its status."""
        return self.wait_until(lambda: all(k in self.reported for k in keys), timeout)

    def last_reported(self, keys: list[str]) -> float | None:
        with self._lock:
            times = [self.reported[k] for k in keys if k in self.reported]
        return max(times) if times else None
