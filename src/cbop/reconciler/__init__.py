"""Reconcile: turn one ConfigBundle key into the ConfigMap it declares.

Pure parts (:mod:`.desired`, :mod:`.decision`, :mod:`.status`) decide; :mod:`.reconcile`
acts through the API client (its seams and result in :mod:`.interfaces`, the dry-run
account in :mod:`.dryrun`); :mod:`.events` records what was done.
"""

from cbop.reconciler.decision import Action, Decision, decide
from cbop.reconciler.events import EVENT_LEVELS, EventLevel, EventRecorder
from cbop.reconciler.interfaces import Requeue, Result
from cbop.reconciler.reconcile import Reconciler

__all__ = [
    "EVENT_LEVELS",
    "Action",
    "Decision",
    "EventLevel",
    "EventRecorder",
    "Reconciler",
    "Requeue",
    "Result",
    "decide",
]
