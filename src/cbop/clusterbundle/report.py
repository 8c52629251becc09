"""The channel from stamping shards to the status writer: one annotation per shard.

Under ``--shards`` one replica writes a ClusterConfigBundle's status from cluster-wide
caches, but two failures show in no stamp: an admission refusal, and a foreign
ConfigBundle in the stamp's way. Each shard reports its own in an annotation key of its
own (``cbop.dev/failed-in-shard-<i>-of-<N>``), written by a merge patch of that key
alone, so shards never conflict with each other or with the status writer. Pure
functions; :class:`cbop.clusterbundle.reconcile.ReportReconciler` writes and
:class:`cbop.clusterbundle.reconcile.StatusReconciler` reads. Only the first
:data:`cbop.api.MAX_FAILED_NAMESPACES` failed namespaces carry a message, so a thousand
refusals stay far below the annotation size limit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from cbop.api import MAX_FAILED_NAMESPACES
from cbop.clusterbundle.decision import Failure

__all__ = [
    "MAX_MESSAGE",
    "REPORT_PREFIX",
    "decode",
    "encode",
    "report_key",
    "reported",
]

#: The annotation key prefix of a shard's report.
REPORT_PREFIX: Final = "cbop.dev/failed-in-shard-"
#: Characters of a message kept in a report.
MAX_MESSAGE: Final = 512

_KEY = re.compile(r"^cbop\.dev/failed-in-shard-(\d+)-of-(\d+)$")


def report_key(index: int, count: int) -> str:
    """Return the annotation key of shard ``index`` of ``count`` (``...-1-of-3``)."""
    return f"{REPORT_PREFIX}{index}-of-{count}"


def encode(failures: Iterable[Failure]) -> str | None:
    """Return the annotation value for ``failures`` (None when there is none).

    Deterministic (sorted by namespace, compact JSON), so an unchanged report is an
    equal string and nothing is written.
    """
    by_namespace = {f.namespace: f for f in failures}
    if not by_namespace:
        return None
    out: dict[str, list[str]] = {}
    for i, namespace in enumerate(sorted(by_namespace)):
        failure = by_namespace[namespace]
        if i < MAX_FAILED_NAMESPACES:
            out[namespace] = [failure.reason, failure.message[:MAX_MESSAGE]]
        else:
            out[namespace] = [failure.reason]
    return json.dumps(out, separators=(",", ":"), sort_keys=True)


def decode(value: str | None) -> list[Failure]:
    """Return the failures of one annotation value (an unreadable value: none)."""
    if not value:
        return []
    try:
        parsed = json.loads(value)
    except ValueError:
        return []
    if not isinstance(parsed, dict):
        return []
    out = []
    for namespace, entry in sorted(parsed.items()):
        if isinstance(entry, list) and entry and all(isinstance(e, str) for e in entry):
            out.append(Failure(str(namespace), entry[0], entry[1] if len(entry) > 1 else ""))
    return out


def reported(cluster_bundle: Mapping[str, Any], count: int) -> list[Failure]:
    """Return every failure the shards of a ``count``-shard group report on it.

    Reports of another shard count (left by an earlier group) are ignored.
    """
    annotations = (cluster_bundle.get("metadata") or {}).get("annotations") or {}
    out: list[Failure] = []
    for key in sorted(annotations):
        match = _KEY.match(str(key))
        if match is not None and int(match.group(2)) == count:
            out.extend(decode(annotations[key]))
    return out
