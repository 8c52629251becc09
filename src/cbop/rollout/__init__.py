"""Rollout: roll opted-in workloads when the managed ConfigMaps they read change.

A Deployment, StatefulSet or DaemonSet labelled ``cbop.dev/rollout: "true"`` gets the
pod template annotation ``cbop.dev/config-hash``, a digest of the cbop-managed
ConfigMaps its pod template references, when their content changes; a new digest
makes the workload's own controller roll it. The label ``cbop.dev/config-baseline``
records the content its pods run with (docs/rollout.md). Modules:

- :mod:`.decision`, :mod:`.index`: pure; references, the digest, the decision, the
  apply body; the workload informer's ConfigMap index.
- :mod:`.reconcile`: the reconciler (one per kind), built from its parts:
  :mod:`.references` (what a template reads), :mod:`.pins` (the revisions the apply
  writes), :mod:`.coalesce` (changes made together, and the ConfigMap map function),
  :mod:`.apply` (the apply and its conflicts), :mod:`.report` (Events and counts).
- :mod:`.controller`: the controllers' definition and wiring.
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
