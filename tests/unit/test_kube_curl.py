"""CurlSession (unary requests over libcurl) against a scripted local HTTP server."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s_client

from cbop.kube import CONFIGMAPS, ConnectionFailed, KubeClient
from cbop.kube.curl import CurlError, CurlSession, CurlTimeoutError, curl_supports
from cbop.kube.errors import is_timeout
from cbop_testing.httpserver import Reply, Responder, ScriptedServer, Seen


@pytest.fixture
def server() -> Iterator[Callable[[Responder], ScriptedServer]]:
    """Scripted servers, closed after the test."""
    servers: list[ScriptedServer] = []

    def make(responder: Responder) -> ScriptedServer:
        made = ScriptedServer(responder)
        servers.append(made)
        return made

    yield make
    for made in servers:
        made.close()


def cm(name: str, ns: str = "default", rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv}, "data": {}}


def session(url: str) -> CurlSession:
    return CurlSession(k8s_client.Configuration(host=url))


def echo(seen: Seen) -> Reply:
    return Reply(200, {"method": seen.method, "body": seen.body.decode() or None})


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_each_method_is_sent_with_its_body(
    server: Callable[[Responder], ScriptedServer], method: str
) -> None:
    srv = server(echo)
    body = None if method == "GET" else b'{"k":"v"}'
    got = session(srv.url).request(
        method, srv.url + "/api/v1/x?a=1", {"Content-Type": "application/json"}, body, (5, 5)
    )
    assert got.status == 200
    assert json.loads(got.read()) == {"method": method, "body": body and body.decode()}
    (seen,) = srv.requests
    assert (seen.method, seen.path, seen.query) == (method, "/api/v1/x", {"a": ["1"]})
    if body is not None:
        assert seen.headers["content-length"] == str(len(body))
        assert seen.headers["content-type"] == "application/json"


def test_a_large_body_goes_without_expect_100_continue(
    server: Callable[[Responder], ScriptedServer],
) -> None:
    srv = server(echo)
    body = json.dumps({"data": {"k": "x" * 200_000}}).encode()
    got = session(srv.url).request("PUT", srv.url + "/big", {}, body, (5, 5))
    assert json.loads(got.read())["body"] == body.decode()
    assert "expect" not in srv.requests[0].headers


def test_a_gzip_answer_is_read_decompressed(
    server: Callable[[Responder], ScriptedServer],
) -> None:
    payload = json.dumps({"items": [cm(f"c{i}") for i in range(500)]}).encode()

    def compressed(seen: Seen) -> Reply:
        assert "gzip" in seen.headers.get("accept-encoding", "")
        return Reply(200, headers={"Content-Encoding": "gzip"}, raw=gzip.compress(payload))

    srv = server(compressed)
    assert session(srv.url).request("GET", srv.url + "/list", {}, None, (5, 5)).read() == payload


def test_headers_are_those_of_the_answer_and_case_insensitive(
    server: Callable[[Responder], ScriptedServer],
) -> None:
    srv = server(lambda seen: Reply(429, {"kind": "Status"}, {"Retry-After": "3"}))
    got = session(srv.url).request("GET", srv.url + "/x", {}, None, (5, 5))
    assert got.status == 429
    assert got.getheaders()["retry-after"] == "3"
    assert got.getheaders().get("Retry-After") == "3"


def test_a_server_that_stalls_times_out_as_a_timeout(
    server: Callable[[Responder], ScriptedServer],
) -> None:
    release = threading.Event()

    def stall(seen: Seen) -> Reply:
        release.wait(10)
        return Reply(200, {})

    srv = server(stall)
    started = time.monotonic()
    try:
        with pytest.raises(CurlTimeoutError) as info:
            session(srv.url).request("GET", srv.url + "/slow", {}, None, (2, 1))
    finally:
        release.set()
    assert 0.9 < time.monotonic() - started < 5
    assert is_timeout(info.value)
    assert isinstance(info.value, OSError)


def test_a_refused_connection_is_an_error_but_no_timeout() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(CurlError) as info:
        session(url).request("GET", url + "/x", {}, None, (2, 2))
    assert not is_timeout(info.value)


def test_the_client_reports_a_refused_connection_as_connection_failed() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = KubeClient.from_configuration(
        k8s_client.Configuration(host=f"http://127.0.0.1:{port}"), qps=0
    )
    with pytest.raises(ConnectionFailed) as info:
        client.get(CONFIGMAPS, "default", "x")
    assert not info.value.timed_out


def test_close_drops_the_connections_and_later_requests_open_new_ones(
    server: Callable[[Responder], ScriptedServer],
) -> None:
    srv = server(echo)
    curl = session(srv.url)
    assert curl.request("GET", srv.url + "/a", {}, None, (5, 5)).status == 200
    curl.close()
    assert curl.request("GET", srv.url + "/b", {}, None, (5, 5)).status == 200
    assert [r.path for r in srv.requests] == ["/a", "/b"]


def test_threads_share_a_session_each_with_its_own_handle(
    server: Callable[[Responder], ScriptedServer],
) -> None:
    srv = server(lambda seen: Reply(200, {"path": seen.path}))
    curl = session(srv.url)
    failures: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(40):
                path = f"/w{worker}/{i}"
                got = curl.request("GET", srv.url + path, {}, None, (5, 5))
                assert json.loads(got.read()) == {"path": path}
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert failures == []
    assert len(srv.requests) == 8 * 40


@pytest.mark.parametrize(
    ("settings", "supported"),
    [
        ({}, True),
        ({"proxy": "http://proxy.invalid:3128"}, False),
        ({"tls_server_name": "kubernetes.default"}, False),
        ({"assert_hostname": False}, False),
        ({"socket_options": [(6, 1, 1)]}, False),
    ],
    ids=["plain", "proxy", "tls-server-name", "assert-hostname", "socket-options"],
)
def test_what_libcurl_serves_and_what_stays_on_urllib3(
    settings: dict[str, Any], supported: bool
) -> None:
    configuration = k8s_client.Configuration(host="https://127.0.0.1:6443")
    for name, value in settings.items():
        setattr(configuration, name, value)
    assert curl_supports(configuration) is supported
    if not supported:
        with pytest.raises(ValueError, match="urllib3"):
            CurlSession(configuration)


def test_a_client_whose_configuration_needs_urllib3_still_works(
    server: Callable[[Responder], ScriptedServer],
) -> None:
    """``assert_hostname`` keeps every request on urllib3 (plain HTTP here, so the
    setting itself is moot): the same verbs, the same answers."""
    srv = server(lambda seen: Reply(200, cm("x")))
    configuration = k8s_client.Configuration(host=srv.url)
    configuration.assert_hostname = False
    client = KubeClient.from_configuration(configuration, qps=0)
    assert client.get(CONFIGMAPS, "default", "x")["metadata"]["name"] == "x"
