"""The rollout controllers: roll opted-in workloads when the managed ConfigMaps they read change.

A Deployment, StatefulSet or DaemonSet labelled ``cbop.dev/rollout: "true"`` gets the
pod template annotation ``cbop.dev/config-hash``, a digest of the cbop-managed
ConfigMaps it references; a new digest makes the workload's own controller roll it
(docs/rollout.md). What to do is decided without a client (:mod:`.decision`,
:mod:`.index`; an import-linter contract keeps them pure), the reconcilers act on it
through the parts they hold (:mod:`.reconcile`), and
:data:`cbop.rollout.controller.DEFINITION` registers them. This package exports what
the command's dry run (:mod:`cbop.cli.plan`) and the tests use.
"""

from cbop.rollout.coalesce import ChangeCoalescer, configmap_mapper
from cbop.rollout.decision import (
    ANNOTATION_CONFIG_HASH,
    FIELD_MANAGER,
    LABEL_CONFIG_BASELINE,
    LABEL_ROLLOUT,
    ROLLOUT_SELECTOR,
    Action,
    Decision,
    apply_body,
    baseline,
    config_digest,
    decide,
    referenced_configmaps,
)
from cbop.rollout.index import CONFIGMAP_INDEX, index_by_configmap
from cbop.rollout.reconcile import RolloutReconciler, RolloutResult
from cbop.rollout.report import RolloutObserver

__all__ = [
    "ANNOTATION_CONFIG_HASH",
    "CONFIGMAP_INDEX",
    "FIELD_MANAGER",
    "LABEL_CONFIG_BASELINE",
    "LABEL_ROLLOUT",
    "ROLLOUT_SELECTOR",
    "Action",
    "ChangeCoalescer",
    "Decision",
    "RolloutObserver",
    "RolloutReconciler",
    "RolloutResult",
    "apply_body",
    "baseline",
    "config_digest",
    "configmap_mapper",
    "decide",
    "index_by_configmap",
    "referenced_configmaps",
]
