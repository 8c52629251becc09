"""``cbop --once``: reconcile every bundle in scope once, print the outcome, exit.

This module owns :func:`run_once`, its output (a table, with each pending change's
diff and the workloads it would roll in a dry run, or ``--output json``) and
:func:`exit_code`, the exit code its results map to (see :mod:`cbop.cli.exits`).
:mod:`cbop.cli.command` calls it when ``--once`` is given. The plan of the rollouts
is :mod:`cbop.cli.plan`'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from cbop import defaults
from cbop.api import MANAGED_SELECTOR
from cbop.cli.exits import EXIT_NOT_READY, EXIT_OK, EXIT_PENDING, fail
from cbop.cli.parser import controller_settings
from cbop.cli.plan import (
    ROLLOUTS_OFF,
    Plan,
    changed_namespaces,
    list_workloads,
    plan_rollouts,
)
from cbop.configbundle import Result
from cbop.configbundle import controller as configbundle
from cbop.informers import SharedInformerFactory
from cbop.keys import split_key
from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, ApiError, ConnectionFailed, KubeInterface
from cbop.rollout.controller import RolloutSettings
from cbop.runtime.definition import FlagValues
from cbop.runtime.events import EventRecorder
from cbop.runtime.seams import Lister

__all__ = ["exit_code", "run_once"]


def _ready_word(result: Result) -> str:
    if result.pending:
        # A dry run never calls a bundle with a pending change Ready: it says what the
        # bundle would be once the change is made.
        after = _ready_word(dataclasses.replace(result, pending=False))
        return f"Pending (then {after})"
    if result.ready == "True":
        return "Ready"
    if result.reason is not None:
        return result.reason.value
    return "-"


def run_once(args: argparse.Namespace, client: KubeInterface) -> int:
    """Reconcile every bundle in scope once; print results; return the exit code.

    Returns:
        :data:`EXIT_NOT_READY` when a bundle is not Ready (with ``--dry-run``: would not
        be Ready after the pending changes), else :data:`EXIT_PENDING` when a dry run
        found changes pending, else :data:`EXIT_OK`.
    """
    recorder = None if args.dry_run else EventRecorder(client, level=args.events)
    informers = SharedInformerFactory(client, namespaces=args.namespaces, resync_period=0)
    reconciler = configbundle.new_reconciler(
        client, informers, recorder=recorder, dry_run=args.dry_run
    )
    # The reconciler's own managed-ConfigMap cache (the factory shares one informer).
    configmaps = informers.lister(CONFIGMAPS, label_selector=MANAGED_SELECTOR)
    plans: dict[str, Plan] | None = None
    informers.start()
    try:
        timeout = defaults.ONCE_CACHE_SYNC_TIMEOUT
        if not informers.wait_for_cache_sync(timeout):
            refused = informers.refusals()
            if refused:
                fail(refused[0].message)
            fail(f"timed out listing ConfigBundles and ConfigMaps ({timeout:g} s)")
        try:
            results = configbundle.reconcile_all(reconciler, informers.lister(CONFIGBUNDLES))
        except (ApiError, ConnectionFailed) as err:
            fail(f"reconcile failed: {err}")
        if args.dry_run:
            plans = _plan(args, client, results, configmaps)
    finally:
        informers.shutdown()
        if recorder is not None:
            recorder.close(timeout=5.0)
    if args.output == "json":
        rows = [
            {
                "namespace": split_key(r.key)[0],
                "bundle": split_key(r.key)[1],
                "configMap": r.config_map,
                "action": r.action.value if r.action else None,
                "pending": r.pending,
                "result": _ready_word(r),
                "ready": r.ready,
                "reason": r.reason.value if r.reason else None,
                "message": r.message,
                **({"diff": r.diff, "wouldCreateRevision": r.new_revision} if args.dry_run else {}),
                **(_plan_json(plans.get(r.key)) if plans is not None else {}),
            }
            for r in results
        ]
        print(json.dumps(rows, indent=2))
    else:
        print(_table(results, dry_run=args.dry_run, plans=plans))
    return exit_code(results)


def exit_code(results: Sequence[Result]) -> int:
    """Return the ``--once`` exit code for ``results`` (see :mod:`cbop.cli.exits`).

    A bundle with no Ready condition to report (gone, being deleted) counts as neither
    Ready nor broken; in a dry run its pending release still counts as a change.
    """
    if any(r.ready is not None and r.ready != "True" for r in results):
        return EXIT_NOT_READY
    if any(r.pending for r in results):
        return EXIT_PENDING
    return EXIT_OK


def _plan(
    args: argparse.Namespace, client: KubeInterface, results: Sequence[Result], configmaps: Lister
) -> dict[str, Plan]:
    """Return the rollout plan of a dry run's ``results`` (see :mod:`cbop.cli.plan`).

    Lists workloads only in the namespaces with a pending change the rollout would
    notice, and none at all under ``--no-rollout`` (every such bundle's plan then says
    so).
    """
    namespaces = changed_namespaces(results, configmaps)
    if not RolloutSettings.from_flags(FlagValues(controller_settings(args))).enabled:
        unknown = dict.fromkeys(namespaces, ROLLOUTS_OFF)
        return plan_rollouts(results, configmaps, {}, unknown)
    workloads, unknown = list_workloads(client.list, namespaces, cluster_scope=not args.namespaces)
    return plan_rollouts(results, configmaps, workloads, unknown)


def _plan_json(plan: Plan | None) -> dict[str, Any]:
    """Return the JSON fields of one dry-run row: ``wouldRoll`` (null when unknown), and why."""
    if plan is None:
        return {"wouldRoll": []}
    if plan.unknown:
        return {"wouldRoll": None, "workloadsUnknown": plan.unknown}
    return {"wouldRoll": [w.as_json() for w in plan.workloads]}


def _plan_line(plan: Plan) -> str:
    """Return the table line under a bundle with a pending change: what it would roll."""
    if plan.unknown:
        return f"# workloads unknown: {plan.unknown}"
    return "# would roll: " + (", ".join(map(str, plan.workloads)) or "none")


def _table(
    results: Sequence[Result], *, dry_run: bool, plans: Mapping[str, Plan] | None = None
) -> str:
    header = ("NAMESPACE", "BUNDLE", "CONFIGMAP", "ACTION", "RESULT")
    rows = [
        (
            split_key(r.key)[0] or "",
            split_key(r.key)[1],
            r.config_map or "-",
            (r.action.value if r.action else "-") + (" (dry run)" if r.pending else ""),
            _ready_word(r),
        )
        for r in results
    ]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "   ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    if not rows:
        lines.append("(no ConfigBundles found)")
    if dry_run:
        for r in results:
            if r.pending:
                lines.extend(["", f"# {r.key}: {r.message}"])
                plan = (plans or {}).get(r.key)
                if plan is not None:
                    lines.append(_plan_line(plan))
                if r.diff:
                    lines.append(r.diff.rstrip("\n"))
    return "\n".join(lines)
