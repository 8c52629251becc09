"""The controller runtime: a manager that runs controllers assembled by a builder.

After controller-runtime, in small pieces:

- :mod:`.reconcile`: the :class:`Reconciler` protocol (a key in, a :class:`Result` or an
  exception out) and :class:`Requeue`;
- :mod:`.handlers`: informer events -> workqueue keys (own key, controller owner's key,
  any map function), with the priority-queue rules;
- :mod:`.controller`: a :class:`Controller`: a named workqueue, N workers, the outcome
  policy, liveness;
- :mod:`.builder`: :class:`Builder`: "for this kind, owns that kind, watches X mapped by
  fn" plus options, into a controller added to a manager;
- :mod:`.scope`: :class:`Scope`: what controllers are set up against (client, informer
  factory, metrics, controllers), as controller-runtime's ``cluster.Cluster``;
- :mod:`.manager`: :class:`Manager`: the shared informer factory, probes, leader election
  and shutdown; runs the controllers' workers only while leading; with ``--shards``
  runs one :class:`ShardScope` (:mod:`.shards`) per held shard;
- :mod:`.metrics`: the controller's metrics seam (no Prometheus here).

This package knows nothing of ConfigBundles (see ``cbop.configbundle``) nor of Prometheus
(see ``cbop.metrics``); import-linter enforces both.
"""

from cbop.runtime.builder import Builder
from cbop.runtime.controller import DEFAULT_WEDGED_AFTER, DEFAULT_WORKERS, Controller
from cbop.runtime.handlers import (
    ConvergedFunc,
    EnqueueHandler,
    MapFunc,
    enqueue_controller_owner,
    enqueue_object,
)
from cbop.runtime.manager import Coordinator, LeaderElection, Manager, Sharding
from cbop.runtime.metrics import (
    ControllerMetrics,
    ControllerMetricsProvider,
    NoopControllerMetrics,
)
from cbop.runtime.ownwrites import OwnWrites
from cbop.runtime.reconcile import (
    Reconciler,
    Requeue,
    Result,
    TerminalError,
    new_reconcile_id,
    reconcile_context,
)
from cbop.runtime.scope import Scope
from cbop.runtime.shards import ScopeState, ShardScope

__all__ = [
    "DEFAULT_WEDGED_AFTER",
    "DEFAULT_WORKERS",
    "Builder",
    "Controller",
    "ControllerMetrics",
    "ControllerMetricsProvider",
    "ConvergedFunc",
    "Coordinator",
    "EnqueueHandler",
    "LeaderElection",
    "Manager",
    "MapFunc",
    "NoopControllerMetrics",
    "OwnWrites",
    "Reconciler",
    "Requeue",
    "Result",
    "Scope",
    "ScopeState",
    "ShardScope",
    "Sharding",
    "TerminalError",
    "enqueue_controller_owner",
    "enqueue_object",
    "new_reconcile_id",
    "reconcile_context",
]
