"""A loopback TCP proxy for e2e tests that cut and heal the path to the API server.

It forwards TLS bytes untouched, so a client behind it sees a network partition when
it is cut (connections dropped, new ones refused) and the same API server when healed.
Used by tests/e2e/test_informers.py and test_shard_coordinator.py.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import yaml


class TcpProxy:
    """Loopback TCP forwarder that can be cut (connections dropped, new ones refused)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._up = threading.Event()
        self._up.set()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._up.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()
            with self._lock:
                self._sockets.discard(src)
                self._sockets.discard(dst)

    def cut(self) -> None:
        self._up.clear()
        with self._lock:
            sockets = list(self._sockets)
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def heal(self) -> None:
        self._up.set()

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()


def proxied_kubeconfig(kubeconfig: Path, port: int, dest: Path) -> Path:
    """Write to ``dest`` a copy of ``kubeconfig`` whose servers are the proxy's ``port``."""
    config = yaml.safe_load(kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{port}"
    dest.write_text(yaml.safe_dump(config))
    return dest
