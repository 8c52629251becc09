"""List+watch informers with an indexed cache, after client-go's ``tools/cache``.

:class:`SharedInformer` mirrors one resource (optionally one namespace / one label
selector) into an :class:`Indexer` and notifies :class:`ResourceEventHandler` s; the
:class:`Lister` is the read-only view controllers read from
(:class:`MultiNamespaceLister` over several namespaces); :class:`SharedInformerFactory`
hands out one informer per resource, scope and selector, shared by every controller.
Cached objects are shared parsed-JSON dicts that must never be mutated (see
:mod:`cbop.informers.indexer` for the contract and :mod:`cbop.informers.mutation` for the
detector that enforces it in tests).

This package may import ``cbop.metrics``, ``cbop.workqueue``, ``cbop.kube``, ``cbop.api``,
``cbop.clock``, ``cbop.keys`` and ``cbop.tokenbucket``.
"""

from cbop.informers.backoff import Backoff
from cbop.informers.factory import SharedInformerFactory
from cbop.informers.handlers import DeleteArg, FuncHandler, ResourceEventHandler
from cbop.informers.indexer import Indexer
from cbop.informers.indexfuncs import (
    IndexFunc,
    index_by_controller_uid,
    index_by_label,
    index_by_namespace,
    matches_labels,
)
from cbop.informers.informer import (
    DEFAULT_RESYNC_PERIOD,
    ListWatchClient,
    SharedInformer,
    Transform,
    strip_managed_fields,
    wait_for_cache_sync,
)
from cbop.informers.listers import Lister, MultiNamespaceLister
from cbop.informers.mutation import CacheMutationError
from cbop.informers.problems import ListWatchProblem
from cbop.informers.tombstone import DeletedFinalStateUnknown, meta_namespace_key
from cbop.keys import BY_NAMESPACE, CONTROLLER_UID_INDEX, split_key

__all__ = [
    "BY_NAMESPACE",
    "CONTROLLER_UID_INDEX",
    "DEFAULT_RESYNC_PERIOD",
    "Backoff",
    "CacheMutationError",
    "DeleteArg",
    "DeletedFinalStateUnknown",
    "FuncHandler",
    "IndexFunc",
    "Indexer",
    "ListWatchClient",
    "ListWatchProblem",
    "Lister",
    "MultiNamespaceLister",
    "ResourceEventHandler",
    "SharedInformer",
    "SharedInformerFactory",
    "Transform",
    "index_by_controller_uid",
    "index_by_label",
    "index_by_namespace",
    "matches_labels",
    "meta_namespace_key",
    "split_key",
    "strip_managed_fields",
    "wait_for_cache_sync",
]
