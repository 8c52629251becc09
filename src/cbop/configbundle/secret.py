"""The desired Secret of a bundle with a Secret target, and how it is laid over the one there.

Pure functions, no I/O: the Secret counterpart of :mod:`cbop.configbundle.desired`,
with the same rules for metadata (labels and annotations cbop did not set, finalizers
and others' owner references kept; cbop's own keys tracked). What differs
(docs/secrets.md):

- the content is bytes, all of it in the Secret's ``data`` (text from a ConfigMap
  source is its UTF-8 bytes), compared as bytes;
- the digest stamped on the Secret (``cbop.dev/content-hash``), and so the one in the
  bundle's ``status.contentHash``, is keyed (:func:`cbop.api.keyed_content_hash`): an
  HMAC under the digest key, never a plain hash of secret material;
- the Secret's ``type`` is set on create and never changed: a Secret of the target's
  name with another type is reported (:func:`type_conflict`), not fought;
- a built-in type's required keys are checked before any write (:func:`spec_error`).
"""

from __future__ import annotations

import base64
import copy
import functools
from collections.abc import Mapping
from typing import Any

from cbop.api import (
    DEFAULT_SECRET_TYPE,
    BundleSpec,
    Kind,
    SpecError,
    decode_binary,
    encode_binary,
    keyed_content_hash,
)
from cbop.api.target import secret_type_error
from cbop.configbundle.desired import (
    JSON,
    DesiredConfigMap,
    managed_metadata,
    own_metadata,
    owner_reference,
    owner_refs_equal,
)

__all__ = [
    "content_matches",
    "decode_data",
    "desired_secret",
    "in_sync",
    "redact",
    "render",
    "secret_bytes",
    "spec_error",
    "type_conflict",
]


def secret_bytes(spec: BundleSpec) -> dict[str, bytes]:
    """Return the content of ``spec`` as a Secret holds it: key -> bytes, in key order.

    Text values (from ConfigMap sources) become their UTF-8 bytes; a key in both maps
    cannot happen (:func:`cbop.api.compose.compose` makes one map of the layers).
    """
    out = {k: v.encode("utf-8", "surrogatepass") for k, v in spec.data.items()}
    out.update(spec.binary_data)
    return dict(sorted(out.items()))


def spec_error(spec: BundleSpec) -> SpecError | None:
    """Return why the composed ``spec`` cannot be written as its Secret, or None.

    A Secret of a built-in type without the keys the API server requires
    (:func:`cbop.api.target.secret_type_error`: ``kubernetes.io/tls`` needs
    ``tls.crt`` and ``tls.key``, ...): ``InvalidSpec``, naming the keys, never a value.
    The error carries ``spec`` (its ``deletionPolicy`` holds; the Secret keeps its last
    good content).
    """
    secret_type = spec.target.type or DEFAULT_SECRET_TYPE
    why = secret_type_error(secret_type, list(spec.data) + list(spec.binary_data))
    if why is None:
        return None
    err = SpecError(f"Secret {spec.target.name}: {why}")
    err.spec = spec
    return err


def desired_secret(bundle: Mapping[str, Any], spec: BundleSpec, key: bytes) -> DesiredConfigMap:
    """Compute the Secret ``bundle`` declares (a :class:`DesiredConfigMap` of kind Secret).

    Args:
        bundle: the ConfigBundle object (dict with ``metadata.name/namespace/uid``).
        spec: its validated spec, sources composed in, with a Secret target.
        key: the digest key (:class:`cbop.secretaccess.DigestKey`).

    Returns:
        The desired Secret: all content in ``binary_data``, ``data`` empty,
        ``content_hash`` keyed, ``secret_type`` the target's type.

    Raises:
        ValueError: ``spec`` keeps a ConfigMap, or ``key`` is shorter than 32 bytes.
    """
    if not spec.target.is_secret:
        raise ValueError(f"the target of {bundle['metadata']['name']} is not a Secret")
    content = secret_bytes(spec)
    digest = keyed_content_hash(key, {}, content)
    labels, annotations = own_metadata(bundle, spec, digest)
    return DesiredConfigMap(
        namespace=bundle["metadata"]["namespace"],
        name=spec.target.name,
        labels=labels,
        annotations=annotations,
        data={},
        binary_data=content,
        immutable=spec.immutable,
        owner_reference=owner_reference(bundle),
        content_hash=digest,
        kind=Kind.SECRET,
        secret_type=spec.target.type or DEFAULT_SECRET_TYPE,
        encoded={k: _base64(v) for k, v in content.items()},
    )


#: Values up to this many bytes have their base64 text kept and shared (:func:`_base64`).
_SHARED_BASE64_BYTES = 64 * 1024


def _base64(value: bytes) -> str:
    """Return the standard base64 of ``value``; one shared text for a small value.

    Every reader of a source Secret holds the same bytes (decoded once per source
    version), so their desired Secrets, kept by the memo, share one text of each value
    instead of a copy each: at most 256 values of up to 64 KiB are kept, the least
    recently used out first.
    """
    if len(value) > _SHARED_BASE64_BYTES:
        return base64.b64encode(value).decode("ascii")
    return _shared_base64(value)


@functools.lru_cache(maxsize=256)
def _shared_base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def render(desired: DesiredConfigMap, current: Mapping[str, Any] | None) -> JSON:
    """Return the Secret body cbop writes to make ``current`` what ``desired`` says.

    A full Secret for create (``current`` None) or update (PUT, carrying ``current``'s
    resourceVersion). ``data`` is rebuilt from the content every time; the ``type`` is
    the existing Secret's (the API server forbids changing it; :func:`type_conflict`
    keeps cbop from writing one of another type), else the desired one.
    """
    cur_meta: Mapping[str, Any] = (current or {}).get("metadata", {})
    # As the ConfigMap's render: every container of the metadata is copied one level
    # (labels, annotations and owner references are rebuilt below), managedFields left out.
    meta: JSON = {
        k: copy.copy(v) if isinstance(v, dict | list) else v
        for k, v in cur_meta.items()
        if k != "managedFields"
    }
    meta["name"] = desired.name
    meta["namespace"] = desired.namespace
    meta["labels"], meta["annotations"], meta["ownerReferences"] = managed_metadata(
        desired, cur_meta
    )
    kept_type = (current or {}).get("type") or desired.secret_type or DEFAULT_SECRET_TYPE
    body: JSON = {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": kept_type}
    if desired.binary_data:
        body["data"] = dict(_encoded(desired))
    if desired.immutable:
        body["immutable"] = True
    return body


def decode_data(obj: Mapping[str, Any]) -> dict[str, bytes]:
    """Return a Secret's ``data`` as bytes (``{}`` when absent or not valid base64)."""
    return decode_binary(obj.get("data")) or {}


def _encoded(desired: DesiredConfigMap) -> Mapping[str, str]:
    """``desired``'s bytes as a Secret's ``data`` carries them (standard base64)."""
    if desired.encoded is not None:
        return desired.encoded
    return encode_binary(desired.binary_data)


def content_matches(desired: DesiredConfigMap, current: Mapping[str, Any]) -> bool:
    """Whether ``current``'s ``data`` holds exactly the desired bytes (no more keys).

    The same base64 text is the same bytes, so ``data`` as cbop wrote it (the API
    server keeps it canonical) matches without a decode; any other text is decoded and
    compared as bytes.
    """
    data = current.get("data")
    if data == _encoded(desired):
        return True
    return decode_binary(data) == dict(desired.binary_data)


def type_conflict(desired: DesiredConfigMap, current: Mapping[str, Any]) -> str | None:
    """Return why ``current`` cannot be kept as the desired Secret, or None.

    Its ``type`` differs from the desired one: the API server forbids changing it, and
    cbop does not delete a Secret to change it. The message names both types and the
    way out (delete the Secret, and cbop makes it again); never a value.
    """
    has = current.get("type") or DEFAULT_SECRET_TYPE
    if has == desired.secret_type:
        return None
    return (
        f"Secret {desired.name} has type {has}, and spec.target.type is "
        f"{desired.secret_type}; a Secret's type cannot change, so cbop leaves it as it "
        "is: delete it and cbop makes it again with the type of the spec"
    )


def in_sync(desired: DesiredConfigMap, current: Mapping[str, Any]) -> bool:
    """Whether writing :func:`render` ``(desired, current)`` would change nothing.

    Compares the bytes of ``data``, ``immutable``, the type, labels, annotations and
    owner references.
    """
    if not content_matches(desired, current) or type_conflict(desired, current):
        return False
    if bool(current.get("immutable")) != desired.immutable:
        return False
    meta = current.get("metadata", {})
    labels, annotations, refs = managed_metadata(desired, meta)
    return (
        (meta.get("labels") or {}) == labels
        and (meta.get("annotations") or {}) == annotations
        and owner_refs_equal(meta.get("ownerReferences") or (), refs)
    )


#: Values shorter than this are not cut out of messages (they would cut common words).
_MIN_REDACTED = 4


def redact(message: str, content: Mapping[str, bytes]) -> str:
    """Return ``message`` with every value of ``content`` cut out, as ``[redacted]``.

    For a message that cbop did not build (an API server's refusal of a Secret write)
    before it goes to status, an Event or a log line: each value (at least 4 bytes),
    each line of a multi-line value, as UTF-8 text and as base64, longest first.
    """
    forms: set[str] = set()
    for value in content.values():
        forms.add(base64.b64encode(value).decode("ascii"))
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            continue
        forms.add(text)
        forms.update(line.strip() for line in text.splitlines())
    for form in sorted(forms, key=len, reverse=True):
        if len(form.encode()) >= _MIN_REDACTED:
            message = message.replace(form, "[redacted]")
    return message
