"""A fake API server for unit tests, as client-go's fake clientset and ObjectTracker.

* :class:`FakeKube` (:mod:`.client`): a :class:`cbop.kube.KubeInterface` that records every
  call as an :class:`Action`, offers it to scripted reactions, and serves the rest
  from an :class:`ObjectTracker`;
* :class:`ObjectTracker` (:mod:`.tracker`): objects with resourceVersion and generation,
  list and watch with selectors, bookmarks, compaction (410), finalizers, dry runs;
  kept in a :class:`~.storage.Storage` (:mod:`.storage`), with the rules of a write's
  body in :mod:`.strategy`;
* reactions (:mod:`.reactions`): :func:`fail`, :func:`conflict_on`, :func:`delay`,
  :class:`Stall`, :class:`Script`;
* :class:`FakeWatch` (:mod:`.watch`), API errors worded as apimachinery words them
  (:mod:`.errors`), patches (:mod:`.patch`), field ownership (:mod:`.fields`),
  :class:`CacheLister` (:mod:`.lister`) and :class:`FakeRecorder` (:mod:`.recorder`).

Typical use::

    kube = FakeKube()
    kube.tracker.add(CONFIGMAPS, configmap)
    kube.prepend_reactor("update", "configmaps", conflict_on(1))
    reconcile(kube, ...)
    assert [a.key for a in kube.write_actions()] == [...]
"""

from cbop_testing.fakekube import errors
from cbop_testing.fakekube.client import FakeKube
from cbop_testing.fakekube.lister import CacheLister
from cbop_testing.fakekube.reactions import (
    Action,
    Reaction,
    Script,
    Stall,
    conflict_on,
    delay,
    fail,
)
from cbop_testing.fakekube.recorder import FakeRecorder, RecordedEvent
from cbop_testing.fakekube.tracker import STATUS_SUBRESOURCES, ObjectTracker
from cbop_testing.fakekube.watch import FakeWatch

__all__ = [
    "STATUS_SUBRESOURCES",
    "Action",
    "CacheLister",
    "FakeKube",
    "FakeRecorder",
    "FakeWatch",
    "ObjectTracker",
    "Reaction",
    "RecordedEvent",
    "Script",
    "Stall",
    "conflict_on",
    "delay",
    "errors",
    "fail",
]
