"""The rollout controllers: roll opted-in workloads when the managed content they read changes.

A Deployment, StatefulSet or DaemonSet labelled ``cbop.dev/rollout: "true"`` gets the
pod template annotation ``cbop.dev/config-hash``, a digest of the cbop-managed
ConfigMaps and Secrets it references; a new digest makes the workload's own controller roll it
(docs/rollout.md). What to do is decided without a client (:mod:`.decision`,
:mod:`.index`; an import-linter contract keeps them pure), the reconcilers act on it
through the parts they hold (:mod:`.reconcile`), and
:data:`cbop.rollout.controller.DEFINITION` registers them. This package exports what
the command's dry run (:mod:`cbop.cli.plan`) and the tests use.
"""

from cbop.rollout.coalesce import ChangeCoalescer, configmap_mapper, secret_mapper
from cbop.rollout.decision import (
    ANNOTATION_CONFIG_HASH,
    FIELD_MANAGER,
    LABEL_CONFIG_BASELINE,
    LABEL_ROLLOUT,
    ROLLOUT_SELECTOR,
    Action,
    Decision,
    SecretInputs,
    apply_body,
    baseline,
    config_digest,
    decide,
    referenced_configmaps,
    referenced_secrets,
)
from cbop.rollout.index import (
    CONFIGMAP_INDEX,
    INDEXERS,
    SECRET_INDEX,
    index_by_configmap,
    index_by_secret,
)
from cbop.rollout.reconcile import RolloutReconciler, RolloutResult
from cbop.rollout.report import RolloutObserver

__all__ = [
    "ANNOTATION_CONFIG_HASH",
    "CONFIGMAP_INDEX",
    "FIELD_MANAGER",
    "INDEXERS",
    "LABEL_CONFIG_BASELINE",
    "LABEL_ROLLOUT",
    "ROLLOUT_SELECTOR",
    "SECRET_INDEX",
    "Action",
    "ChangeCoalescer",
    "Decision",
    "RolloutObserver",
    "RolloutReconciler",
    "RolloutResult",
    "SecretInputs",
    "apply_body",
    "baseline",
    "config_digest",
    "configmap_mapper",
    "decide",
    "index_by_configmap",
    "index_by_secret",
    "referenced_configmaps",
    "referenced_secrets",
    "secret_mapper",
]
