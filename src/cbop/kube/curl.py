"""Unary HTTP exchanges over libcurl (pycurl): every request cbop sends that is no stream.

Why: urllib3 and ``http.client`` cost the client several times libcurl's CPU per
request (bench/results/s1-s5.md, "Where cbop's time goes"), and on a small machine that
CPU is taken from the API server cbop waits on. Watches and streamed lists stay on
urllib3 (:mod:`cbop.kube.transport`): they are few, long and read incrementally.

:class:`CurlSession` sends one request and returns the whole answer, from the same
``kubernetes.client.Configuration`` as the urllib3 pool (CA, client certificate,
``verify_ssl``; the URL and headers, tokens included, come from the caller);
:func:`curl_supports` refuses a configuration it cannot map (a proxy or a TLS server
name override, say), which then stays on urllib3. One easy handle per thread keeps its connection
alive. libcurl re-sends a request only when a reused connection was closed before any
answer, as Go's transport does; writes are guarded by ``resourceVersion``
preconditions and ``AlreadyExists``, so a rare re-send is harmless.
"""

from __future__ import annotations

import contextlib
import io
import math
import threading
from collections.abc import Mapping
from typing import Any, Final

import pycurl
from urllib3 import HTTPHeaderDict

__all__ = ["CurlError", "CurlResponse", "CurlSession", "CurlTimeoutError", "curl_supports"]

#: libcurl's CURLE_OPERATION_TIMEDOUT (connect or low-speed timeout).
_TIMED_OUT: Final = 28


class CurlError(OSError):
    """No HTTP answer (refused, reset, TLS failure, DNS); ``curl_code`` is libcurl's code."""

    def __init__(self, curl_code: int, message: str) -> None:
        super().__init__(f"curl error {curl_code}: {message}")
        self.curl_code = curl_code


class CurlTimeoutError(CurlError, TimeoutError):
    """The connect or read timeout ran out (libcurl's CURLE_OPERATION_TIMEDOUT)."""


class CurlResponse:
    """A whole HTTP answer: ``status``, the body bytes, and the header lines as received.

    Offers what :class:`cbop.kube.transport.Transport` reads of a response:
    ``status``, :meth:`read` and :meth:`getheaders` (parsed on first use: a success is
    never asked for its headers).
    """

    __slots__ = ("_headers", "_lines", "data", "status")

    def __init__(self, status: int, lines: list[bytes], data: bytes) -> None:
        self.status = status
        self.data = data
        self._lines = lines
        self._headers: HTTPHeaderDict | None = None

    def read(self) -> bytes:
        """Return the (already decompressed) body."""
        return self.data

    def getheaders(self) -> HTTPHeaderDict:
        """Return the headers (case-insensitive) of the final response, after any 1xx."""
        if self._headers is None:
            self._headers = _parse_headers(self._lines)
        return self._headers


def curl_supports(configuration: Any) -> bool:
    """Whether :class:`CurlSession` can send what ``configuration`` describes.

    False for a proxy, ``tls_server_name``, ``assert_hostname`` set to a name or off
    while certificates are verified, custom ``socket_options``, or a host that is not
    ``http(s)://``; the transport then sends everything through urllib3.
    """
    host = str(getattr(configuration, "host", "") or "")
    if not host.startswith(("https://", "http://")):
        return False
    if getattr(configuration, "proxy", None):
        return False
    if getattr(configuration, "tls_server_name", None):
        return False
    if getattr(configuration, "assert_hostname", None) is not None:
        return False
    return not getattr(configuration, "socket_options", None)


class CurlSession:
    """Sends unary requests with libcurl, one keep-alive connection per calling thread.

    Args:
        configuration: a loaded ``kubernetes.client.Configuration`` for which
            :func:`curl_supports` is true (its TLS files are read when a connection is
            made).

    Raises:
        ValueError: :func:`curl_supports` is false for ``configuration``.
    """

    def __init__(self, configuration: Any) -> None:
        if not curl_supports(configuration):
            raise ValueError("this configuration needs urllib3 (proxy or TLS name settings)")
        self._verify = bool(getattr(configuration, "verify_ssl", True))
        self._ca = getattr(configuration, "ssl_ca_cert", None)
        self._cert = getattr(configuration, "cert_file", None)
        self._key = getattr(configuration, "key_file", None)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._handles: list[pycurl.Curl] = []
        self._generation = 0  # bumped by close(): handles of older generations are done

    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout: tuple[float, float] | None,
    ) -> CurlResponse:
        """Send one request and read its whole answer.

        Args:
            method: HTTP method (``GET``, ``POST``, ``PUT``, ``PATCH``, ``DELETE``).
            url: the absolute URL, query included.
            headers: request headers (``Authorization`` among them, if any).
            body: the encoded body, or None.
            timeout: ``(connect, read)`` seconds, or None to wait forever.

        Returns:
            The :class:`CurlResponse`, whatever its status.

        Raises:
            CurlTimeoutError: a timeout ran out.
            CurlError: no answer.
        """
        handle = self._handle()
        received = io.BytesIO()
        lines: list[bytes] = []
        handle.reset()
        self._configure(handle, timeout)
        handle.setopt(pycurl.URL, url)
        handle.setopt(pycurl.HTTPHEADER, [f"{k}: {v}" for k, v in headers.items()] + ["Expect:"])
        if method == "GET":
            handle.setopt(pycurl.HTTPGET, 1)
        elif method == "POST":
            handle.setopt(pycurl.POST, 1)
        else:
            handle.setopt(pycurl.CUSTOMREQUEST, method)
        if body is not None:
            handle.setopt(pycurl.POSTFIELDSIZE, len(body))
            handle.setopt(pycurl.COPYPOSTFIELDS, body)
        elif method not in ("GET", "DELETE"):
            handle.setopt(pycurl.POSTFIELDSIZE, 0)
        handle.setopt(pycurl.WRITEFUNCTION, received.write)
        handle.setopt(pycurl.HEADERFUNCTION, lines.append)
        try:
            handle.perform()
        except pycurl.error as exc:
            code, message = exc.args[0], str(exc.args[1]) if len(exc.args) > 1 else ""
            if code == _TIMED_OUT:
                raise CurlTimeoutError(code, message) from exc
            raise CurlError(code, message) from exc
        status = int(handle.getinfo(pycurl.RESPONSE_CODE))
        return CurlResponse(status, lines, received.getvalue())

    def close(self) -> None:
        """Close the idle connections, as urllib3's ``PoolManager.clear``.

        Later requests open new ones. A handle busy in another thread is left to finish
        and replaced at that thread's next request.
        """
        with self._lock:
            self._generation += 1
            handles, self._handles = self._handles, []
        for handle in handles:
            with contextlib.suppress(pycurl.error):  # busy: dropped after its request
                handle.close()

    def _handle(self) -> pycurl.Curl:
        """Return the calling thread's handle (a new one after :meth:`close`)."""
        mine: tuple[int, pycurl.Curl] | None = getattr(self._local, "handle", None)
        with self._lock:
            if mine is not None and mine[0] == self._generation:
                return mine[1]
            handle = pycurl.Curl()
            self._handles.append(handle)
            self._local.handle = (self._generation, handle)
        return handle

    def _configure(self, handle: pycurl.Curl, timeout: tuple[float, float] | None) -> None:
        handle.setopt(pycurl.NOSIGNAL, 1)
        handle.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
        handle.setopt(pycurl.ACCEPT_ENCODING, "gzip")
        handle.setopt(pycurl.TCP_KEEPALIVE, 1)
        if not self._verify:
            handle.setopt(pycurl.SSL_VERIFYPEER, 0)
            handle.setopt(pycurl.SSL_VERIFYHOST, 0)
        if self._ca:
            handle.setopt(pycurl.CAINFO, self._ca)
        if self._cert:
            handle.setopt(pycurl.SSLCERT, self._cert)
        if self._key:
            handle.setopt(pycurl.SSLKEY, self._key)
        if timeout is not None:
            connect, read = timeout
            handle.setopt(pycurl.CONNECTTIMEOUT_MS, max(1, int(connect * 1000)))
            handle.setopt(pycurl.LOW_SPEED_LIMIT, 1)
            handle.setopt(pycurl.LOW_SPEED_TIME, max(1, math.ceil(read)))


def _parse_headers(lines: list[bytes]) -> HTTPHeaderDict:
    """Return the header fields of the last response in ``lines`` (raw header lines)."""
    headers = HTTPHeaderDict()
    for raw in lines:
        line = raw.decode("latin-1").rstrip("\r\n")
        if line.startswith("HTTP/"):
            headers = HTTPHeaderDict()  # a new (final, or interim 1xx) response
            continue
        name, sep, value = line.partition(":")
        if sep and name:
            headers.add(name.strip(), value.strip())
    return headers
