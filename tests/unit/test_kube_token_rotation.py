"""A kubeconfig ``tokenFile`` is re-read, as client-go does: rotated tokens keep working.

Uses a tiny local HTTP server that accepts only the currently valid bearer token.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cbop.kube import CONFIGMAPS, ApiError, KubeClient
from cbop_testing.clock import FakeClock


class _Server(http.server.ThreadingHTTPServer):
    valid_token = "first"
    seen: list[str]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        self.server.seen.append(auth)
        if auth.lower() != f"bearer {self.server.valid_token}":
            body = json.dumps(
                {"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "Unauthorized"}
            )
            self.send_response(401)
        else:
            body = json.dumps(
                {"kind": "ConfigMapList", "items": [], "metadata": {"resourceVersion": "1"}}
            )
            self.send_response(200)
        data = body.encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.seen = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _kubeconfig(tmp_path: Path, server: _Server, token_file: str) -> Path:
    host, port = server.server_address[:2]
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://{host!s}:{port}"}}],
        "users": [{"name": "u", "user": {"tokenFile": token_file}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_rotated_token_file_is_picked_up_after_a_401(tmp_path: Path, server: _Server) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    client = KubeClient.from_config(
        kubeconfig=str(_kubeconfig(tmp_path, server, "token")), qps=0, clock=FakeClock()
    )
    client.list(CONFIGMAPS, "ns")
    # Rotation: a new token in the file, the old one no longer valid.
    token.write_text("second\n")
    server.valid_token = "second"
    client.list(CONFIGMAPS, "ns")
    assert server.seen[-2:] == ["bearer first", "bearer second"]


def test_token_file_is_reread_periodically_without_a_401(tmp_path: Path, server: _Server) -> None:
    token = tmp_path / "token"
    token.write_text("first")
    clock = FakeClock()
    client = KubeClient.from_config(
        kubeconfig=str(_kubeconfig(tmp_path, server, str(token))), qps=0, clock=clock
    )
    token.write_text("second")
    client.list(CONFIGMAPS, "ns")
    assert server.seen[-1] == "bearer first", "not before the refresh period"
    server.valid_token = "second"
    clock.step(61)
    client.list(CONFIGMAPS, "ns")
    assert server.seen[-1] == "bearer second"


def test_a_401_without_a_token_file_is_raised(tmp_path: Path, server: _Server) -> None:
    host, port = server.server_address[:2]
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://{host!s}:{port}"}}],
        "users": [{"name": "u", "user": {"token": "wrong"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    client = KubeClient.from_config(kubeconfig=str(path), qps=0)
    with pytest.raises(ApiError) as err:
        client.list(CONFIGMAPS, "ns")
    assert err.value.status == 401
    assert len(server.seen) == 1
