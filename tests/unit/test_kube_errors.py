from __future__ import annotations

import json

import pytest

from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, LEASES, NAMESPACES, ApiError, ConnectionFailed
from cbop.kube.errors import parse_retry_after


def _status(code: int, reason: str, message: str, **details: object) -> bytes:
    body: dict[str, object] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return json.dumps(body).encode()


def test_not_found_status_body_is_parsed() -> None:
    err = ApiError.from_response(
        404, {}, _status(404, "NotFound", 'configmaps "x" not found', name="x", kind="configmaps")
    )
    assert err.status == 404
    assert err.reason == "NotFound"
    assert err.message == 'configmaps "x" not found'
    assert err.is_not_found
    assert not err.is_conflict
    assert not err.is_gone
    assert err.body is not None
    assert err.body["details"]["name"] == "x"
    assert err.retry_after is None
    assert "404 NotFound" in str(err)


def test_conflict_and_already_exists_are_distinguished() -> None:
    conflict = ApiError.from_response(409, {}, _status(409, "Conflict", "the object was modified"))
    exists = ApiError.from_response(409, {}, _status(409, "AlreadyExists", "already exists"))
    assert conflict.is_conflict
    assert not conflict.is_already_exists
    assert exists.is_already_exists
    assert not exists.is_conflict


def test_gone_covers_expired_and_gone() -> None:
    expired = ApiError.from_status(
        {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
    )
    assert expired.status == 410
    assert expired.is_gone
    bare = ApiError.from_response(410, {}, b"")
    assert bare.reason == "Gone"
    assert bare.is_gone


def test_non_status_body_falls_back_to_the_code() -> None:
    err = ApiError.from_response(503, {}, b"<html>upstream unavailable</html>")
    assert err.reason == "ServiceUnavailable"
    assert err.message == "<html>upstream unavailable</html>"
    assert err.body is None
    assert err.is_server_error
    invalid = ApiError.from_response(422, {}, b"")
    assert invalid.is_invalid
    forbidden = ApiError.from_response(403, {}, b"{}")
    assert forbidden.is_forbidden


def test_retry_after_header_wins_over_status_details() -> None:
    body = _status(429, "TooManyRequests", "slow down", retryAfterSeconds=7)
    from_details = ApiError.from_response(429, {}, body)
    assert from_details.is_too_many_requests
    assert from_details.retry_after == 7.0
    from_header = ApiError.from_response(429, {"Retry-After": "2"}, body)
    assert from_header.retry_after == 2.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("3", 3.0),
        (" 0 ", 0.0),
        ("1.5", 1.5),
        ("-1", None),
        ("soon", None),
        ("", None),
        (None, None),
        ("nan", None),
    ],
)
def test_parse_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


def test_parse_retry_after_http_date() -> None:
    # 2015-10-21 07:28:00 GMT is 1445412480.
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0


def test_connection_failed_is_an_api_error_with_status_zero() -> None:
    err = ConnectionFailed("refused", cause=ConnectionRefusedError())
    assert isinstance(err, ApiError)
    assert err.status == 0
    assert not err.is_not_found
    assert not err.timed_out
    assert ConnectionFailed("slow", timed_out=True).reason == "Timeout"


def test_resource_paths() -> None:
    assert CONFIGMAPS.api_version == "v1"
    assert CONFIGMAPS.path() == "/api/v1/configmaps"
    assert CONFIGMAPS.path("ns", "cm") == "/api/v1/namespaces/ns/configmaps/cm"
    assert CONFIGBUNDLES.api_version == "cbop.dev/v1beta1"
    assert (
        CONFIGBUNDLES.path("a", "b", "status")
        == "/apis/cbop.dev/v1beta1/namespaces/a/configbundles/b/status"
    )
    assert (
        LEASES.path("kube-system") == "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    )
    assert NAMESPACES.path(name="x") == "/api/v1/namespaces/x"
    assert CONFIGMAPS.path("ns", "a/b") == "/api/v1/namespaces/ns/configmaps/a%2Fb"
    with pytest.raises(ValueError, match="cluster-scoped"):
        NAMESPACES.path("ns")
    with pytest.raises(ValueError, match="subresource"):
        CONFIGMAPS.path("ns", None, "status")
    with pytest.raises(ValueError, match="empty"):
        CONFIGMAPS.path("", "x")
