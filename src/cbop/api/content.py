"""The content of a ConfigMap or Secret cbop manages: its digests and its binary values.

Pure functions shared by every controller that reads or writes managed objects:
:func:`content_hash` is the digest cbop stamps on each ConfigMap as the annotation
``cbop.dev/content-hash`` (so its byte stream is part of the API and never changes);
:func:`keyed_content_hash` is the digest of Secret content, an HMAC under a key only
cbop reads, so that a digest readable with ``view`` never lets a guess of a Secret's
value be tested offline (docs/secrets.md); :func:`encode_binary` /
:func:`decode_binary` convert ``binaryData`` (and a Secret's ``data``) between bytes and
the base64 the API carries.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from typing import Final

__all__ = [
    "KEYED_PREFIX",
    "MIN_DIGEST_KEY_BYTES",
    "content_hash",
    "decode_binary",
    "encode_binary",
    "keyed_content_hash",
]

#: The prefix of a keyed digest: ``hmac-sha256:<64 hex digits>``.
KEYED_PREFIX: Final = "hmac-sha256:"
#: The shortest key :func:`keyed_content_hash` takes (RFC 2104 advises at least the
#: hash's output length, 32 bytes for SHA-256).
MIN_DIGEST_KEY_BYTES: Final = 32


def content_hash(data: Mapping[str, str], binary_data: Mapping[str, bytes]) -> str:
    """Return ``sha256:<hex>`` over the content, with unambiguous framing.

    Each entry is hashed as a section tag byte (``d`` for data, ``b`` for binaryData),
    then the 8-byte big-endian length and bytes of the key, then of the value, in key
    order. No two different contents share a byte stream, so equal hashes mean equal
    content (up to SHA-256 collisions). The stream is hashed in one call (a ConfigMap
    holds at most 1 MiB); the digest is stored on every managed ConfigMap, so the
    stream must never change.
    """
    return "sha256:" + hashlib.sha256(_stream(data, binary_data)).hexdigest()


def keyed_content_hash(
    key: bytes, data: Mapping[str, str], binary_data: Mapping[str, bytes]
) -> str:
    """Return ``hmac-sha256:<hex>``: HMAC-SHA256 (RFC 2104) under ``key`` of the content.

    The message is the byte stream of :func:`content_hash` (a Secret's values go in as
    ``binary_data``). Equal content under one key gives equal digests; without the key,
    nobody can compute the digest of a guessed value, so a digest that ``view`` reads
    (a bundle's ``status.contentHash``, a workload's ``cbop.dev/config-hash``) tells
    nothing of a low-entropy Secret value. Every digest cbop derives from Secret content
    is this one.

    Args:
        key: the digest key, at least :data:`MIN_DIGEST_KEY_BYTES` bytes.
        data: key -> text (UTF-8 encoded into the stream).
        binary_data: key -> bytes.

    Raises:
        ValueError: ``key`` is shorter than :data:`MIN_DIGEST_KEY_BYTES` bytes.
    """
    if len(key) < MIN_DIGEST_KEY_BYTES:
        raise ValueError(f"a digest key has at least {MIN_DIGEST_KEY_BYTES} bytes")
    mac = hmac.new(key, _stream(data, binary_data), hashlib.sha256)
    return KEYED_PREFIX + mac.hexdigest()


def _stream(data: Mapping[str, str], binary_data: Mapping[str, bytes]) -> bytes:
    parts: list[bytes] = []
    for key in sorted(data):
        _frame(parts, b"d", key, data[key].encode("utf-8", "surrogatepass"))
    for key in sorted(binary_data):
        _frame(parts, b"b", key, binary_data[key])
    return b"".join(parts)


def _frame(parts: list[bytes], tag: bytes, key: str, value: bytes) -> None:
    raw_key = key.encode()
    parts += (tag, len(raw_key).to_bytes(8, "big"), raw_key, len(value).to_bytes(8, "big"), value)


def encode_binary(binary_data: Mapping[str, bytes]) -> dict[str, str]:
    """Return ``binaryData`` as the API carries it: key -> standard base64 (with padding)."""
    return {k: base64.b64encode(v).decode("ascii") for k, v in binary_data.items()}


def decode_binary(binary_data: Mapping[str, str] | None) -> dict[str, bytes] | None:
    """Decode a ConfigMap's ``binaryData``; None when any value is not valid base64."""
    try:
        return {k: base64.b64decode(v, validate=True) for k, v in (binary_data or {}).items()}
    except (binascii.Error, ValueError):
        return None
