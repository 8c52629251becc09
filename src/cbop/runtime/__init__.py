"""The controller runtime: a manager that runs controllers assembled by a builder.

After controller-runtime, in small pieces:

- :mod:`.reconcile`: the :class:`Reconciler` protocol (a key in, a :class:`Result` or an
  exception out), :class:`Requeue`, :class:`TerminalError`, and the reconcile context
  (a reconcile id and the key bound to every log line);
- :mod:`.seams`: the :class:`~cbop.runtime.seams.Lister`, ``Client`` and ``EventSink``
  protocols every reconciler is built on; :mod:`.events` (with :mod:`.correlator`): the
  one Event recorder; :mod:`.ownwrites`: :class:`OwnWrites`, a reconciler's own recent
  writes until its cache shows them;
- :mod:`.handlers` and :mod:`.predicates`: informer events -> workqueue keys (own key,
  controller owner's key, any map function), filtered by predicates, with the
  priority-queue rules;
- :mod:`.controller`: a :class:`Controller`: a named workqueue, N workers, the outcome
  policy, liveness;
- :mod:`.builder`: :class:`Builder`: "for this kind, owns that kind, watches X mapped by
  fn" plus options, into a controller added to a scope;
- :mod:`.scope`: :class:`Scope`: caches, a fenced client and controllers with one life
  (started once each controller's caches synced, drained on release, stopped at once
  when lost), as controller-runtime's ``cluster.Cluster`` and leader-election group;
  :class:`ScopeSpec`: what a scope serves; :class:`Reads`: what a controller reads of a
  resource in it;
- :mod:`.runnable`: runnables in ordered groups (servers, caches, others, leadership);
  :mod:`.leadership`: where scope specs come from (no election, the single leader,
  shards);
- :mod:`.manager`: :class:`Manager`: the process: its groups, its scopes, one shutdown
  path and the exit code;
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
from cbop.runtime.leadership import Coordinator, LeaderElection, Sharding
from cbop.runtime.manager import Manager
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
from cbop.runtime.runnable import Hooks, Runnable, RunnableGroup
from cbop.runtime.scope import EVERYTHING, Reads, Scope, ScopeSpec, ScopeState

__all__ = [
    "DEFAULT_WEDGED_AFTER",
    "DEFAULT_WORKERS",
    "EVERYTHING",
    "Builder",
    "Controller",
    "ControllerMetrics",
    "ControllerMetricsProvider",
    "ConvergedFunc",
    "Coordinator",
    "EnqueueHandler",
    "Hooks",
    "LeaderElection",
    "Manager",
    "MapFunc",
    "NoopControllerMetrics",
    "OwnWrites",
    "Reads",
    "Reconciler",
    "Requeue",
    "Result",
    "Runnable",
    "RunnableGroup",
    "Scope",
    "ScopeSpec",
    "ScopeState",
    "Sharding",
    "TerminalError",
    "enqueue_controller_owner",
    "enqueue_object",
    "new_reconcile_id",
    "reconcile_context",
]
