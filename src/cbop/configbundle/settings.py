"""The ConfigBundle controller's flags and the settings built from them.

This module owns the controller's :class:`cbop.runtime.definition.Flag` constants,
:class:`ConfigBundleSettings`, and :func:`secrets_scope`, which reads the three flags of
Secrets into the pure :class:`cbop.secretaccess.scope.SecretsScope` that the
reconciler, the informers and ``cbop --once`` ask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from cbop import defaults
from cbop.revisions.bundle import DEFAULT_GRACE
from cbop.runtime.definition import Flag, FlagValues
from cbop.secretaccess.scope import SecretsScope, parse_key_name, parse_namespaces

__all__ = [
    "REVISION_GRACE",
    "ROLLOUT",
    "SECRETS_DIGEST_KEY",
    "SECRETS_FLAG",
    "SECRETS_NAMESPACE",
    "ConfigBundleSettings",
    "secrets_scope",
]

#: ``--secrets``: serve bundles with a Secret target (off by default).
SECRETS_FLAG: Final = Flag(
    "secrets",
    defaults.SECRETS,
    "serve bundles whose spec.target.kind is Secret, and read Secret sources; needs "
    "the Secrets' own RBAC (manifests/secrets/, the chart's secrets.enabled; "
    "docs/secrets.md)",
)
#: ``--secrets-namespace``: the only namespaces whose Secrets cbop reads and writes.
SECRETS_NAMESPACE: Final = Flag(
    "secrets-namespace",
    "",
    "with --secrets: the only namespaces whose Secrets cbop reads and writes, "
    "comma-separated (default: every namespace cbop watches)",
)
#: ``--secrets-digest-key``: where the key of the keyed digests lives.
SECRETS_DIGEST_KEY: Final = Flag(
    "secrets-digest-key",
    defaults.SECRETS_DIGEST_KEY,
    "with --secrets: NAMESPACE/NAME of the Secret holding the key of the keyed "
    "digests of Secret content, made when absent",
)


def secrets_scope(flags: FlagValues) -> SecretsScope:
    """Return the :class:`SecretsScope` of the parsed ``flags``.

    Raises:
        ValueError: ``--secrets-digest-key`` is not ``NAMESPACE/NAME``.
        TypeError: a flag's value is not of its type.
    """
    return SecretsScope(
        enabled=flags[SECRETS_FLAG],
        namespaces=parse_namespaces(flags[SECRETS_NAMESPACE]),
        digest_key=parse_key_name(flags[SECRETS_DIGEST_KEY] or defaults.SECRETS_DIGEST_KEY),
    )


#: ``--revision-grace``, seconds.
REVISION_GRACE: Final = Flag(
    "revision-grace",
    DEFAULT_GRACE,
    "seconds a revision ConfigMap must have been neither current nor named by a "
    "cached pod template before it is deleted (docs/revisions.md)",
)
#: ``--rollout``, the rollout controllers' flag: whether they run decides whether the
#: workloads' caches are read here too (the command line offers the rollout's own).
ROLLOUT: Final = Flag("rollout", defaults.ROLLOUT)


@dataclass(frozen=True)
class ConfigBundleSettings:
    """The ConfigBundle controller's settings, from the parsed flags.

    Attributes:
        revision_grace_seconds: seconds a revision ConfigMap must have been neither
            current nor named by a cached pod template before it is deleted
            (``--revision-grace``).
        rollout: whether the rollout controllers run (``--rollout``): the opted-in
            workloads' caches are then read, and revisions are written for them.
        secrets: which bundles with a Secret target are served (``--secrets``,
            ``--secrets-namespace``, ``--secrets-digest-key``).
    """

    revision_grace_seconds: float = DEFAULT_GRACE
    rollout: bool = defaults.ROLLOUT
    secrets: SecretsScope = field(default_factory=SecretsScope)

    @classmethod
    def from_flags(cls, flags: FlagValues) -> ConfigBundleSettings:
        """Return the settings of the parsed ``flags``.

        Raises:
            ValueError: ``--secrets-digest-key`` is not ``NAMESPACE/NAME``.
        """
        return cls(
            revision_grace_seconds=flags[REVISION_GRACE],
            rollout=flags[ROLLOUT],
            secrets=secrets_scope(flags),
        )
