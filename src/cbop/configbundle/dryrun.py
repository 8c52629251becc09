"""What a dry run reports: the pending writes of one reconcile, in one message.

This module owns :func:`dry_run_account`, which ``cbop --once --dry-run`` relies on to
say what would be written (ConfigMap or Secret create, update or replace, deletions of ConfigMaps
left under an old name, the Orphan finalizer) and what the bundle would be afterwards.
The act layer (:mod:`cbop.configbundle.reconcile`) calls it; it performs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from cbop.api import FINALIZER_ORPHAN, Kind
from cbop.configbundle.decision import Action, Decision, FinalizerChange

__all__ = ["dry_run_account"]


def dry_run_account(
    decision: Decision,
    message: str,
    stale: Sequence[str],
    after: str,
    revision: str | None = None,
) -> tuple[str, bool]:
    """For a dry run: the result's message and whether a write is pending.

    ``message`` is the outcome's own message, ``stale`` the ConfigMaps that would be
    deleted, ``after`` the Ready word or reason the bundle would then have, ``revision``
    the revision ConfigMap the reconcile would create (``spec.revisions``), or None.

    The message says what would be written, in the order it would be (a revision
    before the ConfigMap it is a revision of), and what the bundle would then be; it
    never says that the ConfigMap matches when a write is pending.
    """
    pending: list[str] = []
    if revision is not None:
        pending.append(f"would create revision {revision}")
    desired = decision.desired
    secret = desired is not None and desired.kind is Kind.SECRET
    noun, field = ("Secret", "spec.target.name") if secret else ("ConfigMap", "spec.configMapName")
    if decision.action in (Action.CREATE, Action.UPDATE, Action.REPLACE) and desired is not None:
        # A Secret's digest is not shown: a dry run may have no digest key to make it with.
        shown = "" if secret else f", {desired.content_hash}"
        pending.append(
            f"would {decision.action.value} {noun} {desired.name} ({desired.key_count} keys{shown})"
        )
    pending += [f"would delete {noun} {name} (no longer {field})" for name in stale]
    if decision.finalizer is FinalizerChange.ADD:
        pending.append(f"would add the {FINALIZER_ORPHAN} finalizer")
    elif decision.finalizer is FinalizerChange.REMOVE:
        pending.append(f"would remove the {FINALIZER_ORPHAN} finalizer")
    if not pending:
        if decision.action is Action.NONE and desired is not None:
            return f"{noun} {desired.name} is in sync; nothing to write", False
        return message, False
    return "; ".join(pending) + f"; the bundle would then be {after}", True
