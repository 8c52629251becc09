"""Watch-based observation of bundles and ConfigMaps in one namespace.

Two threads hold a watch each (ConfigBundles, ConfigMaps). For every bundle name the
observer tracks whether the bundle is Ready for its generation and whether its ConfigMap
matches the expected content and is controlled by that bundle (by UID). The first moment
both hold is the bundle's "done" time. For drift (S2), a patched name is armed; the first
ConfigMap event after the drift event that shows matching content again is its "healed"
time. Timestamps are taken when an event is decoded, on ``time.monotonic()``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.operators.cluster import (
    Expected,
    bundle_ready,
    content_ok,
    controller_uid,
)
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, ConnectionFailed, KubeClient, Resource


@dataclass(slots=True)
class _State:
    uid: str | None = None
    ready: bool = False
    cm_ok: bool = False
    cm_owner: str | None = None
    done: float | None = None
    drift_armed: bool = False
    drift_seen: bool = False
    healed: float | None = None


class Observer:
    """Watches one namespace and records done/healed times per bundle name.

    Args:
        kube: a client (watches are not rate limited).
        namespace: the namespace under test; None: every namespace (then bundle names
            must be unique across namespaces).
        expected: bundle name -> what its ConfigMap must carry (names outside are ignored).
    """

    def __init__(
        self, kube: KubeClient, namespace: str | None, expected: Mapping[str, Expected]
    ) -> None:
        self._kube = kube
        self._ns = namespace
        self._expected = dict(expected)
        self._state = {name: _State() for name in expected}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._done_count = 0
        self._stop = threading.Event()
        self._streams: list[Any] = []
        self._threads: list[threading.Thread] = []
        self._synced = threading.Barrier(3)
        self.events = 0

    # -------------------------------------------------------------------- lifecycle

    def start(self) -> Observer:
        for res in (CONFIGBUNDLES, CONFIGMAPS):
            t = threading.Thread(
                target=self._run, args=(res,), name=f"watch-{res.plural}", daemon=True
            )
            t.start()
            self._threads.append(t)
        self._synced.wait(60)
        return self

    def stop(self) -> None:
        self._stop.set()
        for stream in list(self._streams):
            with contextlib.suppress(Exception):
                stream.close()
        for t in self._threads:
            t.join(5)

    def _run(self, res: Resource) -> None:
        listed = self._kube.list(res, self._ns)
        for item in listed["items"]:
            self._handle(res, "ADDED", item)
        rv = listed["metadata"]["resourceVersion"]
        self._synced.wait(60)
        while not self._stop.is_set():
            try:
                stream = self._kube.watch(
                    res, self._ns, resource_version=rv, timeout_seconds=1800, read_timeout=150
                )
            except (ApiError, ConnectionFailed):
                if self._stop.wait(0.5):
                    return
                continue
            self._streams.append(stream)
            try:
                for event in stream:
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._handle(res, event["type"], obj)
            except (ApiError, ConnectionFailed):
                if self._stop.is_set():
                    return
            finally:
                stream.close()
                with contextlib.suppress(ValueError):
                    self._streams.remove(stream)

    # ---------------------------------------------------------------------- events

    def _handle(self, res: Resource, kind: str, obj: Mapping[str, Any]) -> None:
        now = time.monotonic()
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        with self._lock:
            self.events += 1
            if res is CONFIGBUNDLES:
                st = self._state.get(name)
                if st is None:
                    return
                st.uid = meta.get("uid")
                st.ready = kind != "DELETED" and bundle_ready(obj)
            else:
                st = self._state.get(name)
                if st is None:
                    return
                ok = kind != "DELETED" and content_ok(obj, self._expected[name])
                st.cm_ok = ok
                st.cm_owner = controller_uid(obj) if kind != "DELETED" else None
                if st.drift_armed:
                    if not ok:
                        st.drift_seen = True
                    elif st.drift_seen and st.healed is None:
                        st.healed = now
                        self._changed.notify_all()
            if st.done is None and st.ready and st.cm_ok and st.cm_owner == st.uid and st.uid:
                st.done = now
                self._done_count += 1
                self._changed.notify_all()

    # --------------------------------------------------------------------- queries

    def wait_done(self, names: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not all(self._state[n].done is not None for n in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 1.0))
        return True

    def done_times(self) -> dict[str, float | None]:
        with self._lock:
            return {n: s.done for n, s in self._state.items()}

    def arm_drift(self, name: str) -> None:
        with self._lock:
            st = self._state[name]
            st.drift_armed, st.drift_seen, st.healed = True, False, None

    def wait_healed(self, names: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not all(self._state[n].healed is not None for n in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 1.0))
        return True

    def healed_times(self) -> dict[str, float | None]:
        with self._lock:
            return {n: s.healed for n, s in self._state.items() if s.drift_armed}
