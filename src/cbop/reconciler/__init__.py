"""Reconcile: turn one ConfigBundle key into the ConfigMap it declares.

Pure parts (:mod:`.desired`, :mod:`.decision`, :mod:`.status`) decide; :mod:`.reconcile`
acts through the API client; :mod:`.events` records what was done.
"""

from cbop.reconciler.decision import Action, Decision, decide
from cbop.reconciler.events import EventRecorder
from cbop.reconciler.reconcile import Reconciler, Result
from cbop.runtime import Requeue

__all__ = [
    "Action",
    "Decision",
    "EventRecorder",
    "Reconciler",
    "Requeue",
    "Result",
    "decide",
]
