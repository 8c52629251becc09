"""--metrics-secure: the auth decisions with a fake review client, and the HTTPS server."""

from __future__ import annotations

import http.client
import os
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry, Gauge

from cbop.kube import ApiError, ConnectionFailed
from cbop.metrics.secure import (
    DEFAULT_TTL,
    CertSource,
    DelegatingAuth,
    KubeReviewClient,
    ReviewError,
    SecureMetricsServer,
    UserInfo,
    self_signed_certificate,
)
from cbop_testing.clock import FakeClock
from cbop_testing.fakekube import Action, FakeKube, Script, errors

READER = UserInfo("system:serviceaccount:monitoring:prometheus", uid="u1", groups=("g",))
NOBODY = UserInfo("system:serviceaccount:default:nobody")


class Reviews:
    """An API server that reviews: tokens 'reader' (may get /metrics) and 'nobody' (may not).

    A :class:`FakeKube` answers TokenReviews and SubjectAccessReviews as the API server
    would; the auth reaches it through cbop's own :class:`KubeReviewClient`. ``error``,
    when set, is the API error every review gets.
    """

    def __init__(self) -> None:
        self.users = {"reader": READER, "nobody": NOBODY}
        self.allowed = {READER.username}
        self.error: ApiError | None = None
        self.kube = FakeKube()
        self.kube.prepend_reactor("create", "tokenreviews", self._token_review)
        self.kube.prepend_reactor("create", "subjectaccessreviews", self._access_review)
        self.client = KubeReviewClient(self.kube)

    def _token_review(self, action: Action) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        user = self.users.get(action.body["spec"]["token"])
        if user is None:
            return {"status": {"authenticated": False}}
        info = {"username": user.username, "uid": user.uid, "groups": list(user.groups)}
        return {"status": {"authenticated": True, "user": info}}

    def _access_review(self, action: Action) -> dict[str, Any]:
        allowed = action.body["spec"]["user"] in self.allowed
        return {
            "status": {"allowed": allowed, "reason": "" if allowed else "no RBAC policy matched"}
        }

    @property
    def token_reviews(self) -> int:
        return sum(a.resource == "tokenreviews" for a in self.kube.actions)

    @property
    def access_reviews(self) -> list[tuple[str, str, str]]:
        return [
            (
                a.body["spec"]["user"],
                a.body["spec"]["nonResourceAttributes"]["path"],
                a.body["spec"]["nonResourceAttributes"]["verb"],
            )
            for a in self.kube.actions
            if a.resource == "subjectaccessreviews"
        ]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
def reviews() -> Reviews:
    return Reviews()


@pytest.fixture
def auth(reviews: Reviews, clock: FakeClock) -> DelegatingAuth:
    return DelegatingAuth(reviews.client, clock=clock, registry=CollectorRegistry())


def test_a_token_allowed_to_get_metrics_is_served(auth: DelegatingAuth, reviews: Reviews) -> None:
    decision = auth.check("Bearer reader")
    assert (decision.code, decision.user, decision.cached) == (200, READER.username, False)
    assert reviews.access_reviews == [(READER.username, "/metrics", "get")]


@pytest.mark.parametrize("header", [None, "", "Bearer ", "Basic cmVhZGVyOng=", "reader"])
def test_no_bearer_token_is_401_without_a_review(
    auth: DelegatingAuth, reviews: Reviews, header: str | None
) -> None:
    assert auth.check(header).code == 401
    assert reviews.token_reviews == 0


def test_a_token_the_api_server_does_not_authenticate_is_401(
    auth: DelegatingAuth, reviews: Reviews
) -> None:
    assert auth.check("Bearer forged").code == 401
    assert reviews.token_reviews == 1
    assert reviews.access_reviews == []


def test_an_authenticated_user_without_the_right_is_403(
    auth: DelegatingAuth, reviews: Reviews
) -> None:
    decision = auth.check("bearer nobody")
    assert decision.code == 403
    assert NOBODY.username in decision.reason
    assert "no RBAC policy matched" in decision.reason


def test_decisions_are_cached_per_token_for_the_ttl(
    auth: DelegatingAuth, reviews: Reviews, clock: FakeClock
) -> None:
    for token in ("reader", "nobody", "forged"):
        auth.check(f"Bearer {token}")
    assert reviews.token_reviews == 3
    clock.step(DEFAULT_TTL - 0.1)
    again = [auth.check(f"Bearer {token}") for token in ("reader", "nobody", "forged")]
    assert [(d.code, d.cached) for d in again] == [(200, True), (403, True), (401, True)]
    assert reviews.token_reviews == 3
    assert len(reviews.access_reviews) == 2
    # A right revoked shows once the cached decision expires.
    reviews.allowed.clear()
    clock.step(0.2)
    assert auth.check("Bearer reader").code == 403
    assert reviews.token_reviews == 4


def test_the_cache_counts_requests_by_code_and_hit(reviews: Reviews, clock: FakeClock) -> None:
    registry = CollectorRegistry()
    auth = DelegatingAuth(reviews.client, clock=clock, registry=registry)
    for _ in range(3):
        auth.check("Bearer reader")
    auth.check(None)

    def value(code: str, cached: str) -> float | None:
        return registry.get_sample_value(
            "cbop_metrics_auth_requests_total", {"code": code, "cached": cached}
        )

    assert (value("200", "false"), value("200", "true"), value("401", "false")) == (1, 2, 1)


@pytest.mark.parametrize(
    ("error", "code"),
    [(errors.internal_error("boom"), 503), (ApiError(403, "Forbidden", "boom"), 500)],
    ids=["transient", "permanent"],
)
def test_a_review_that_fails_answers_5xx_and_is_not_cached(
    auth: DelegatingAuth, reviews: Reviews, error: ApiError, code: int
) -> None:
    reviews.error = error
    decision = auth.check("Bearer reader")
    assert decision.code == code
    assert "boom" not in decision.reason  # the caller learns nothing of the API server
    reviews.error = None
    assert auth.check("Bearer reader").code == 200
    assert reviews.token_reviews == 2


def review_server(answer: dict[str, Any] | Exception) -> FakeKube:
    """An API server answering every review with ``answer`` (raised when an error)."""
    kube = FakeKube()
    kube.prepend_reactor("create", "*", Script(*([answer] * 4)))
    return kube


def sent(kube: FakeKube) -> list[tuple[str, dict[str, Any]]]:
    assert all(a.namespace is None for a in kube.actions)  # reviews are cluster-scoped
    return [(a.resource, a.body) for a in kube.actions]


def test_the_kube_review_client_sends_the_reviews_controller_runtime_sends() -> None:
    kube = review_server(
        {
            "status": {
                "authenticated": True,
                "allowed": True,
                "user": {"username": "u", "uid": "1", "groups": ["a"], "extra": {"k": ["v"]}},
            }
        }
    )
    reviews = KubeReviewClient(kube)
    user = reviews.authenticate("tok")
    assert user == UserInfo("u", "1", ("a",), (("k", ("v",)),))
    assert reviews.authorize(user, "/metrics", "get") == (True, "")
    assert sent(kube) == [
        ("tokenreviews", {"spec": {"token": "tok"}}),
        (
            "subjectaccessreviews",
            {
                "spec": {
                    "user": "u",
                    "uid": "1",
                    "groups": ["a"],
                    "extra": {"k": ["v"]},
                    "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
                }
            },
        ),
    ]
    assert KubeReviewClient(review_server({"status": {}})).authenticate("x") is None


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (ConnectionFailed("connection refused"), True),
        (ApiError(503, "ServiceUnavailable", "etcd"), True),
        (ApiError(429, "TooManyRequests", "slow down"), True),
        (ApiError(403, "Forbidden", "cannot create tokenreviews"), False),
    ],
)
def test_review_api_errors_become_review_errors(error: Exception, transient: bool) -> None:
    reviews = KubeReviewClient(review_server(error))
    with pytest.raises(ReviewError) as caught:
        reviews.authenticate("tok")
    assert caught.value.transient is transient


# ------------------------------------------------------------------ server


@pytest.fixture
def server(auth: DelegatingAuth) -> Iterator[SecureMetricsServer]:
    registry = CollectorRegistry()
    Gauge("cbop_test_gauge", "a gauge", registry=registry).set(7)
    srv = SecureMetricsServer(("127.0.0.1", 0), registry, auth, CertSource())
    srv.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _get(port: int, token: str | None, path: str = "/metrics") -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_the_server_answers_over_tls_as_the_auth_decides(server: SecureMetricsServer) -> None:
    status, body = _get(server.port, "reader")
    assert status == 200
    assert "cbop_test_gauge 7.0" in body
    assert _get(server.port, None)[0] == 401
    assert _get(server.port, "forged")[0] == 401
    assert _get(server.port, "nobody")[0] == 403
    assert _get(server.port, "reader", "/healthz")[0] == 404


def test_plain_http_gets_no_metrics(server: SecureMetricsServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/metrics", headers={"Authorization": "Bearer reader"})
    with pytest.raises((http.client.HTTPException, OSError)):
        conn.getresponse()
    conn.close()
    assert _get(server.port, "reader")[0] == 200  # the server lives on


def _peer_certificate(port: int) -> x509.Certificate:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.connect()
        assert conn.sock is not None
        assert isinstance(conn.sock, ssl.SSLSocket)
        der = conn.sock.getpeercert(binary_form=True)
        assert der is not None
    finally:
        conn.close()
    return x509.load_der_x509_certificate(der)


def _write_pair(directory: Path, name: str) -> x509.Certificate:
    cert, key = self_signed_certificate((name,))
    for file, data in (("tls.key", key), ("tls.crt", cert)):
        tmp = directory / f".{file}.new"
        tmp.write_bytes(data)
        os.replace(tmp, directory / file)
    return x509.load_pem_x509_certificate(cert)


def test_a_mounted_certificate_is_served_and_reloaded_when_it_changes(
    tmp_path: Path, auth: DelegatingAuth
) -> None:
    first = _write_pair(tmp_path, "first.example")
    srv = SecureMetricsServer(
        ("127.0.0.1", 0), CollectorRegistry(), auth, CertSource(str(tmp_path))
    )
    srv.start()
    try:
        assert _peer_certificate(srv.port) == first
        second = _write_pair(tmp_path, "second.example")
        assert _peer_certificate(srv.port) == second
        # A broken change keeps the last good certificate.
        (tmp_path / "tls.key").write_bytes(b"not a key")
        assert _peer_certificate(srv.port) == second
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_missing_certificate_directory_fails_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="--metrics-cert-dir"):
        CertSource(str(tmp_path / "absent"))


def test_the_self_signed_certificate_names_localhost_and_the_given_names() -> None:
    cert = x509.load_pem_x509_certificate(self_signed_certificate(("cbop-metrics.ns.svc",))[0])
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "cbop-metrics.ns.svc"} <= set(names.get_values_for_type(x509.DNSName))


def test_the_flags_default_to_plain_http_and_take_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cbop.cli import build_parser

    args = build_parser().parse_args([])
    assert (args.metrics_secure, args.metrics_cert_dir) == (False, None)
    args = build_parser().parse_args(["--metrics-secure", "--metrics-cert-dir", "/certs"])
    assert (args.metrics_secure, args.metrics_cert_dir) == (True, "/certs")
    monkeypatch.setenv("CBOP_METRICS_SECURE", "true")
    assert build_parser().parse_args([]).metrics_secure is True
    assert build_parser().parse_args(["--no-metrics-secure"]).metrics_secure is False
