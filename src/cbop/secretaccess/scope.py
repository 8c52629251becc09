"""Which bundles with a Secret target cbop serves: ``--secrets`` and ``--secrets-namespace``.

This module owns :class:`SecretsScope`, the one answer to "may cbop read and write
Secrets for a bundle of this namespace?" (docs/secrets.md, "Turning it on"). Secrets are
off by default; with them off, or outside the namespaces ``--secrets-namespace`` names,
a bundle with a Secret target is refused with :attr:`cbop.api.Reason.SECRETS_DISABLED`
before anything is read, and the gauge ``cbop_configbundles_secrets_disabled`` counts it.
Pure; the reconciler, the controller's informers and the metric ask it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cbop.api import Reason, SpecError, target_of

__all__ = ["SecretsScope", "parse_key_name", "parse_namespaces"]


def parse_key_name(value: str) -> tuple[str, str]:
    """Parse ``--secrets-digest-key``: ``namespace/name``.

    Raises:
        ValueError: not two non-empty parts separated by one ``/``.
    """
    namespace, sep, name = value.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ValueError(f"--secrets-digest-key {value!r} must be NAMESPACE/NAME")
    return namespace, name


def parse_namespaces(value: str) -> tuple[str, ...] | None:
    """Parse ``--secrets-namespace`` (a comma-separated list): the names, or None for ``""``.

    Spaces around names are ignored, empty entries dropped, each name kept once in the
    order given.
    """
    names = [n.strip() for n in value.split(",")]
    kept = tuple(dict.fromkeys(n for n in names if n))
    return kept or None


@dataclass(frozen=True)
class SecretsScope:
    """Whether Secrets are on, and in which namespaces.

    Attributes:
        enabled: ``--secrets``.
        namespaces: ``--secrets-namespace``: the only namespaces whose Secrets cbop reads
            and writes, or None for every namespace cbop watches.
        digest_key: ``(namespace, name)`` of the Secret of the digest key
            (``--secrets-digest-key``).
    """

    enabled: bool = False
    namespaces: tuple[str, ...] | None = None
    digest_key: tuple[str, str] = ("cbop-system", "cbop-digest-key")

    def serves(self, namespace: str) -> bool:
        """Whether cbop reads and writes Secrets in ``namespace``."""
        return self.enabled and (self.namespaces is None or namespace in self.namespaces)

    def informer_namespaces(self, scopes: Sequence[str | None]) -> tuple[str | None, ...]:
        """Return the namespaces of the Secret informers, given the factory's ``scopes``.

        ``scopes`` are ``--namespace``'s (``(None,)``: cluster-wide). With
        ``--secrets-namespace``, its namespaces (those within ``--namespace`` when that
        is given too), so cbop's ServiceAccount needs the Secret role in those alone;
        else ``scopes``. Empty when Secrets are off.
        """
        if not self.enabled:
            return ()
        if self.namespaces is None:
            return tuple(scopes)
        if None in scopes:
            return self.namespaces
        return tuple(n for n in self.namespaces if n in scopes)

    def refusal(self, bundle: Mapping[str, Any]) -> SpecError | None:
        """Return why ``bundle`` is not served, or None when it is (or keeps a ConfigMap).

        The error's reason is :attr:`cbop.api.Reason.SECRETS_DISABLED` and its message
        says how to turn Secrets on for the bundle; it carries no parsed spec, so the
        reconcile that reports it changes nothing of the bundle's finalizers either.
        """
        target = target_of(bundle)
        if target is None or not target.is_secret:
            return None
        namespace = str((bundle.get("metadata") or {}).get("namespace") or "")
        if self.serves(namespace):
            return None
        if not self.enabled:
            why = (
                f"spec.target is Secret {target.name}, and cbop runs without --secrets: it "
                "reads and writes no Secret. Turn Secrets on (--secrets; the chart's "
                "secrets.enabled; manifests/secrets/) to serve this bundle"
            )
        else:
            served = ", ".join(self.namespaces or ())
            why = (
                f"spec.target is Secret {target.name}, and namespace {namespace} is not "
                f"among those whose Secrets cbop serves (--secrets-namespace {served})"
            )
        return SpecError(why, Reason.SECRETS_DISABLED)
