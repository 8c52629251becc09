"""The ConfigBundle controller: one ConfigBundle key in, the ConfigMap it declares out.

A controller package on the runtime, independent of every other controller package
(an import-linter contract). :mod:`.controller` wires it (its caches, key mapping and
reconciler); pure parts (:mod:`.desired`, :mod:`.decision`, :mod:`.status`) decide;
:mod:`.reconcile` acts through the API client (its ConfigMap writes in :mod:`.writes`,
the finalizer and Orphan release in :mod:`.release`, status and Events in
:mod:`.report`; its seams and result in :mod:`.interfaces`, the dry-run account in
:mod:`.dryrun`), recording Events through the runtime's recorder.
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
