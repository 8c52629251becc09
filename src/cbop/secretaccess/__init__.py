"""What the controllers share about Secrets: where cbop may touch them, and the digest key.

Below the controller packages (an import-linter layer), so that the ConfigBundle
controller, which writes Secret targets, and the rollout, which rolls the workloads
that read them, take the same answers: :class:`SecretsScope` (``--secrets``,
``--secrets-namespace``: the namespaces of the Secret informers) and :class:`DigestKey`
(the key of the keyed digests of Secret content, docs/secrets.md).
"""

from cbop.secretaccess.digestkey import DATA_KEY, DigestKey, DigestKeyError
from cbop.secretaccess.scope import SecretsScope, parse_key_name, parse_namespaces

__all__ = [
    "DATA_KEY",
    "DigestKey",
    "DigestKeyError",
    "SecretsScope",
    "parse_key_name",
    "parse_namespaces",
]
