"""The reconcile path of one source change read by N bundles, in process: CPU and a profile.

S10's layout (``bench/operators/sources.py``) on the project's fake API server
(``cbop_testing.fakekube``) instead of a control plane: one labelled source holding
``v`` and ``common.yaml`` (40 settings, about 1 KiB), read by ``--bundles`` (1,000)
ConfigBundles that each add a key of their own; with ``--merge``, each bundle also lists
``common.yaml`` in ``spec.merge`` and adds one setting to it in ``spec.data``. The bundles
are converged (created, their statuses written, reconciled once more), then the source's
``v`` changes and, as the operator does after the source's watch event, the source index
maps the source to its readers and each reader is reconciled three times: the pass that
writes its ConfigMap, the pass its ConfigMap's watch event brings, that writes its status,
and the pass the status's own watch event brings, that writes nothing.

With ``--secrets``, S13's shape instead: the source is a ``kubernetes.io/tls`` Secret
(about 3 KiB: ``tls.crt``, ``tls.key``, ``ca.crt``), each bundle keeps a Secret
(``target.kind: Secret``) from it alone, and the change renews ``tls.crt`` and
``tls.key``; the writes are one Secret update and one status patch per bundle.

With ``--thin``, the change's writes are answered by a stand-in that only bumps the
resourceVersion (no copies, no field tracking) and their watch events are the written
objects put in the caches between passes: the figure is then cbop's own reconcile code.

Reported: process CPU seconds of the three passes (best of ``--repeat``, and each
pass), writes by verb (one ConfigMap update and one status patch per bundle, checked),
and the share of ``cbop.api.compose.compose`` in it. ``--profile FILE`` writes a
cProfile of one change. The fake's own bookkeeping (its tracker, deep copies of what it
stores and returns) is part of the figure without ``--thin``; a real API server's JSON,
HTTP and watch never are.

    PYTHONPATH=src .venv/bin/python -m bench.sourcechange
    PYTHONPATH=src .venv/bin/python -m bench.sourcechange --merge --profile /tmp/s.prof
    PYTHONPATH=src .venv/bin/python -m bench.sourcechange --secrets --profile /tmp/s.prof
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import datetime
import os
import pstats
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from bench.quietlog import quiet_operator_logging
from cbop.configbundle import Reconciler
from cbop.configbundle.controller import (
    SECRET_SOURCE_PREFIX,
    SOURCE_INDEX,
    bundles_reading,
    index_by_source,
)
from cbop.informers import CONTROLLER_UID_INDEX, index_by_controller_uid
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, SECRETS, Resource
from cbop.secretaccess import DigestKey, SecretsScope
from cbop_testing.fakekube import CacheLister, FakeKube

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
SOURCE_NS = "s10-src"
COMMON = "".join(f"setting-{i:03d}: value-{i:03d}\n" for i in range(40))


def source_body(value: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "s10-source",
            "namespace": SOURCE_NS,
            "labels": {"cbop.dev/source": "true"},
        },
        "data": {"v": value, "common.yaml": COMMON},
    }


def _pem(kind: str, value: str, size: int) -> str:
    body = base64.b64encode((value * size).encode()[:size]).decode()
    return f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n"


def secret_source_body(value: str) -> dict[str, Any]:
    """S13's source: a TLS Secret whose certificate and key change with ``value``."""
    plain = {
        "tls.crt": _pem("CERTIFICATE", value, 900),
        "tls.key": _pem("PRIVATE KEY", value, 1200),
        "ca.crt": _pem("CERTIFICATE", "ca", 900),
    }
    return {
        "metadata": {
            "name": "s10-source",
            "namespace": SOURCE_NS,
            "labels": {"cbop.dev/source": "true"},
        },
        "type": "kubernetes.io/tls",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in plain.items()},
    }


def secret_bundle_body(i: int) -> dict[str, Any]:
    return {
        "apiVersion": CONFIGBUNDLES.api_version,
        "kind": CONFIGBUNDLES.kind,
        "metadata": {"name": f"r-{i:04d}", "namespace": SOURCE_NS, "generation": 1},
        "spec": {
            "target": {"kind": "Secret", "type": "kubernetes.io/tls"},
            "sources": [{"secret": {"name": "s10-source"}}],
        },
    }


def bundle_body(i: int, merge: bool) -> dict[str, Any]:
    name = f"r-{i:04d}"
    spec: dict[str, Any] = {
        "sources": [{"configMap": {"name": "s10-source"}}],
        "data": {"bundle": name},
    }
    if merge:
        spec["data"]["common.yaml"] = f"setting-{i % 40:03d}: own-{i}\n"
        spec["merge"] = [{"key": "common.yaml", "format": "yaml"}]
    return {
        "apiVersion": CONFIGBUNDLES.api_version,
        "kind": CONFIGBUNDLES.kind,
        "metadata": {"name": name, "namespace": SOURCE_NS, "generation": 1},
        "spec": spec,
    }


class World:
    """The fake API server, the informer caches synced from it, and one reconciler."""

    def __init__(self, bundles: int, merge: bool, secrets: bool = False) -> None:
        self.kube = FakeKube()
        #: The source's kind, and what each bundle keeps.
        self.kind: Resource = SECRETS if secrets else CONFIGMAPS
        self.kube.tracker.add(self.kind, secret_source_body("1") if secrets else source_body("1"))
        for i in range(bundles):
            body = secret_bundle_body(i) if secrets else bundle_body(i, merge)
            self.kube.tracker.add(CONFIGBUNDLES, body)
        self.bundles = CacheLister(indexers={SOURCE_INDEX: index_by_source})
        self.configmaps = CacheLister(indexers={CONTROLLER_UID_INDEX: index_by_controller_uid})
        self.sources = CacheLister()
        self.secret_targets = CacheLister(indexers={CONTROLLER_UID_INDEX: index_by_controller_uid})
        self.secret_sources = CacheLister()
        self.sync()
        extra: dict[str, Any] = {}
        if secrets:
            extra = {
                "secrets": SecretsScope(enabled=True),
                "secret_targets": self.secret_targets,
                "secret_sources": self.secret_sources,
                "digest_key": DigestKey(self.kube, SOURCE_NS, "cbop-digest-key"),
            }
        self.reconciler = Reconciler(
            client=self.kube,
            bundles=self.bundles,
            configmaps=self.configmaps,
            sources=self.sources,
            now=lambda: NOW,
            **extra,
        )
        self.readers = bundles_reading(self.bundles)  # type: ignore[arg-type]
        #: By "the source is a Secret": its readers.
        self.readers_of = {
            False: self.readers,
            True: bundles_reading(self.bundles, SECRET_SOURCE_PREFIX),  # type: ignore[arg-type]
        }

    def sync(self) -> None:
        tracker = self.kube.tracker
        self.bundles.sync(tracker, CONFIGBUNDLES)
        self.configmaps.sync(tracker, CONFIGMAPS)
        labelled = [
            o
            for o in tracker.objects(CONFIGMAPS)
            if (o["metadata"].get("labels") or {}).get("cbop.dev/source") == "true"
        ]
        self.sources.indexer.replace(labelled, tracker.resource_version)
        secrets = tracker.objects(SECRETS)
        managed = [
            o
            for o in secrets
            if (o["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "cbop"
        ]
        self.secret_targets.indexer.replace(managed, tracker.resource_version)
        sources = [
            o
            for o in secrets
            if (o["metadata"].get("labels") or {}).get("cbop.dev/source") == "true"
        ]
        self.secret_sources.indexer.replace(sources, tracker.resource_version)

    def writes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.kube.actions:
            if a.verb in ("get", "list") or a.resource == "events":
                continue
            verb = f"{a.verb}/{a.subresource}" if a.subresource else a.verb
            out[f"{verb} {a.resource}"] = out.get(f"{verb} {a.resource}", 0) + 1
        return out

    def converge(self) -> None:
        keys = [
            f"{SOURCE_NS}/{b['metadata']['name']}" for b in self.kube.tracker.objects(CONFIGBUNDLES)
        ]
        for _ in range(3):
            for key in keys:
                self.reconciler.reconcile(key)
            self.sync()

    def change(self, value: str, thin: bool = False) -> tuple[list[float], dict[str, int]]:
        """Change the source's ``v`` (a Secret: renew it); reconcile its readers three
        times (the targets, the statuses, the statuses' own events). Returns CPU s of each
        pass, writes."""
        current = self.kube.tracker.get(self.kind, SOURCE_NS, "s10-source")
        if self.kind is SECRETS:
            body = {**current, "data": secret_source_body(value)["data"]}
        else:
            body = {**current, "data": {**current["data"], "v": value}}
        self.kube.update(self.kind, SOURCE_NS, "s10-source", body)
        self.sync()
        self.kube.clear_actions()
        stand_in = Thin(self) if thin else None
        passes = []
        for _ in range(3):  # the ConfigMap writes, the statuses, then nothing
            started = time.process_time()
            cache = self.secret_sources if self.kind is SECRETS else self.sources
            changed = cache.get(SOURCE_NS, "s10-source")
            assert changed is not None
            for key in self.readers_of[self.kind is SECRETS](changed):
                self.reconciler.reconcile(key)
            passes.append(time.process_time() - started)
            if stand_in is not None:
                stand_in.deliver()
            else:
                self.sync()
        if stand_in is not None:
            stand_in.close()
            return passes, stand_in.writes
        return passes, self.writes()


class Thin:
    """The change's writes answered without the fake's work (see the module docstring)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.writes: dict[str, int] = {}
        self._written: list[tuple[str, dict[str, Any]]] = []
        self._version = 10**9 + int(world.kube.tracker.resource_version)
        self._update, self._patch = world.kube.update, world.kube.patch
        world.kube.update = self.update  # type: ignore[method-assign,assignment]
        world.kube.patch = self.patch  # type: ignore[method-assign,assignment]

    def close(self) -> None:
        self.world.kube.update = self._update  # type: ignore[method-assign]
        self.world.kube.patch = self._patch  # type: ignore[method-assign]

    def _answer(self, kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        self._version += 1
        out = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self._version)}}
        self._written.append((kind, out))
        return out

    def update(self, res: Any, namespace: str, name: str, body: Any, **_: Any) -> Any:
        self.writes[f"update {res.plural}"] = self.writes.get(f"update {res.plural}", 0) + 1
        return self._answer(res.plural, body)

    def patch(self, res: Any, namespace: str, name: str, body: Any, **kw: Any) -> Any:
        verb = f"patch/{kw['subresource']}" if kw.get("subresource") else "patch"
        self.writes[f"{verb} {res.plural}"] = self.writes.get(f"{verb} {res.plural}", 0) + 1
        cached = self.world.bundles.get(namespace, name)
        assert cached is not None, name
        assert set(body) == {"status"}, body
        status = {**(cached.get("status") or {}), **body["status"]}
        return self._answer(res.plural, {**cached, "status": status})

    def deliver(self) -> None:
        """The watch events of the pass's writes: the written objects into the caches."""
        for kind, obj in self._written:
            caches = {"configmaps": self.world.configmaps, "secrets": self.world.secret_targets}
            cache = caches.get(kind, self.world.bundles)
            cache.indexer.update(obj)
        self._written = []


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sourcechange", description=__doc__)
    parser.add_argument("--bundles", type=int, default=1000, help="readers of the source")
    parser.add_argument("--merge", action="store_true", help="each merges common.yaml")
    parser.add_argument("--secrets", action="store_true", help="S13's shape: Secrets")
    parser.add_argument("--repeat", type=int, default=3, help="changes; the best counts")
    parser.add_argument("--profile", help="write a cProfile of one change to this file")
    parser.add_argument("--thin", action="store_true", help="writes answered by a stand-in")
    args = parser.parse_args(argv)
    quiet_operator_logging()
    world = World(args.bundles, args.merge, args.secrets)
    world.converge()
    runs, by_pass = [], []
    for n in range(args.repeat):
        passes, writes = world.change(str(n + 2), thin=args.thin)
        target = "secrets" if args.secrets else "configmaps"
        expected = {f"update {target}": args.bundles, "patch/status configbundles": args.bundles}
        assert writes == expected, writes
        runs.append(sum(passes))
        by_pass.append(passes)
    share = ""
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        world.change("profiled", thin=args.thin)
        profiler.disable()
        profiler.dump_stats(args.profile)
        stats = pstats.Stats(args.profile)
        total = max(v[3] for v in stats.stats.values())  # type: ignore[attr-defined]
        composed = sum(
            v[3]
            for k, v in stats.stats.items()  # type: ignore[attr-defined]
            if k[2] == "compose" and k[0].endswith("compose.py")
        )
        share = f"; compose {100 * composed / total:.1f} % of the profiled change"
        pstats.Stats(args.profile, stream=sys.stderr).sort_stats("tottime").print_stats(30)
    print(f"Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}")
    shape = "merging common.yaml" if args.merge else "no merge"
    if args.secrets:
        shape = "Secret targets from a renewed TLS Secret"
    shape += ", writes answered by a stand-in" if args.thin else ""
    best = by_pass[runs.index(min(runs))]
    print(
        f"{args.bundles} readers, {shape}: CPU s per change "
        + " / ".join(f"{r:.3f}" for r in runs)
        + f" (best {min(runs):.3f}; {1000 * min(runs) / args.bundles:.3f} ms per reader; "
        + ("Secrets" if args.secrets else "ConfigMaps")
        + " / statuses / their events "
        + " / ".join(f"{p:.3f}" for p in best)
        + f"){share}"
    )


if __name__ == "__main__":
    main()
