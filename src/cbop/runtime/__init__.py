"""The controller runtime, after controller-runtime: a manager runs controllers a builder assembles.

A reconciler (:mod:`.reconcile`) is built on the seams of :mod:`.seams` and wired by a
:class:`Builder` into a :class:`Controller` (a workqueue, its workers, the outcome
policy) inside a :class:`Scope` (caches, a fenced client, one life, serving what its
:class:`ScopeSpec` says); the :class:`Manager` runs the process: its runnables, the
scopes its leadership source (:mod:`.leadership`) hands it, one shutdown path. A
controller package declares itself with a
:class:`~cbop.runtime.definition.ControllerDefinition`. The runtime knows nothing of
ConfigBundles nor of Prometheus (import-linter contracts); see
docs/writing-a-controller.md.
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
