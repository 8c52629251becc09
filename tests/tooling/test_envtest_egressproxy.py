"""The HTTP CONNECT proxy through which kube-apiserver reaches a node's namespace.

Everything runs on the loopback interface and Unix sockets in a temporary directory:
the "node" is an echo server on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cbop_testing.envtest.egressproxy import (
    ConnectProxy,
    EgressProxyError,
    main,
    parse_connect_target,
)

LOOPBACK = ipaddress.ip_network("127.0.0.1/32")
#: Seconds any socket operation in these tests may block.
TIMEOUT = 10.0


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that sends back what it reads, then closes its side."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(TIMEOUT)

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                with conn:
                    while data := conn.recv(65536):
                        conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "egress.sock"


@pytest.fixture
def lines() -> list[str]:
    return []


@pytest.fixture
def proxy(sock: Path, lines: list[str]) -> Iterator[ConnectProxy]:
    running = ConnectProxy(sock, [LOOPBACK], log=lines.append)
    running.start()
    yield running
    running.close()


def _connect(sock: Path, request: bytes) -> tuple[socket.socket, bytes]:
    """Send ``request`` on the proxy's socket; return the connection and the response head."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(TIMEOUT)
    conn.connect(str(sock))
    conn.sendall(request)
    head = b""
    while b"\r\n\r\n" not in head:
        data = conn.recv(1)
        if not data:
            break
        head += data
    return conn, head


def _recv_all(conn: socket.socket) -> bytes:
    chunks = []
    while data := conn.recv(65536):
        chunks.append(data)
    return b"".join(chunks)


def test_connect_relays_both_ways_until_each_side_closes(
    proxy: ConnectProxy, sock: Path, echo_port: int, lines: list[str]
) -> None:
    request = f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    conn, head = _connect(sock, request)
    with conn:
        assert head == b"HTTP/1.1 200 Connection established\r\n\r\n"
        payload = bytes(range(256)) * 1024
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        assert _recv_all(conn) == payload
    assert lines == [f"CONNECT 127.0.0.1:{echo_port}: 200"]


def test_bytes_sent_with_the_request_head_are_relayed_first(
    proxy: ConnectProxy, sock: Path, echo_port: int
) -> None:
    request = f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\nearly".encode()
    conn, head = _connect(sock, request)
    with conn:
        assert head.startswith(b"HTTP/1.1 200 ")
        conn.shutdown(socket.SHUT_WR)
        assert _recv_all(conn) == b"early"


@pytest.mark.parametrize(
    "target", ["10.0.0.1:443", "127.0.0.2:10250", "localhost:10250", "cbop-node-abc:10250"]
)
def test_targets_outside_the_allowed_networks_are_forbidden(
    proxy: ConnectProxy, sock: Path, lines: list[str], target: str
) -> None:
    conn, head = _connect(sock, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
    with conn:
        assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n"), head
        assert _recv_all(conn) == b""
    assert lines == [f"CONNECT {target}: 403 (not an address of the node or its pods)"]


@pytest.mark.parametrize(
    "request_line",
    [
        b"GET / HTTP/1.1",
        b"CONNECT 127.0.0.1 HTTP/1.1",
        b"CONNECT 127.0.0.1:0 HTTP/1.1",
        b"CONNECT 127.0.0.1:99999 HTTP/1.1",
        b"CONNECT 127.0.0.1:80 SPDY/3",
    ],
)
def test_anything_but_connect_host_port_is_a_bad_request(
    proxy: ConnectProxy, sock: Path, request_line: bytes
) -> None:
    conn, head = _connect(sock, request_line + b"\r\n\r\n")
    with conn:
        assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n"), head


def test_a_target_that_refuses_is_a_bad_gateway(
    proxy: ConnectProxy, sock: Path, lines: list[str]
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    conn, head = _connect(sock, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    with conn:
        assert head.startswith(b"HTTP/1.1 502 Bad Gateway\r\n"), head
    assert lines[0].startswith(f"CONNECT 127.0.0.1:{port}: 502 ("), lines


def test_a_connection_closed_without_a_request_is_not_logged(
    proxy: ConnectProxy, sock: Path, echo_port: int, lines: list[str]
) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.connect(str(sock))
    # A later connection's line is the first: the probe left none.
    conn, _ = _connect(sock, f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\n".encode())
    conn.close()
    # The proxy writes its "200" line once the answer is sent: wait for it.
    deadline = time.monotonic() + TIMEOUT
    while not lines and time.monotonic() < deadline:
        time.sleep(0.001)  # polls the proxy thread's output; not a timing assumption
    assert lines == [f"CONNECT 127.0.0.1:{echo_port}: 200"]


def test_the_socket_is_private_and_removed_at_close(sock: Path) -> None:
    proxy = ConnectProxy(sock, [LOOPBACK])
    proxy.start()
    assert sock.stat().st_mode & 0o777 == 0o600
    proxy.close()
    assert not sock.exists()


def test_a_socket_a_live_proxy_serves_is_not_taken_over(
    proxy: ConnectProxy, sock: Path, echo_port: int
) -> None:
    with pytest.raises(EgressProxyError, match="already served by another proxy"):
        ConnectProxy(sock, [LOOPBACK]).start()
    assert main([f"--socket={sock}", "--allow=127.0.0.1/32"]) == 1
    conn, head = _connect(sock, f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\n".encode())
    conn.close()
    assert head.startswith(b"HTTP/1.1 200 "), "the first proxy still serves"


def test_a_stale_socket_file_is_replaced(sock: Path, echo_port: int) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(sock))  # bound, never listening, then closed: a stale file
    proxy = ConnectProxy(sock, [LOOPBACK])
    proxy.start()
    try:
        conn, head = _connect(sock, f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\n".encode())
        conn.close()
        assert head.startswith(b"HTTP/1.1 200 ")
    finally:
        proxy.close()


@pytest.mark.parametrize(
    ("head", "target"),
    [
        (b"CONNECT 192.0.2.10:10250 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", ("192.0.2.10", 10250)),
        (b"CONNECT [fd00::1]:443 HTTP/1.0\r\n\r\n", ("fd00::1", 443)),
        (b"CONNECT node-a:10250 HTTP/1.1\r\n\r\n", ("node-a", 10250)),
    ],
)
def test_parse_connect_target(head: bytes, target: tuple[str, int]) -> None:
    assert parse_connect_target(head) == target
