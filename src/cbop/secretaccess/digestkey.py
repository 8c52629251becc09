"""The key of the keyed digests of Secret content: read by name, made when absent.

This module owns :class:`DigestKey` (docs/secrets.md, "The keyed digest"): every digest
cbop derives from Secret content and puts where ``view`` reads it is
:func:`cbop.api.keyed_content_hash` under this key. The key is 32 random bytes in one
Secret (``cbop-system/cbop-digest-key``, data key ``key``, immutable), read with a GET
by name (never a list: the Role may name it in ``resourceNames``) the first time a
reconcile needs it, and kept in memory for as long as the object lives: one per scope,
so a new leader (or a shard's new holder) reads the key anew. When the Secret is absent
it is created, with a key from :func:`os.urandom`; a replica that loses the race to
create it reads the winner's. A dry run never creates it: it uses a key of its own for
the run, which matches no digest in the cluster, as a key made by the real run would not.

Why a new key is never a silent mismatch: cbop decides what to write by comparing the
bytes of the content, never by comparing digests, so a digest under another key only
makes one more write of the digest itself (and one roll of a workload reading it).
"""

from __future__ import annotations

import base64
import binascii
import os
import threading
from collections.abc import Callable
from typing import Any, Final

from cbop.api.content import MIN_DIGEST_KEY_BYTES
from cbop.kube import SECRETS, ApiError
from cbop.runtime.seams import Client

__all__ = ["DATA_KEY", "DigestKey", "DigestKeyError"]

#: The data key of the Secret that holds the digest key.
DATA_KEY: Final = "key"
#: Bytes of a key cbop makes.
_KEY_BYTES: Final = 32
_LABELS: Final = {"app.kubernetes.io/name": "cbop", "app.kubernetes.io/component": "digest-key"}


class DigestKeyError(Exception):
    """The digest key Secret exists and holds no usable key; the message names it."""


class DigestKey:
    """The digest key of one scope (see the module docstring). Thread-safe.

    Args:
        client: the scope's client (its writes fenced by the scope's lease).
        namespace: the key Secret's namespace.
        name: the key Secret's name.
        dry_run: never create the Secret; without one, use a key of this object's own.
        field_manager: the field manager of the create.
        random_bytes: ``fn(n) -> n random bytes`` (tests pass their own).
    """

    def __init__(
        self,
        client: Client,
        namespace: str,
        name: str,
        *,
        dry_run: bool = False,
        field_manager: str = "cbop",
        random_bytes: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.name = name
        self._dry_run = dry_run
        self._field_manager = field_manager
        self._random = random_bytes
        self._key: bytes | None = None
        self._lock = threading.Lock()

    def key(self) -> bytes:
        """Return the key: read (or made) on the first call, then from memory.

        Raises:
            DigestKeyError: the Secret holds no ``key`` of at least 32 bytes.
            ApiError, ConnectionFailed: the GET or the create failed (a 403 names the
                verb); the next call tries again.
        """
        with self._lock:
            if self._key is None:
                self._key = self._load()
            return self._key

    def _load(self) -> bytes:
        for _ in range(3):
            found = self._get()
            if found is not None:
                return self._decode(found)
            if self._dry_run:
                return self._random(_KEY_BYTES)
            try:
                created = self._client.create(
                    SECRETS, self.namespace, self._body(), field_manager=self._field_manager
                )
            except ApiError as err:
                if err.is_already_exists:
                    continue  # another replica made it first: read theirs
                raise
            return self._decode(created)
        raise DigestKeyError(
            f"the digest key Secret {self.namespace}/{self.name} kept appearing and vanishing"
        )

    def _get(self) -> dict[str, Any] | None:
        try:
            return self._client.get(SECRETS, self.namespace, self.name)
        except ApiError as err:
            if err.is_not_found:
                return None
            raise

    def _body(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": dict(_LABELS),
                "annotations": {
                    "cbop.dev/purpose": "the key of cbop's keyed digests of Secret content; "
                    "delete it and restart cbop to rotate it (docs/secrets.md)"
                },
            },
            "type": "Opaque",
            "immutable": True,
            "data": {DATA_KEY: base64.b64encode(self._random(_KEY_BYTES)).decode("ascii")},
        }

    def _decode(self, secret: dict[str, Any]) -> bytes:
        where = f"the digest key Secret {self.namespace}/{self.name}"
        try:
            raw = base64.b64decode((secret.get("data") or {}).get(DATA_KEY, ""), validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) < MIN_DIGEST_KEY_BYTES:
            raise DigestKeyError(
                f"{where} holds no usable key (data.{DATA_KEY} of at least "
                f"{MIN_DIGEST_KEY_BYTES} bytes); delete it and cbop makes a new one"
            )
        return raw
