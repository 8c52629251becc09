"""The controller runtime, after controller-runtime: a manager runs controllers a builder assembles.

A reconciler (:mod:`.reconcile`) is built on the seams of :mod:`.seams` and wired by a
:class:`Builder` into a :class:`Controller` (a workqueue, its workers, the outcome
policy) inside a :class:`Scope` (caches, a fenced client, one life); the
:class:`Manager` runs the process: its runnables, its scopes, one shutdown path. A
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
from cbop.runtime.runnable import Hooks, Runnable, RunnableGroup
from cbop.runtime.scope import Scope, ScopeState

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
    "Hooks",
    "LeaderElection",
    "Manager",
    "MapFunc",
    "NoopControllerMetrics",
    "OwnWrites",
    "Reconciler",
    "Requeue",
    "Result",
    "Runnable",
    "RunnableGroup",
    "Scope",
    "ScopeState",
    "Sharding",
    "TerminalError",
    "enqueue_controller_owner",
    "enqueue_object",
    "new_reconcile_id",
    "reconcile_context",
]
