"""What the audit log says of one client's writes, object by object (S12).

S12 logs the writes on ConfigMaps, Events, ConfigBundles and Deployments in its
namespaces at ``RequestResponse`` level (:func:`request_response_rules`), so that the
bench can tell, from the requests themselves:

- **conflicts**: each object's writes in order, and the runs of writes answered 409 (a
  run of two is a request answered 409 whose retry was answered 409 again);
- **sizes**: the largest body sent and the largest object stored by each kind of write;
- **status writes** of ConfigBundles: what each changed against the status before it
  (ordered by resourceVersion), to count the writes only the ``Pinned`` condition caused.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench.operators.scenarios.revisions_census import client_of, object_of, write_json_size

#: The condition the revisions' verification writes on a bundle.
PINNED = "Pinned"


def request_response_rules(namespaces: Sequence[str]) -> str:
    """Audit policy rules (YAML list items) logging the writes on ConfigMaps, Events,
    ConfigBundles (and their status) and Deployments (not their status) in
    ``namespaces`` at ``RequestResponse`` level."""
    listed = ", ".join(f'"{ns}"' for ns in namespaces)
    return f"""\
  - level: RequestResponse
    verbs: ["create", "update", "patch", "delete"]
    namespaces: [{listed}]
    resources:
      - group: ""
        resources: ["configmaps", "events"]
      - group: "cbop.dev"
        resources: ["configbundles", "configbundles/status"]
      - group: "apps"
        resources: ["deployments"]
      - group: "events.k8s.io"
        resources: ["events"]
"""


def stamp(event: Mapping[str, Any]) -> float:
    """The epoch seconds of an audit event's ``stageTimestamp`` (0 when it has none)."""
    text = event.get("stageTimestamp")
    if not isinstance(text, str):
        return 0.0
    return datetime.datetime.fromisoformat(text).timestamp()


def within(
    events: Iterable[Mapping[str, Any]], start: float, end: float
) -> list[Mapping[str, Any]]:
    """The events whose :func:`stamp` is in ``[start, end)`` (epoch seconds)."""
    return [e for e in events if start <= stamp(e) < end]


def _key(event: Mapping[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    return f"{event['verb']} {object_of(ref)} {ref.get('name', '')}"


def _code(event: Mapping[str, Any]) -> int:
    return int((event.get("responseStatus") or {}).get("code", 0))


def _mine(events: Iterable[Mapping[str, Any]], client: str) -> list[Mapping[str, Any]]:
    return [e for e in events if client_of(str(e.get("userAgent", "?"))) == client]


def conflicts(events: Iterable[Mapping[str, Any]], client: str = "cbop") -> dict[str, Any]:
    """The 409 answers to ``client``'s writes, object by object.

    Returns:
        ``answered_409``: writes answered 409; ``runs``: runs of consecutive 409s on
        one object and verb (a run ends with the next write of that object and verb
        answered otherwise, or with the log); ``retried_more_than_once``: runs of two or
        more; ``longest``: the longest run; ``by_object``: 409s by ``verb object``;
        ``examples``: up to 5 keys of the longest runs.
    """
    run: dict[str, int] = {}
    runs: list[tuple[int, str]] = []
    by_object: dict[str, int] = {}
    answered = 0
    for event in _mine(events, client):
        key = _key(event)
        if _code(event) == 409:
            answered += 1
            what = key.rsplit(" ", 1)[0]
            by_object[what] = by_object.get(what, 0) + 1
            run[key] = run.get(key, 0) + 1
        elif run.get(key):
            runs.append((run.pop(key), key))
    runs += [(n, key) for key, n in run.items() if n]
    runs.sort(reverse=True)
    return {
        "answered_409": answered,
        "runs": len(runs),
        "retried_more_than_once": sum(1 for n, _ in runs if n >= 2),
        "longest": runs[0][0] if runs else 0,
        "by_object": dict(sorted(by_object.items())),
        "examples": [f"{key} x{n}" for n, key in runs[:5] if n >= 2],
    }


def sizes(events: Iterable[Mapping[str, Any]], client: str = "cbop") -> dict[str, Any]:
    """The largest body ``client`` sent and the largest object stored by its writes.

    Returns:
        ``object object`` (the largest stored object of each kind, bytes of compact
        JSON, with its name) and ``sent`` (the same for request bodies), by ``object``
        (:func:`~bench.operators.scenarios.revisions_census.object_of`); ``max_object``
        and ``max_sent`` over all of them. Deletes are left out.
    """
    stored: dict[str, dict[str, Any]] = {}
    sent: dict[str, dict[str, Any]] = {}
    for event in _mine(events, client):
        if event["verb"] == "delete" or _code(event) >= 300:
            continue
        ref = event.get("objectRef") or {}
        what = object_of(ref)
        for into, field in ((stored, "responseObject"), (sent, "requestObject")):
            body = event.get(field)
            if body is None:
                continue
            n = write_json_size(body)
            if n > into.get(what, {}).get("bytes", -1):
                into[what] = {"bytes": n, "name": str(ref.get("name", ""))}
    return {
        "object": dict(sorted(stored.items())),
        "sent": dict(sorted(sent.items())),
        "max_object": max((v["bytes"] for v in stored.values()), default=0),
        "max_sent": max((v["bytes"] for v in sent.values()), default=0),
    }


def _conditions(status: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
    out = {}
    for c in status.get("conditions") or ():
        out[str(c.get("type"))] = (
            c.get("status"),
            c.get("reason"),
            c.get("message"),
            c.get("observedGeneration"),
        )
    return out


def _split(status: Mapping[str, Any]) -> tuple[tuple[Any, ...] | None, Any]:
    conditions = _conditions(status)
    pinned = conditions.pop(PINNED, None)
    rest = {k: v for k, v in status.items() if k != "conditions"}
    return pinned, (sorted(rest.items(), key=str), sorted(conditions.items()))


def status_writes(
    events: Iterable[Mapping[str, Any]],
    windows: Mapping[str, tuple[float, float]],
    client: str = "cbop",
) -> dict[str, dict[str, Any]]:
    """``client``'s ConfigBundle status writes in each window, by what each changed.

    Each write's stored status (``responseObject``) is compared with the one before it
    for the same bundle (ordered by resourceVersion over all of ``events``; the first
    write against an empty status), then counted in the window (epoch seconds,
    ``[start, end)``) its :func:`stamp` falls in.

    Returns:
        window name -> ``writes`` (answered 2xx), ``pinned_only`` (only the ``Pinned``
        condition changed), ``pinned_and_more`` (``Pinned`` and something else),
        ``other`` (``Pinned`` unchanged, something else changed), ``unchanged``
        (nothing), and ``pinned_reasons``: the ``Pinned`` reasons the ``pinned_only``
        writes set, by count.
    """
    by_bundle: dict[str, list[tuple[int, float, Mapping[str, Any]]]] = {}
    for event in _mine(events, client):
        ref = event.get("objectRef") or {}
        if ref.get("resource") != "configbundles" or ref.get("subresource") != "status":
            continue
        obj = event.get("responseObject")
        if not isinstance(obj, Mapping) or _code(event) >= 300:
            continue
        rv = int((obj.get("metadata") or {}).get("resourceVersion") or 0)
        by_bundle.setdefault(str(ref.get("name")), []).append(
            (rv, stamp(event), obj.get("status") or {})
        )
    out = {
        name: {"writes": 0, "pinned_only": 0, "pinned_and_more": 0, "other": 0, "unchanged": 0}
        for name in windows
    }
    reasons: dict[str, dict[str, int]] = {name: {} for name in windows}
    for writes in by_bundle.values():
        before: Mapping[str, Any] = {}
        for _, at, status in sorted(writes, key=lambda w: w[0]):
            (p0, rest0), (p1, rest1) = _split(before), _split(status)
            before = status
            window = next((n for n, (a, b) in windows.items() if a <= at < b), None)
            if window is None:
                continue
            counts = out[window]
            counts["writes"] += 1
            pinned, other = p0 != p1, rest0 != rest1
            if pinned and not other:
                counts["pinned_only"] += 1
                reason = str(p1[1]) if p1 else "removed"
                reasons[window][reason] = reasons[window].get(reason, 0) + 1
            elif pinned:
                counts["pinned_and_more"] += 1
            elif other:
                counts["other"] += 1
            else:
                counts["unchanged"] += 1
    return {
        name: {**out[name], "pinned_reasons": dict(sorted(reasons[name].items()))}
        for name in windows
    }
