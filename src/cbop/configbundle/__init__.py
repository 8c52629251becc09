"""The ConfigBundle controller: one ConfigBundle key in, the ConfigMap it declares out.

A controller package on the runtime, independent of every other controller package
(an import-linter contract). :mod:`.controller` wires it (its caches, key mapping and
reconciler); pure parts (:mod:`.desired`, :mod:`.decision`, :mod:`.status`) decide;
:mod:`.reconcile` acts through the parts it holds, one module each: the sources
(:mod:`.sources`), the ConfigMap writes (:mod:`.writes`), the finalizer and Orphan
release (:mod:`.release`), status, Events and counts (:mod:`.report`), and the
revisions (:mod:`cbop.revisions.bundle`). The parts know each other only by the
interfaces of :mod:`.interfaces`.
"""

from cbop.configbundle.decision import Action, Decision, decide
from cbop.configbundle.interfaces import Requeue, Result
from cbop.configbundle.reconcile import Reconciler

__all__ = [
    "Action",
    "Decision",
    "Reconciler",
    "Requeue",
    "Result",
    "decide",
]
