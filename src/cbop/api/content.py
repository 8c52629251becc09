"""The content of a ConfigMap cbop manages: its hash and its binary values.

Pure functions shared by every controller that reads or writes managed ConfigMaps:
:func:`content_hash` is the digest cbop stamps on each one as the annotation
``cbop.dev/content-hash`` (so its byte stream is part of the API and never changes),
and :func:`encode_binary` / :func:`decode_binary` convert ``binaryData`` between bytes
and the base64 the API carries.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping

__all__ = ["content_hash", "decode_binary", "encode_binary"]


def content_hash(data: Mapping[str, str], binary_data: Mapping[str, bytes]) -> str:
    """Return ``sha256:<hex>`` over the content, with unambiguous framing.

    Each entry is hashed as a section tag byte (``d`` for data, ``b`` for binaryData),
    then the 8-byte big-endian length and bytes of the key, then of the value, in key
    order. No two different contents share a byte stream, so equal hashes mean equal
    content (up to SHA-256 collisions). The stream is hashed in one call (a ConfigMap
    holds at most 1 MiB); the digest is stored on every managed ConfigMap, so the
    stream must never change.
    """
    parts: list[bytes] = []
    for key in sorted(data):
        _frame(parts, b"d", key, data[key].encode("utf-8", "surrogatepass"))
    for key in sorted(binary_data):
        _frame(parts, b"b", key, binary_data[key])
    return "sha256:" + hashlib.sha256(b"".join(parts)).hexdigest()


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
