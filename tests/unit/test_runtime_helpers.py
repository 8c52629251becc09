"""The runtime's helpers for reconcilers: predicates, own writes, the reconcile context,
and terminal errors in the worker's outcome policy."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import structlog

from cbop.informers import DeletedFinalStateUnknown
from cbop.runtime import (
    Controller,
    NoopControllerMetrics,
    OwnWrites,
    TerminalError,
    new_reconcile_id,
    reconcile_context,
)
from cbop.runtime.handlers import EnqueueHandler, enqueue_object
from cbop.runtime.predicates import (
    ANNOTATIONS_CHANGED,
    GENERATION_CHANGED,
    LABELS_CHANGED,
    RESOURCE_VERSION_CHANGED,
    all_of,
    any_of,
)
from cbop.workqueue import RateLimitingQueue


def obj(rv: str = "1", generation: int = 1, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "demo",
            "name": "web",
            "uid": "u1",
            "resourceVersion": rv,
            "generation": generation,
            **meta,
        }
    }


# -- predicates ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicate", "new", "passes"),
    [
        (GENERATION_CHANGED, obj("2", 1), False),
        (GENERATION_CHANGED, obj("2", 2), True),
        (LABELS_CHANGED, obj("2", labels={"a": "b"}), True),
        (LABELS_CHANGED, obj("2", 2), False),
        (ANNOTATIONS_CHANGED, obj("2", annotations={"a": "b"}), True),
        (RESOURCE_VERSION_CHANGED, obj("1"), False),
        (RESOURCE_VERSION_CHANGED, obj("2"), True),
        (any_of(GENERATION_CHANGED, LABELS_CHANGED), obj("2", labels={"x": "y"}), True),
        (any_of(GENERATION_CHANGED, LABELS_CHANGED), obj("2"), False),
        (all_of(GENERATION_CHANGED, LABELS_CHANGED), obj("2", 2), False),
    ],
)
def test_update_predicates(predicate: Any, new: dict[str, Any], passes: bool) -> None:
    assert predicate.update(obj(), new) is passes
    assert predicate.create(new)
    assert predicate.delete(new)


def test_the_handler_enqueues_only_what_its_predicates_pass() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue()
    handler = EnqueueHandler(queue, enqueue_object, predicates=(GENERATION_CHANGED,))
    handler.on_update(obj("1"), obj("2"))  # a status update
    assert len(queue) == 0
    handler.on_update(obj("1"), obj("3", 2))
    assert len(queue) == 1
    refuse_deletes = all_of(GENERATION_CHANGED, _NoDeletes())
    quiet = EnqueueHandler(RateLimitingQueue(), enqueue_object, predicates=(refuse_deletes,))
    quiet.on_delete(DeletedFinalStateUnknown("demo/web", obj()))
    quiet.on_delete(obj())
    assert len(quiet._queue) == 0
    queue.shut_down()


class _NoDeletes:
    def create(self, o: Any) -> bool:
        return True

    def update(self, old: Any, new: Any) -> bool:
        return True

    def delete(self, o: Any) -> bool:
        return False


# -- own writes ------------------------------------------------------------------------


def test_an_own_write_is_pending_until_the_cache_shows_it() -> None:
    writes: OwnWrites[str] = OwnWrites()
    before = obj("10")
    writes.record("demo/web", before, obj("15"), "written")
    assert writes.pending("demo/web", before) == "written"  # the cache is behind
    assert writes.pending("demo/web", obj("12")) == "written"  # older than the write
    assert writes.pending("demo/web", obj("15")) is None  # caught up: dropped
    assert writes.pending("demo/web", before) is None
    assert len(writes) == 0


def test_an_own_write_does_not_apply_to_a_recreated_object_or_an_unordered_version() -> None:
    writes: OwnWrites[str] = OwnWrites()
    writes.record("demo/web", obj("10"), obj("15"), "written")
    recreated = obj("10")
    recreated["metadata"]["uid"] = "u2"
    assert writes.pending("demo/web", recreated) is None
    writes.record("demo/web", obj("10"), None, "written")  # no answer: the base only
    assert writes.pending("demo/web", obj("10")) == "written"
    assert writes.pending("demo/web", obj("abc")) is None
    writes.record("demo/web", obj("10"), obj("15"), "written")
    writes.forget("demo/web")
    assert writes.pending("demo/web", obj("10")) is None


def test_the_version_an_own_write_produced_is_told_only_for_its_base() -> None:
    writes: OwnWrites[str] = OwnWrites()
    assert writes.written_version("demo/web", obj("10")) is None
    writes.record("demo/web", obj("10"), obj("15"), "written")
    assert writes.written_version("demo/web", obj("10")) == "15"
    assert writes.written_version("demo/web", obj("12")) is None  # another base
    recreated = obj("10")
    recreated["metadata"]["uid"] = "u2"
    assert writes.written_version("demo/web", recreated) is None
    writes.record("demo/web", obj("10"), None, "written")  # no answer read
    assert writes.written_version("demo/web", obj("10")) is None


# -- reconcile context -----------------------------------------------------------------


def test_reconcile_ids_are_unique_and_the_context_binds_every_log_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ids = {new_reconcile_id() for _ in range(1000)}
    assert len(ids) == 1000
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.JSONRenderer()],
        logger_factory=structlog.PrintLoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=False,
    )
    try:
        with reconcile_context("rollout-deployment", "demo/web") as reconcile_id:
            structlog.get_logger("anywhere").info("inside")
        structlog.get_logger("anywhere").info("outside")
    finally:
        structlog.reset_defaults()
    inside, outside = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert inside == {
        "controller": "rollout-deployment",
        "namespace": "demo",
        "name": "web",
        "reconcile_id": reconcile_id,
        "event": "inside",
    }
    assert outside == {"event": "outside"}


# -- terminal errors -------------------------------------------------------------------


class _Counting(NoopControllerMetrics):
    def __init__(self) -> None:
        self.results: list[str] = []
        self.terminal = 0
        self.errors = 0

    def reconciled(self, result: str, seconds: float) -> None:
        self.results.append(result)

    def reconcile_error(self) -> None:
        self.errors += 1

    def terminal_reconcile_error(self) -> None:
        self.terminal += 1


class _Failing:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def reconcile(self, key: str) -> Any:
        raise self.error


def test_a_terminal_error_is_counted_and_never_retried() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue()
    metrics = _Counting()
    controller = Controller(
        "c", _Failing(TerminalError("no")), queue=queue, workers=1, metrics=metrics
    )
    queue.add("demo/web")
    assert controller.process_next_work_item()
    assert (metrics.results, metrics.errors, metrics.terminal) == (["error"], 1, 1)
    assert queue.num_requeues("demo/web") == 0
    assert len(queue) == 0  # not added again, not even after a delay
    queue.shut_down()
