"""Reconcile: turn one ConfigBundle key into the ConfigMap it declares.

Pure parts (:mod:`.desired`, :mod:`.decision`, :mod:`.status`) decide; :mod:`.reconcile`
acts through the API client; :mod:`.events` records what was done.
"""

from cbop.reconciler.decision import Action, Decision, decide
from cbop.reconciler.events import EVENT_LEVELS, EventLevel, EventRecorder
from cbop.reconciler.reconcile import CONTROLLER_UID_INDEX, Reconciler, Requeue, Result

__all__ = [
    "CONTROLLER_UID_INDEX",
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
