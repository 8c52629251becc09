"""What the revisions scenarios read from kube-apiserver's audit log (S11, S12).

Audit events as kube-apiserver writes them (JSON lines, ``ResponseComplete`` stage), the
bench's classification of each write: by client, by object (a revision apart from a plain
ConfigMap), the runs of 409 answers, the sizes of what was written, and the ConfigBundle
status writes only the ``Pinned`` condition caused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.operators.apiserver import AuditLog
from bench.operators.scenarios import revisions_audit as audited
from bench.operators.scenarios.revisions_census import (
    by_client,
    by_controller,
    write_events,
    write_list,
    writes_since,
)

CBOP = "cbop/0.3.0 (linux/amd64)"
GC = "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abc/generic-garbage-collector"


def event(
    verb: str,
    resource: str,
    name: str,
    code: int = 200,
    *,
    agent: str = CBOP,
    namespace: str = "s12-on",
    subresource: str | None = None,
    at: str = "2026-12-07T10:00:00.000000Z",
    response: Any = None,
    request: Any = None,
) -> dict[str, Any]:
    ref = {"resource": resource, "namespace": namespace, "name": name}
    if subresource:
        ref["subresource"] = subresource
    out: dict[str, Any] = {
        "stage": "ResponseComplete",
        "verb": verb,
        "objectRef": ref,
        "userAgent": agent,
        "responseStatus": {"code": code},
        "stageTimestamp": at,
    }
    if response is not None:
        out["responseObject"] = response
    if request is not None:
        out["requestObject"] = request
    return out


def audit_of(tmp_path: Path, events: list[dict[str, Any]]) -> AuditLog:
    path = tmp_path / "audit.log"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return AuditLog(path)


def test_writes_are_told_apart_by_client_and_by_object(tmp_path: Path) -> None:
    log = audit_of(
        tmp_path,
        [
            event("create", "configmaps", "b0-0123456789", 201),
            event("update", "configmaps", "b0"),
            event("delete", "configmaps", "b0-abcdef0123"),
            event("patch", "configbundles", "b0", subresource="status"),
            event("patch", "configmaps", "b0-abcdef0123", agent=GC),
            event("get", "configmaps", "b0"),
            event("update", "configmaps", "b0", namespace="elsewhere"),
        ],
    )
    writes = writes_since(log, ["s12-on"])
    assert by_client(writes, "cbop") == {
        "create configmaps(revision) 201": 1,
        "delete configmaps(revision) 200": 1,
        "patch configbundles/status 200": 1,
        "update configmaps 200": 1,
    }
    assert by_controller(writes) == {"generic-garbage-collector patch configmaps(revision) 200": 1}
    assert write_list(log, ["s12-on"], "cbop")[0] == "create configmaps(revision) b0-0123456789 201"
    assert len(list(write_events(log, None))) == 6


def test_conflicts_count_runs_of_409_on_one_object() -> None:
    events = [
        event("patch", "deployments", "d000", 409),
        event("patch", "deployments", "d000", 200),
        event("update", "configmaps", "b0", 409),
        event("update", "configmaps", "b0", 409),
        event("update", "configmaps", "b0", 200),
        event("patch", "deployments", "d001", 409, agent=GC),
        event("patch", "deployments", "d002", 409),
    ]
    found = audited.conflicts(events)
    assert found["answered_409"] == 4
    # d000 once then done; b0 twice in a row; d002 once, never retried.
    assert found["runs"] == 3
    assert found["retried_more_than_once"] == 1
    assert found["longest"] == 2
    assert found["examples"] == ["update configmaps b0 x2"]
    assert found["by_object"] == {"patch deployments": 2, "update configmaps": 2}


def test_sizes_are_the_largest_body_sent_and_object_stored_by_kind() -> None:
    small, large = {"data": {"k": "v"}}, {"data": {"k": "v" * 100}}
    events = [
        event("create", "configmaps", "b0-0123456789", 201, request=small, response=small),
        event("update", "configmaps", "b0", request=small, response=large),
        event("update", "configmaps", "b1", 409, request=large, response={"kind": "Status"}),
        event("delete", "configmaps", "b0-0123456789", response=large),
        event("patch", "deployments", "d000", agent=GC, response={"big": "x" * 999}),
    ]
    found = audited.sizes(events)
    assert found["object"] == {
        "configmaps": {"bytes": len(json.dumps(large, separators=(",", ":"))), "name": "b0"},
        "configmaps(revision)": {
            "bytes": len(json.dumps(small, separators=(",", ":"))),
            "name": "b0-0123456789",
        },
    }
    assert found["max_object"] == found["object"]["configmaps"]["bytes"]
    assert found["max_sent"] == len(json.dumps(small, separators=(",", ":")))


def status(rv: int, content: str, pinned: tuple[str, str] | None) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True", "reason": "Synced", "message": "ok"}]
    if pinned is not None:
        conditions.append(
            {"type": "Pinned", "status": pinned[0], "reason": pinned[1], "message": pinned[1]}
        )
    return {
        "metadata": {"resourceVersion": str(rv)},
        "status": {"contentHash": content, "conditions": conditions},
    }


def test_status_writes_tell_those_only_pinned_caused() -> None:
    def write(at: str, body: dict[str, Any], name: str = "b0") -> dict[str, Any]:
        return event(
            "patch",
            "configbundles",
            name,
            subresource="status",
            at=f"2026-12-07T10:00:{at}.000000Z",
            response=body,
        )

    events = [
        # Out of order in the log: ordered by resourceVersion.
        write("02", status(12, "h1", ("False", "NotPinnedYet"))),
        write("01", status(11, "h1", ("True", "NothingToPin"))),
        write("03", status(13, "h1", ("True", "Pinned"))),
        write("10", status(20, "h2", ("True", "Pinned"))),
        write("11", status(21, "h2", ("True", "Pinned"))),
        write("12", status(22, "h3", ("False", "PodNotPinned"))),
        write("13", status(30, "h1", None), name="b1"),
    ]
    start = audited.stamp(events[1])
    split = audited.stamp(events[3])
    found = audited.status_writes(
        events, {"setup": (start, split), "rounds": (split, start + 3600)}
    )
    assert found["setup"] == {
        "writes": 3,
        "pinned_only": 2,
        "pinned_and_more": 1,
        "other": 0,
        "unchanged": 0,
        "pinned_reasons": {"NotPinnedYet": 1, "Pinned": 1},
    }
    assert found["rounds"] == {
        "writes": 4,
        "pinned_only": 0,
        "pinned_and_more": 1,
        "other": 2,
        "unchanged": 1,
        "pinned_reasons": {},
    }
