"""S12's watches: the bundles and Deployments of a namespace as they converge
(:class:`Fanout`), and the bench's stand-in for a kubelet that marks new pods Ready
(:class:`ReadyPods`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.operators import cluster
from bench.operators.harness import log
from bench.operators.watch import Stream, Tracker, Watch
from cbop.kube import CONFIGBUNDLES, DEPLOYMENTS, PODS, ApiError, KubeClient, Resource
from cbop.revisions.model import mapping_of
from cbop.rollout import ANNOTATION_CONFIG_HASH, LABEL_CONFIG_BASELINE

#: The bundle that changes.
CHANGING = "b0"


@dataclass(slots=True)
class _Deployment:
    digest: str = ""
    mapping: dict[str, str] = field(default_factory=dict)
    baselined: bool = False
    complete: bool = False


def _complete(obj: Mapping[str, Any]) -> bool:
    """Whether a Deployment's rollout is complete: observed, every replica updated and
    available, no old one left."""
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    want = int(spec.get("replicas", 1))
    return (
        int(status.get("observedGeneration", 0)) >= int(meta.get("generation", 0))
        and int(status.get("updatedReplicas", 0)) == want
        and int(status.get("replicas", 0)) == want
        and int(status.get("availableReplicas", 0)) == want
    )


class Fanout(Tracker):
    """The bundles and Deployments of one S12 namespace, from watches.

    :meth:`arm` starts a round: the changing bundle's expected content hash (and
    revision), and each Deployment's digest before it; a Deployment has *rolled* at its
    first event with another digest (and, with a revision expected, a mapping naming
    it).
    """

    def __init__(self, kube: KubeClient, namespace: str, bundles: list[str]) -> None:
        super().__init__(kube, [Stream(CONFIGBUNDLES, namespace), Stream(DEPLOYMENTS, namespace)])
        self.bundles: dict[str, dict[str, Any]] = {}
        self.deployments: dict[str, _Deployment] = {}
        self._names = bundles
        self._want: tuple[str, str | None] | None = None
        self._before: dict[str, str] = {}
        self.bundle_done: float | None = None
        self.rolled: dict[str, float] = {}

    def handle(self, res: Resource, kind: str, obj: Mapping[str, Any], now: float) -> None:
        name = str(obj["metadata"]["name"])
        if res is CONFIGBUNDLES:
            status = obj.get("status") or {}
            self.bundles[name] = {
                "ready": kind != "DELETED" and cluster.bundle_ready(obj),
                "hash": status.get("contentHash"),
                "revision": status.get("revision"),
            }
            if name == CHANGING and self._want and self.bundle_done is None:
                b, (want, revision) = self.bundles[name], self._want
                if (
                    b["ready"]
                    and b["hash"] == want
                    and (revision is None or b["revision"] == revision)
                ):
                    self.bundle_done = now
        else:
            template = (obj.get("spec") or {}).get("template") or {}
            annotations = (template.get("metadata") or {}).get("annotations") or {}
            d = _Deployment(
                digest=str(annotations.get(ANNOTATION_CONFIG_HASH, "")),
                mapping=mapping_of(obj),
                baselined=LABEL_CONFIG_BASELINE in (obj["metadata"].get("labels") or {}),
                complete=_complete(obj),
            )
            self.deployments[name] = d
            if self._want and name not in self.rolled and d.digest != self._before.get(name):
                revision = self._want[1]
                if revision is None or d.mapping.get(CHANGING) == revision:
                    self.rolled[name] = now
        self.changed()

    # -- setup

    def set_up(self, total: int, revisions: bool, complete: bool) -> bool:
        """Whether ``total`` Deployments are baselined, (with ``complete``) have completed
        their rollout, and (with ``revisions``) carry a revision of every bundle."""
        ds = list(self.deployments.values())
        return len(ds) >= total and all(
            d.baselined
            and (d.complete or not complete)
            and (not revisions or all(n in d.mapping for n in self._names))
            for d in ds
        )

    def bundles_ready(self, revisions: bool) -> bool:
        return all(
            (b := self.bundles.get(n)) is not None
            and b["ready"]
            and (not revisions or bool(b["revision"]))
            for n in self._names
        )

    # -- rounds

    def arm(self, want_hash: str, revision: str | None) -> None:
        with self._lock:
            self._want = (want_hash, revision)
            self._before = {n: d.digest for n, d in self.deployments.items()}
            self.bundle_done = None
            self.rolled = {}

    def converged(self) -> bool:
        return self.bundle_done is not None and len(self.rolled) >= len(self.deployments)

    def complete(self) -> bool:
        return self.converged() and all(d.complete for d in self.deployments.values())

    def times(self) -> tuple[float | None, list[float]]:
        """The round's bundle-done time and the Deployments' rolled times (monotonic)."""
        with self._lock:
            return self.bundle_done, sorted(self.rolled.values())


class ReadyPods:
    """The bench's stand-in for a kubelet: every new pod of a namespace marked Ready.

    A watch on the namespace's pods queues each pod without a ``Ready=True`` condition;
    two threads patch its status (``conditions: [Ready=True]``, phase left Pending). A
    pod gone meanwhile is skipped.
    """

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self._kube = kube
        self._ns = namespace
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._seen: set[str] = set()
        self._watch = Watch(kube, [Stream(PODS, namespace)], self._on_pod)
        self._threads = [
            threading.Thread(target=self._work, name=f"ready-pods-{i}", daemon=True)
            for i in range(2)
        ]
        self.patched = 0

    def start(self) -> ReadyPods:
        for t in self._threads:
            t.start()
        self._watch.start()
        return self

    def stop(self) -> None:
        self._watch.stop()
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(10)

    def _on_pod(self, res: Resource, kind: str, obj: Mapping[str, Any], now: float) -> None:
        meta = obj["metadata"]
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            return
        conditions = (obj.get("status") or {}).get("conditions") or ()
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            return
        if meta["name"] not in self._seen:
            self._seen.add(meta["name"])
            self._queue.put(str(meta["name"]))

    def _work(self) -> None:
        body = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        while (name := self._queue.get()) is not None:
            try:
                self._kube.patch(
                    PODS, self._ns, name, body, subresource="status", patch_type="strategic"
                )
                self.patched += 1
            except ApiError as err:
                if not err.is_not_found:
                    log(f"S12: marking pod {name} Ready failed: {err}")
