"""When each bundle is done, and when each drifted ConfigMap is healed (S1, S2, S4-S8, APF).

For every bundle name the observer tracks whether the bundle is Ready for its generation
and whether its ConfigMap matches the expected content and is controlled by that bundle
(by UID). The first moment both hold is the bundle's "done" time. For drift (S2), a
patched name is armed; the first ConfigMap event after the drift event that shows
matching content again is its "healed" time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.operators.cluster import Expected, bundle_ready, content_ok, controller_uid
from bench.operators.watch import Stream, Tracker
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, KubeClient, Resource


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


class Observer(Tracker):
    """Watches bundles and ConfigMaps and records done/healed times per bundle name.

    Args:
        kube: a client (watches are not rate limited).
        namespace: the namespace under test; None: every namespace (then bundle names
            must be unique across namespaces).
        expected: bundle name -> what its ConfigMap must carry (names outside are ignored).
    """

    def __init__(
        self, kube: KubeClient, namespace: str | None, expected: Mapping[str, Expected]
    ) -> None:
        super().__init__(kube, [Stream(CONFIGBUNDLES, namespace), Stream(CONFIGMAPS, namespace)])
        self._expected = dict(expected)
        self._state = {name: _State() for name in expected}

    def handle(self, res: Resource, kind: str, obj: Mapping[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        st = self._state.get(str(meta.get("name", "")))
        if st is None:
            return
        if res is CONFIGBUNDLES:
            st.uid = meta.get("uid")
            st.ready = kind != "DELETED" and bundle_ready(obj)
        else:
            ok = kind != "DELETED" and content_ok(obj, self._expected[str(meta["name"])])
            st.cm_ok = ok
            st.cm_owner = controller_uid(obj) if kind != "DELETED" else None
            if st.drift_armed:
                if not ok:
                    st.drift_seen = True
                elif st.drift_seen and st.healed is None:
                    st.healed = now
                    self.changed()
        if st.done is None and st.ready and st.cm_ok and st.cm_owner == st.uid and st.uid:
            st.done = now
            self.changed()

    def wait_done(self, names: list[str], timeout: float) -> bool:
        return self.wait_until(lambda: all(self._state[n].done is not None for n in names), timeout)

    def done_times(self) -> dict[str, float | None]:
        with self._lock:
            return {n: s.done for n, s in self._state.items()}

    def arm_drift(self, name: str) -> None:
        with self._lock:
            st = self._state[name]
            st.drift_armed, st.drift_seen, st.healed = True, False, None

    def wait_healed(self, names: list[str], timeout: float) -> bool:
        return self.wait_until(
            lambda: all(self._state[n].healed is not None for n in names), timeout
        )

    def healed_times(self) -> dict[str, float | None]:
        with self._lock:
            return {n: s.healed for n, s in self._state.items() if s.drift_armed}
