"""What kube-apiserver says it served: request counts, the quiet-wait, and its audit log.

Counts come from kube-apiserver's own ``apiserver_request_total``, so every client is
counted the same way; the bench subtracts its own requests (its client counts them) to
leave the operator's. The audit log adds what that metric lacks: who made a request.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from cbop.kube import KubeClient

#: (verb, resource, subresource) -> count, as kube-apiserver labels apiserver_request_total.
RequestCounts = dict[tuple[str, str, str], float]
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})
READ_VERBS = frozenset({"GET", "LIST", "WATCH"})
#: The resources an operator of bundles touches.
BUNDLE_RESOURCES = frozenset({"configbundles", "configmaps", "events"})
#: KubeClient verbs -> kube-apiserver's verb label.
_VERBS = {"create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE"}
_VERBS |= {"get": "GET", "list": "LIST", "watch": "WATCH"}
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def raw_get(kube: KubeClient, path: str) -> str:
    """GET a non-JSON path (``/metrics``) with the client's credentials."""
    api = kube._transport.api_client
    response = api.rest_client.pool_manager.request(
        "GET", api.configuration.host + path, headers=api.default_headers, preload_content=True
    )
    if response.status != 200:
        raise RuntimeError(f"GET {path}: {response.status} {response.data[:200]!r}")
    return str(response.data.decode())


def samples(kube: KubeClient, *families: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """``(family, labels, value)`` of every sample of ``families`` on kube-apiserver's
    ``/metrics``.

    Only those families' lines are parsed: the whole page is megabytes, and a full parse
    would take seconds of the CPU the operators under test need.
    """
    prefixes = [(f + "{", f) for f in families]
    for line in raw_get(kube, "/metrics").splitlines():
        for prefix, family in prefixes:
            if line.startswith(prefix):
                labels_text, _, value = line[len(prefix) :].rpartition("} ")
                yield family, dict(_LABEL.findall(labels_text)), float(value.split()[0])


def apiserver_requests(kube: KubeClient) -> RequestCounts:
    """``apiserver_request_total`` summed by (verb, resource, subresource)."""
    out: RequestCounts = {}
    for _, labels, value in samples(kube, "apiserver_request_total"):
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
        out[key] = out.get(key, 0.0) + value
    return out


def write_codes(kube: KubeClient, resources: Collection[str]) -> dict[str, float]:
    """Write requests on ``resources`` by ``verb|resource|subresource|code``
    (``apiserver_request_total``), to tell lost races (409) from writes that landed."""
    out: dict[str, float] = {}
    for _, labels, value in samples(kube, "apiserver_request_total"):
        verb, res = labels.get("verb", ""), labels.get("resource", "")
        if verb not in WRITE_VERBS or res not in resources:
            continue
        key = "|".join((verb, res, labels.get("subresource", ""), labels.get("code", "")))
        out[key] = out.get(key, 0.0) + value
    return out


def delta(after: RequestCounts, before: RequestCounts) -> RequestCounts:
    out = {k: v - before.get(k, 0.0) for k, v in after.items()}
    return {k: v for k, v in out.items() if v > 0}


def code_delta(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def own_requests(
    before: Mapping[tuple[str, str], int], after: Mapping[tuple[str, str], int]
) -> RequestCounts:
    """The bench client's own requests between two snapshots, keyed like the apiserver's."""
    out: RequestCounts = {}
    for (verb, resource), count in after.items():
        diff = count - before.get((verb, resource), 0)
        if diff:
            res, _, sub = resource.partition("/")
            key = (_VERBS.get(verb, verb.upper()), res, sub)
            out[key] = out.get(key, 0.0) + diff
    return out


def subtract(total: RequestCounts, own: RequestCounts) -> RequestCounts:
    out = {k: v - own.get(k, 0.0) for k, v in total.items()}
    return {k: v for k, v in out.items() if v > 0}


def writes(api: RequestCounts, resource: str, subresource: str = "") -> float:
    """The write requests of ``api`` on one resource (and subresource)."""
    return sum(
        v
        for (verb, res, sub), v in api.items()
        if verb in WRITE_VERBS and res == resource and sub == subresource
    )


def writes_on(api: RequestCounts, resources: Collection[str]) -> dict[str, float]:
    """``verb|resource|subresource`` -> count of the write requests of ``api`` on
    ``resources`` (subresources included)."""
    return {"|".join(k): v for k, v in api.items() if k[0] in WRITE_VERBS and k[1] in resources}


def keyed(api: RequestCounts) -> dict[str, float]:
    """``api`` keyed ``verb|resource|subresource``, sorted (as records store it)."""
    return {"|".join(k): v for k, v in sorted(api.items())}


class Counter:
    """kube-apiserver's request counts since :meth:`mark`, minus the bench's own.

    ``before``: the counts at :meth:`mark`.
    ``codes``: resources whose writes are also counted by answer code (:meth:`codes`).
    """

    def __init__(self, kube: KubeClient, codes: Collection[str] = ()) -> None:
        self._kube = kube
        self._resources = frozenset(codes)
        self.before: RequestCounts = {}
        self._own: dict[tuple[str, str], int] = {}
        self._codes: dict[str, float] = {}

    def mark(self) -> Counter:
        self.before = apiserver_requests(self._kube)
        self._own = self._kube.request_counts()
        if self._resources:
            self._codes = write_codes(self._kube, self._resources)
        return self

    def own(self) -> RequestCounts:
        """The bench client's own requests since :meth:`mark`."""
        return own_requests(self._own, self._kube.request_counts())

    def since(self) -> RequestCounts:
        own = self.own()
        return subtract(delta(apiserver_requests(self._kube), self.before), own)

    def codes(self) -> dict[str, float]:
        """Writes on the ``codes`` resources since :meth:`mark` by
        ``verb|resource|subresource|code`` (the bench's own included)."""
        return code_delta(write_codes(self._kube, self._resources), self._codes)


def wait_api_quiet(
    kube: KubeClient,
    *,
    resources: Collection[str] = BUNDLE_RESOURCES,
    verbs: Collection[str] | None = None,
    quiet: float = 2.0,
    timeout: float = 60.0,
) -> float:
    """Wait until no request with one of ``verbs`` (None: any but WATCH, since a watch
    held open is no activity) touches ``resources`` for ``quiet`` seconds, polling
    ``apiserver_request_total`` every 0.5 s; return the seconds waited.

    With the defaults: no request but a watch on bundles, ConfigMaps or Events for 2 s,
    so that the garbage collector's and the namespace controller's work after a namespace
    is gone is not charged to the next operator. With ``verbs=WRITE_VERBS``: the writes
    a change set off have stopped.
    """
    start = time.monotonic()
    last = apiserver_requests(kube)
    calm_since = time.monotonic()
    while time.monotonic() - start < timeout:
        time.sleep(0.5)
        now = apiserver_requests(kube)
        moved = any(
            k[1] in resources and (k[0] in verbs if verbs is not None else k[0] != "WATCH")
            for k in delta(now, last)
        )
        last = now
        if moved:
            calm_since = time.monotonic()
        elif time.monotonic() - calm_since >= quiet:
            break
    return time.monotonic() - start


# ------------------------------------------------------------------------- audit log

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    verbs: ["get"]
    resources:
      - group: "cbop.dev"
        resources: ["configbundles"]
      - group: ""
        resources: ["configmaps", "events"]
  - level: None
"""


def audit_flags(workdir: Path, extra_rules: str = "") -> list[str]:
    """kube-apiserver flags that log only single-object GETs of our resources, and what
    ``extra_rules`` (audit policy rules, YAML list items) adds.

    apiserver_request_total has no client label; this log tells who made the reads
    outside list/watch (an operator, or kube-controller-manager's garbage collector).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    policy = workdir / "audit-policy.yaml"
    last = "  - level: None\n"
    policy.write_text(AUDIT_POLICY.replace(last, extra_rules + last))
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={workdir / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-maxsize=0",
    ]


class AuditLog:
    """The audit log's events since :meth:`mark` (JSON lines; unreadable lines skipped)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def mark(self) -> AuditLog:
        self._offset = self.path.stat().st_size if self.path.exists() else 0
        return self

    def events(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self._offset)
            for line in f:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue

    def count(self, key: Callable[[dict[str, Any]], str | None]) -> dict[str, int]:
        """Events since :meth:`mark` counted by ``key(event)`` (None: not counted)."""
        out: dict[str, int] = {}
        for event in self.events():
            k = key(event)
            if k is not None:
                out[k] = out.get(k, 0) + 1
        return out

    def gets(self) -> dict[str, int]:
        """The audited GETs since :meth:`mark` by ``<client> <resource>`` (the client is
        the user agent's first word)."""

        def key(event: dict[str, Any]) -> str:
            agent = str(event.get("userAgent", "?")).split("/")[0].split(" ")[0]
            return f"{agent} {(event.get('objectRef') or {}).get('resource', '?')}"

        return self.count(key)
