"""kube-apiserver's way into a node's network namespace: an HTTP CONNECT proxy on a Unix socket.

The API server listens on the host's loopback; a :class:`~cbop_testing.envtest.node.Node`
runs its kubelet and pods in a network namespace of its own, which nothing routes to. For
``kubectl logs``, ``exec``, ``attach`` and ``port-forward`` the API server must open
connections to the kubelet there. A cluster whose control plane cannot route to its nodes
solves this with an egress selector (Konnectivity); so does this one: a control plane made
for nodes starts kube-apiserver with an ``EgressSelectorConfiguration`` that sends every
``cluster`` connection (kubelets, pods) as an HTTP ``CONNECT`` request over the Unix socket
:attr:`ControlPlane.cluster_egress_socket
<cbop_testing.envtest.controlplane.ControlPlane.cluster_egress_socket>`. This proxy listens
on that socket from inside the node's namespace (a Unix socket's path is not bound to a
network namespace), opens the TCP connection there and relays the bytes. The API server
speaks TLS to the kubelet through it, end to end.

Only IP addresses inside the networks given with ``--allow`` (the node's address and its
pods' subnet) are dialled; a name, or an address outside, is answered ``403``, a request
that is not ``CONNECT host:port`` ``400``, and a target that refuses ``502``. One line per
connection goes to stderr.

Run as ``python -m cbop_testing.envtest.egressproxy --socket PATH --allow CIDR ...``; it
serves until SIGTERM or SIGINT and then removes its socket.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Final, TypeAlias

__all__ = ["ConnectProxy", "EgressProxyError", "main", "parse_connect_target"]

#: Largest request head (request line and headers) accepted, in bytes; Go's client sends
#: about 60.
MAX_HEAD_BYTES: Final = 8192
#: Seconds a client has to send its request head, and a target to accept the connection.
HANDSHAKE_TIMEOUT: Final = 10.0
#: Bytes relayed per read.
_CHUNK: Final = 65536

Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address


class EgressProxyError(Exception):
    """The proxy cannot serve its socket (another live proxy holds it, or bind failed)."""


def parse_connect_target(request_head: bytes) -> tuple[str, int]:
    """Return the ``(host, port)`` of an HTTP ``CONNECT host:port HTTP/1.x`` request head.

    Args:
        request_head: The request line and headers, up to the blank line.

    Returns:
        The host as written (brackets of an IPv6 literal removed) and the TCP port.

    Raises:
        ValueError: Not a CONNECT request, or no valid ``host:port``.
    """
    line = request_head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or parts[0] != "CONNECT" or not parts[2].startswith("HTTP/1."):
        raise ValueError(f"not a CONNECT request: {line!r}")
    host, sep, port_text = parts[1].rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"not host:port: {parts[1]!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def _answer(conn: socket.socket, status: str) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n".encode())


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until end of file, then half-close ``sink``."""
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


class ConnectProxy:
    """An HTTP CONNECT proxy listening on a Unix socket (module docstring).

    Args:
        socket_path: Where to listen; must not be held by a live listener. A stale socket
            file there is replaced. Created with mode 0600 (the API server runs as the
            same user).
        allowed: Networks whose addresses may be dialled.
        log: Where the one line per connection goes (``None``: nowhere).

    Use :meth:`start` (a background accept thread) and :meth:`close`, or
    :meth:`serve_forever`.
    """

    def __init__(
        self,
        socket_path: Path,
        allowed: Sequence[Network],
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.allowed = tuple(allowed)
        self._log = log
        self._listener: socket.socket | None = None
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def _say(self, line: str) -> None:
        if self._log is not None:
            self._log(line)

    def bind(self) -> None:
        """Listen on :attr:`socket_path`.

        Raises:
            EgressProxyError: A live listener holds the path, or it cannot be bound.
        """
        path = str(self.socket_path)
        if self.socket_path.exists():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect(path)
                except OSError:
                    self.socket_path.unlink()  # stale: nobody listens
                else:
                    raise EgressProxyError(f"{path} is already served by another proxy")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            os.chmod(path, 0o600)
            listener.listen(64)
        except OSError as exc:
            listener.close()
            raise EgressProxyError(f"cannot listen on {path}: {exc}") from exc
        self._listener = listener

    def start(self) -> None:
        """:meth:`bind`, then accept connections in a daemon thread until :meth:`close`.

        Raises:
            EgressProxyError: As :meth:`bind`.
        """
        self.bind()
        self._thread = threading.Thread(target=self._accept_loop, name="egress-proxy", daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        """Accept connections in this thread until :meth:`close` (:meth:`bind` first if needed).

        Raises:
            EgressProxyError: As :meth:`bind`.
        """
        if self._listener is None:
            self.bind()
        self._accept_loop()

    def close(self) -> None:
        """Stop accepting and remove the socket file; relayed connections finish on their own."""
        self._closed.set()
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
            self.socket_path.unlink(missing_ok=True)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._closed.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                if self._closed.is_set():
                    return
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _allowed(self, host: str) -> Address | None:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return None
        return address if any(address in net for net in self.allowed) else None

    def _read_head(self, conn: socket.socket) -> bytes:
        """Read the request head; empty when the client closed without sending anything."""
        head = b""
        while b"\r\n\r\n" not in head:
            if len(head) > MAX_HEAD_BYTES:
                raise ValueError("request head too long")
            data = conn.recv(4096)
            if not data:
                if head:
                    raise ValueError("connection closed before the request head ended")
                return head
            head += data
        return head

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(HANDSHAKE_TIMEOUT)
            try:
                head = self._read_head(conn)
                if not head:
                    return  # a probe of the socket (Node waits for it so)
                host, port = parse_connect_target(head)
            except (OSError, ValueError) as exc:
                self._say(f"refused: {exc}")
                _answer(conn, "400 Bad Request")
                return
            target = f"{host}:{port}"
            address = self._allowed(host)
            if address is None:
                self._say(f"CONNECT {target}: 403 (not an address of the node or its pods)")
                _answer(conn, "403 Forbidden")
                return
            try:
                upstream = socket.create_connection((str(address), port), HANDSHAKE_TIMEOUT)
            except OSError as exc:
                self._say(f"CONNECT {target}: 502 ({exc})")
                _answer(conn, "502 Bad Gateway")
                return
            with upstream:
                rest = head.split(b"\r\n\r\n", 1)[1]
                conn.settimeout(None)
                upstream.settimeout(None)
                try:
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    if rest:
                        upstream.sendall(rest)
                except OSError as exc:
                    self._say(f"CONNECT {target}: client gone ({exc})")
                    return
                self._say(f"CONNECT {target}: 200")
                back = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
                back.start()
                _pump(conn, upstream)
                back.join()


def _network(text: str) -> Network:
    try:
        return ipaddress.ip_network(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


class _StopError(Exception):
    pass


def _raise_stop(_signum: int, _frame: FrameType | None) -> None:
    raise _StopError


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT; return the exit status (1: the socket is taken)."""
    parser = argparse.ArgumentParser(
        prog="python -m cbop_testing.envtest.egressproxy",
        description="HTTP CONNECT proxy on a Unix socket, for kube-apiserver's egress "
        "selector into a local node's network namespace.",
    )
    parser.add_argument("--socket", type=Path, required=True, help="Unix socket to listen on")
    parser.add_argument(
        "--allow",
        type=_network,
        action="append",
        default=[],
        help="a network (CIDR) whose addresses may be dialled; repeatable",
    )
    args = parser.parse_args(argv)
    proxy = ConnectProxy(
        args.socket, args.allow, log=lambda line: print(line, file=sys.stderr, flush=True)
    )
    try:
        proxy.bind()
    except EgressProxyError as exc:
        print(f"egressproxy: {exc}", file=sys.stderr)
        return 1
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _raise_stop)
    try:
        proxy.serve_forever()
    except _StopError:
        pass
    finally:
        proxy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
