"""KubeClient against a tiny scripted HTTP server on 127.0.0.1 (real sockets, real urllib3)."""

from __future__ import annotations

import gzip
import http.client
import json
import queue
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
import urllib3
from kubernetes import client as k8s_client

from cbop.kube import (
    CONFIGMAPS,
    ApiError,
    ConfigError,
    ConnectionFailed,
    KubeClient,
    LeaseNotHeld,
)
from cbop.kube.codec import decode_body, encode_body, query_value
from cbop.kube.config import load_in_cluster
from cbop.kube.transport import closed_before_answer
from cbop_testing.clock import FakeClock
from cbop_testing.httpserver import Reply, Responder, ScriptedServer, Seen


@pytest.fixture
def server_factory() -> Iterator[Callable[[Responder], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def make(responder: Responder) -> ScriptedServer:
        s = ScriptedServer(responder)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


class Draws(random.Random):
    """A random source returning the scripted draws in [0, 1), then 0.0 (the retry jitter)."""

    def __init__(self, *draws: float) -> None:
        super().__init__(0)
        self._draws = list(draws)
        self._lock = threading.Lock()

    def random(self) -> float:
        with self._lock:
            return self._draws.pop(0) if self._draws else 0.0


def make_client(url: str, *, draws: tuple[float, ...] = (), **kwargs: Any) -> KubeClient:
    """A client of ``url``; its Retry-After jitter draws ``draws``, then 0 (no jitter)."""
    configuration = k8s_client.Configuration(host=url)
    kwargs.setdefault("qps", 0)
    client = KubeClient.from_configuration(configuration, **kwargs)
    client._transport._retries.rng = Draws(*draws)
    return client


def cm(name: str, ns: str = "default", rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv}, "data": {}}


def run_in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, queue.Queue[Any]]:
    out: queue.Queue[Any] = queue.Queue()

    def target() -> None:
        try:
            out.put(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.put(("err", exc))

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, out


def test_429_with_retry_after_is_honoured_then_succeeds(server_factory: Any) -> None:
    answers = iter(
        [
            Reply(
                429,
                {"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow"},
                {"Retry-After": "3"},
            ),
            Reply(200, cm("a")),
        ]
    )
    srv = server_factory(lambda seen: next(answers))
    clock = FakeClock(100.0)
    calls: list[tuple[str, str, int]] = []
    client = make_client(
        srv.url, clock=clock, on_request=lambda v, r, s, _secs: calls.append((v, r, s))
    )

    t, out = run_in_thread(lambda: client.get(CONFIGMAPS, "default", "a"))
    # The client parks on the clock for exactly the Retry-After seconds ...
    assert clock.wait_for_waiter(deadline=103.0)
    assert len(srv.requests) == 1
    clock.step(2.9)
    assert clock.wait_for_waiter(deadline=103.0)
    assert len(srv.requests) == 1
    # ... and retries once the time has passed.
    clock.step(0.1)
    t.join(5)
    kind, value = out.get_nowait()
    assert kind == "ok", value
    assert value["metadata"]["name"] == "a"
    assert len(srv.requests) == 2
    assert calls == [("get", "configmaps", 429), ("get", "configmaps", 200)]
    assert client.request_counts() == {("get", "configmaps"): 2}


def _first_answer_429(retry_after: str, *, together: int) -> Responder:
    """Answer each object's first request 429 with ``retry_after``, later ones 200.

    The first ``together`` first requests are answered at once, when all of them have
    arrived: turned away together, as a priority level does with a burst. (Answered one
    by one, the first 429 would cut the client's requests in flight before the others
    were sent, and they would wait for a seat instead of a Retry-After.)
    """
    turned_away: set[str] = set()
    lock = threading.Lock()
    burst = threading.Barrier(together, timeout=10)

    def respond(seen: Seen) -> Reply:
        name = seen.path.rsplit("/", 1)[1]
        with lock:
            first = name not in turned_away
            turned_away.add(name)
        if first:
            burst.wait()
            return Reply(429, {"kind": "Status", "code": 429}, {"Retry-After": retry_after})
        return Reply(200, cm(name))

    return respond


def _get_all(client: KubeClient, names: str) -> queue.Queue[str]:
    """GET each of ``names`` in its own thread; each puts its name once it got its answer."""
    done: queue.Queue[str] = queue.Queue()
    for name in names:
        threading.Thread(
            target=lambda n=name: done.put(
                client.get(CONFIGMAPS, "default", n)["metadata"]["name"]
            ),
            daemon=True,
        ).start()
    return done


def test_requests_turned_away_together_are_retried_one_by_one_never_early(
    server_factory: Any,
) -> None:
    """Issue 18: a 429 burst does not come back as a herd, and nothing before Retry-After.

    Three requests turned away in the same instant with ``Retry-After: 2`` each wait 2 s
    plus their own draw of the jitter window (up to half the Retry-After): with draws 0,
    0.5 and 0.998 they are retried at +2.0, +2.5 and +2.998 s, one at a time.
    """
    srv = server_factory(_first_answer_429("2", together=3))
    clock = FakeClock(100.0)
    client = make_client(srv.url, clock=clock, draws=(0.0, 0.5, 0.998))
    done = _get_all(client, "abc")
    for deadline in (102.0, 102.5, 102.998):
        assert clock.wait_for_waiter(deadline=deadline)
    assert clock.waiter_deadlines() == pytest.approx([102.0, 102.5, 102.998])
    clock.set(101.999)
    assert len(srv.requests) == 3, "a retry went out before its Retry-After"
    retried = []
    for moment, left in ((102.0, [102.5, 102.998]), (102.5, [102.998]), (102.998, [])):
        clock.set(moment)
        retried.append(done.get(timeout=5))
        assert clock.waiter_deadlines() == pytest.approx(left)
        assert len(srv.requests) == 3 + len(retried)
    assert sorted(retried) == ["a", "b", "c"]


def test_by_default_the_retry_delays_are_drawn_at_random_within_the_window(
    server_factory: Any,
) -> None:
    """Without scripted draws: every wait is in [Retry-After, 1.5 x Retry-After), not all equal."""
    srv = server_factory(_first_answer_429("4", together=8))
    clock = FakeClock(0.0)
    client = KubeClient.from_configuration(
        k8s_client.Configuration(host=srv.url), qps=0, clock=clock
    )
    names = "abcdefgh"
    done = _get_all(client, names)
    give_up = time.monotonic() + 10  # real seconds; guards a hung test only
    while len(clock.waiter_deadlines()) < len(names):  # until every request has parked
        assert time.monotonic() < give_up, clock.waiter_deadlines()
        assert clock.wait_for_waiter()
    assert done.empty()
    deadlines = clock.waiter_deadlines()
    assert all(4.0 <= d < 6.0 for d in deadlines), deadlines
    assert len(set(deadlines)) > 1, "every request came back at the same instant"
    clock.set(6.0)
    assert sorted(done.get(timeout=5) for _ in names) == sorted(names)


def test_429_without_retry_after_raises_at_once(server_factory: Any) -> None:
    srv = server_factory(lambda seen: Reply(429, {"kind": "Status", "code": 429}))
    client = make_client(srv.url, clock=FakeClock())
    with pytest.raises(ApiError) as info:
        client.list(CONFIGMAPS, "default")
    assert info.value.is_too_many_requests
    assert info.value.retry_after is None
    assert len(srv.requests) == 1


def test_retry_after_gives_up_after_max_retries(server_factory: Any) -> None:
    srv = server_factory(lambda seen: Reply(503, None, {"Retry-After": "1"}))
    clock = FakeClock()
    client = make_client(srv.url, clock=clock)
    client._transport._retries.max_retries = 2
    t, out = run_in_thread(lambda: client.get(CONFIGMAPS, "ns", "x"))
    for _ in range(2):
        assert clock.wait_for_waiter()
        clock.step(1)
    t.join(5)
    kind, err = out.get_nowait()
    assert kind == "err"
    assert isinstance(err, ApiError)
    assert err.status == 503
    assert err.retry_after == 1.0
    assert len(srv.requests) == 3


def test_error_status_is_parsed_into_api_error(server_factory: Any) -> None:
    srv = server_factory(
        lambda seen: Reply(
            409,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": "AlreadyExists",
                "message": 'configmaps "a" already exists',
                "code": 409,
            },
        )
    )
    client = make_client(srv.url)
    with pytest.raises(ApiError) as info:
        client.create(CONFIGMAPS, "default", {"metadata": {"name": "a"}})
    assert info.value.is_already_exists
    assert info.value.message == 'configmaps "a" already exists'
    seen = srv.requests[0]
    assert seen.method == "POST"
    assert seen.path == "/api/v1/namespaces/default/configmaps"
    sent = json.loads(seen.body)
    assert sent == {"metadata": {"name": "a"}, "apiVersion": "v1", "kind": "ConfigMap"}
    assert seen.headers["content-type"] == "application/json"


def test_connection_refused_is_connection_failed() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    seen: list[int] = []
    client = make_client(f"http://127.0.0.1:{port}", on_request=lambda v, r, s, t: seen.append(s))
    with pytest.raises(ConnectionFailed) as info:
        client.get(CONFIGMAPS, "ns", "x")
    assert info.value.status == 0
    assert seen == [0]
    assert client.request_counts() == {("get", "configmaps"): 1}
    # urllib3's NewConnectionError subclasses ConnectTimeoutError: refused is no timeout.
    assert not info.value.timed_out
    assert info.value.reason == "ConnectionFailed"
    assert str(info.value).startswith("connection failed: GET ")
    assert "Timeout" not in str(info.value)


def test_verbs_send_the_right_requests(server_factory: Any) -> None:
    srv = server_factory(lambda seen: Reply(200, {"kind": "ConfigMap", "metadata": {"name": "a"}}))
    client = make_client(srv.url, user_agent="cbop-test/1")
    client.list(
        CONFIGMAPS,
        "ns",
        label_selector="a=b,c!=d",
        limit=500,
        continue_="tok",
        resource_version="0",
    )
    client.update(CONFIGMAPS, "ns", "a", {"metadata": {"name": "a", "resourceVersion": "5"}})
    client.patch(CONFIGMAPS, "ns", "a", {"data": {"k": "v"}})
    client.patch(CONFIGMAPS, "ns", "a", [{"op": "remove", "path": "/data/k"}], patch_type="json")
    client.patch(CONFIGMAPS, "ns", "a", {"data": {"k": "v"}}, patch_type="apply", force=True)
    client.patch(CONFIGMAPS, "ns", "a", {"status": {}}, subresource="status")
    client.delete(
        CONFIGMAPS, "ns", "a", preconditions={"uid": "u1"}, propagation_policy="Foreground"
    )
    client.request("GET", "/api/v1/namespaces", query={"limit": 1, "watch": False})

    lst, upd, merge, jsonp, apply, status, delete, raw = srv.requests
    assert lst.query == {
        "labelSelector": ["a=b,c!=d"],
        "limit": ["500"],
        "continue": ["tok"],
        "resourceVersion": ["0"],
    }
    assert lst.headers["user-agent"] == "cbop-test/1"
    assert upd.method == "PUT"
    assert json.loads(upd.body)["kind"] == "ConfigMap"
    assert merge.headers["content-type"] == "application/merge-patch+json"
    assert json.loads(merge.body) == {"data": {"k": "v"}}
    assert jsonp.headers["content-type"] == "application/json-patch+json"
    assert json.loads(jsonp.body) == [{"op": "remove", "path": "/data/k"}]
    assert apply.headers["content-type"] == "application/apply-patch+yaml"
    assert apply.query == {"fieldManager": ["cbop"], "force": ["true"]}
    assert status.path == "/api/v1/namespaces/ns/configmaps/a/status"
    assert delete.method == "DELETE"
    assert json.loads(delete.body) == {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "preconditions": {"uid": "u1"},
        "propagationPolicy": "Foreground",
    }
    assert raw.query == {"limit": ["1"], "watch": ["false"]}
    assert client.request_counts() == {
        ("list", "configmaps"): 1,
        ("update", "configmaps"): 1,
        ("patch", "configmaps"): 3,
        ("patch", "configmaps/status"): 1,
        ("delete", "configmaps"): 1,
        ("list", "namespaces"): 1,
    }
    with pytest.raises(ValueError, match="patch_type"):
        client.patch(CONFIGMAPS, "ns", "a", {}, patch_type="bogus")


@pytest.mark.parametrize(
    "value",
    ["ї" * 1000, "😀 emoji", "plain ascii", 'quote " backslash \\ newline \n tab \t'],
    ids=["2-byte", "4-byte", "ascii", "escapes"],
)
def test_every_request_body_is_compact_utf8_json(server_factory: Any, value: str) -> None:
    """Bodies are compact JSON in raw UTF-8, as client-go sends them, on every write verb."""
    srv = server_factory(lambda seen: Reply(200, cm("a")))
    client = make_client(srv.url)
    obj = {"metadata": {"name": "a"}, "data": {"k": value}}
    client.create(CONFIGMAPS, "ns", obj, dry_run=True)
    client.update(CONFIGMAPS, "ns", "a", obj)
    client.update(CONFIGMAPS, "ns", "a", obj, subresource="status")
    client.patch(CONFIGMAPS, "ns", "a", {"data": {"k": value}})
    add = [{"op": "add", "path": "/data/k", "value": value}]
    client.patch(CONFIGMAPS, "ns", "a", add, patch_type="json")
    client.patch(CONFIGMAPS, "ns", "a", {"data": {"k": value}}, patch_type="apply")
    client.request("POST", "/api/v1/namespaces/ns/events", body={"message": value})
    assert len(srv.requests) == 7
    for seen in srv.requests:
        compact = json.dumps(
            json.loads(seen.body.decode("utf-8")), ensure_ascii=False, separators=(",", ":")
        ).encode("utf-8")
        assert seen.body == compact, seen.path
        assert int(seen.headers["content-length"]) == len(compact)
        assert json.dumps(value, ensure_ascii=False).encode("utf-8") in seen.body
    # An already encoded body is sent as given.
    client.request("POST", "/api/v1/namespaces/ns/events", body='{"message": "ї"}')
    assert srv.requests[-1].body == '{"message": "ї"}'.encode()


def test_a_413_carries_the_request_body_size(server_factory: Any) -> None:
    srv = server_factory(
        lambda seen: Reply(
            413,
            {
                "kind": "Status",
                "code": 413,
                "reason": "RequestEntityTooLarge",
                "message": "Request entity too large: limit is 3145728",
            },
        )
    )
    client = make_client(srv.url)
    obj = {"metadata": {"name": "a"}, "data": {"k": "ї" * 10}}
    with pytest.raises(ApiError) as info:
        client.create(CONFIGMAPS, "ns", obj)
    assert info.value.is_request_entity_too_large
    assert info.value.request_bytes == len(srv.requests[0].body)
    assert len(srv.requests) == 1


def test_client_side_rate_limit_waits_on_the_clock(server_factory: Any) -> None:
    srv = server_factory(lambda seen: Reply(200, cm("a")))
    clock = FakeClock(0.0)
    client = make_client(srv.url, clock=clock, qps=2.0, burst=1)
    client.get(CONFIGMAPS, "ns", "a")  # the burst token
    t, out = run_in_thread(lambda: client.get(CONFIGMAPS, "ns", "a"))
    assert clock.wait_for_waiter(deadline=0.5)  # 1 token / 2 qps
    assert len(srv.requests) == 1
    clock.step(0.5)
    t.join(5)
    assert out.get_nowait()[0] == "ok"
    assert len(srv.requests) == 2


def test_no_client_side_rate_limit_by_default(server_factory: Any) -> None:
    """Issue 15: a client with the default settings never waits on its clock, however
    many requests it sends (the former default, 20/s with burst 30, made the 31st wait)."""
    srv = server_factory(lambda seen: Reply(200, cm("a")))
    clock = FakeClock(0.0)
    client = KubeClient.from_configuration(k8s_client.Configuration(host=srv.url), clock=clock)
    t, out = run_in_thread(lambda: [client.get(CONFIGMAPS, "ns", "a") for _ in range(100)])
    t.join(10)
    assert out.get_nowait()[0] == "ok"
    assert len(srv.requests) == 100
    assert not clock.has_waiters()
    assert clock.now() == 0.0


def test_a_limit_without_a_burst_allows_one_seconds_worth(server_factory: Any) -> None:
    """``burst=0`` with a QPS limit: a burst of ``ceil(qps)`` requests, then waits."""
    srv = server_factory(lambda seen: Reply(200, cm("a")))
    clock = FakeClock(0.0)
    client = make_client(srv.url, clock=clock, qps=2.5, burst=0)
    for _ in range(3):
        client.get(CONFIGMAPS, "ns", "a")
    # (Counted, not assumed to be 3: a loaded machine can make the transport resend a
    # GET on a kept-alive connection the server just closed.)
    sent = len(srv.requests)
    t, out = run_in_thread(lambda: client.get(CONFIGMAPS, "ns", "a"))
    assert clock.wait_for_waiter(deadline=0.4)  # 1 token / 2.5 qps
    assert len(srv.requests) == sent
    clock.step(0.4)
    t.join(5)
    assert out.get_nowait()[0] == "ok"


def _event(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def test_watch_yields_events_and_raises_gone_on_error_event(server_factory: Any) -> None:
    gone = {
        "kind": "Status",
        "code": 410,
        "reason": "Expired",
        "message": "too old resource version",
    }
    # One event split over two chunks, two events in one chunk, then the ERROR event.
    first = _event("ADDED", cm("a", rv="11"))
    chunks = [
        first[:10],
        first[10:],
        _event("MODIFIED", cm("a", rv="12"))
        + _event("BOOKMARK", {"kind": "ConfigMap", "metadata": {"resourceVersion": "13"}}),
        _event("ERROR", gone),
    ]
    srv = server_factory(lambda seen: Reply(200, chunks=chunks))
    client = make_client(srv.url, qps=1, burst=1, clock=FakeClock())
    stream = client.watch(
        CONFIGMAPS,
        "ns",
        resource_version="10",
        label_selector="x=y",
        timeout_seconds=300,
        read_timeout=5,
    )
    events: list[dict[str, Any]] = []
    with pytest.raises(ApiError) as info:
        events.extend(stream)
    assert [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("ADDED", "11"),
        ("MODIFIED", "12"),
        ("BOOKMARK", "13"),
    ]
    assert info.value.is_gone
    assert info.value.status == 410
    seen = srv.requests[0]
    assert seen.query == {
        "watch": ["true"],
        "resourceVersion": ["10"],
        "timeoutSeconds": ["300"],
        "allowWatchBookmarks": ["true"],
        "labelSelector": ["x=y"],
    }
    assert client.request_counts() == {("watch", "configmaps"): 1}


def test_watch_ends_cleanly_when_the_server_closes(server_factory: Any) -> None:
    srv = server_factory(lambda seen: Reply(200, chunks=[_event("ADDED", cm("a"))]))
    client = make_client(srv.url)
    events = list(client.watch(CONFIGMAPS, resource_version="1", timeout_seconds=1, read_timeout=5))
    assert [e["type"] for e in events] == ["ADDED"]


def test_watch_error_status_is_raised_before_streaming(server_factory: Any) -> None:
    srv = server_factory(
        lambda seen: Reply(429, {"kind": "Status", "code": 429}, {"Retry-After": "4"})
    )
    client = make_client(srv.url)
    with pytest.raises(ApiError) as info:
        client.watch(CONFIGMAPS, resource_version="1", timeout_seconds=1, read_timeout=5)
    assert info.value.is_too_many_requests
    assert info.value.retry_after == 4.0
    # Watches are never retried by the client: the informer owns that backoff.
    assert len(srv.requests) == 1


def test_silent_watch_times_out(server_factory: Any) -> None:
    release = threading.Event()
    srv = server_factory(
        lambda seen: Reply(200, chunks=[_event("ADDED", cm("a"))], release=release)
    )
    client = make_client(srv.url)
    stream = client.watch(CONFIGMAPS, resource_version="1", timeout_seconds=60, read_timeout=0.3)
    assert next(stream)["type"] == "ADDED"
    with pytest.raises(ConnectionFailed) as info:
        next(stream)
    assert info.value.timed_out
    release.set()


def blocked_reading(thread: threading.Thread, timeout: float = 5.0) -> bool:
    """Wait (up to ``timeout`` s) until ``thread`` is blocked inside a socket read.

    Read from the thread's own stack (``sys._current_frames``), so the test knows the
    reader is in ``recv`` before it closes the stream, instead of sleeping and hoping.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and thread.is_alive():
        frame = sys._current_frames().get(thread.ident or -1)
        while frame is not None:
            if frame.f_code.co_name in ("readinto", "recv_into", "_safe_read", "read_chunked"):
                return True
            frame = frame.f_back
        time.sleep(0.005)  # polls the other thread's stack; not a timing assumption
    return False


def test_watch_close_from_another_thread_unblocks_the_reader(server_factory: Any) -> None:
    release = threading.Event()
    srv = server_factory(
        lambda seen: Reply(200, chunks=[_event("ADDED", cm("a"))], release=release)
    )
    client = make_client(srv.url)
    stream = client.watch(CONFIGMAPS, resource_version="1", timeout_seconds=60, read_timeout=30)
    assert next(stream)["type"] == "ADDED"
    t, out = run_in_thread(lambda: list(stream))
    assert blocked_reading(t), "the reader never blocked in a socket read"
    stream.close()
    t.join(5)
    assert not t.is_alive()
    assert out.get_nowait() == ("ok", [])
    release.set()


def test_from_config_uses_the_kubeconfig(server_factory: Any, tmp_path: Path) -> None:
    srv = server_factory(lambda seen: Reply(200, cm("a")))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": srv.url}}],
                "users": [{"name": "u", "user": {"token": "secret-token"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    client = KubeClient.from_config(kubeconfig=str(kubeconfig), pool_size=7, qps=0)
    client.get(CONFIGMAPS, "default", "a")
    seen = srv.requests[0]
    assert seen.headers["authorization"] == "Bearer secret-token"
    assert seen.headers["user-agent"].startswith("cbop/")
    # The generated REST client hands connection_pool_maxsize to urllib3 as maxsize.
    assert client._transport.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] == 7
    with pytest.raises(ConfigError, match="nope"):
        KubeClient.from_config(kubeconfig=str(kubeconfig), context="nope")


def test_unreadable_kubeconfig_error_names_only_a_given_context(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    with pytest.raises(ConfigError) as info:
        KubeClient.from_config(kubeconfig=str(bad))
    assert "context" not in str(info.value).split(":")[0]
    assert "None" not in str(info.value)
    with pytest.raises(ConfigError, match=r"\(context 'dev'\)"):
        KubeClient.from_config(kubeconfig=str(bad), context="dev")
    # Not YAML at all: still a one-line configuration error, never a traceback.
    bad.write_text("[tool]\nname = 'x'\n")
    with pytest.raises(ConfigError, match="cannot load kubeconfig") as info:
        KubeClient.from_config(kubeconfig=str(bad))
    assert "\n" not in str(info.value)


def test_from_config_without_any_configuration_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="no Kubernetes configuration found"):
        KubeClient.from_config()


def test_in_cluster_token_is_reread_after_rotation(server_factory: Any, tmp_path: Path) -> None:
    srv = server_factory(lambda seen: Reply(200, cm("a")))
    token = tmp_path / "token"
    ca = tmp_path / "ca.crt"
    token.write_text("token-one")
    ca.write_text("not-used-over-http")
    clock = FakeClock(0.0)
    configuration = k8s_client.Configuration()
    load_in_cluster(
        configuration,
        clock,
        token_file=str(token),
        cert_file=str(ca),
        environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1"},
    )
    assert configuration.host == "https://127.0.0.1:1"
    configuration.host = srv.url  # the fake server speaks plain HTTP
    client = KubeClient.from_configuration(configuration, qps=0, clock=clock)

    client.get(CONFIGMAPS, "ns", "a")
    token.write_text("token-two")  # the kubelet rotates the projected token
    clock.step(30)
    client.get(CONFIGMAPS, "ns", "a")
    clock.step(31)
    client.get(CONFIGMAPS, "ns", "a")
    auths = [r.headers["authorization"] for r in srv.requests]
    assert auths == ["bearer token-one", "bearer token-one", "bearer token-two"]


def test_list_is_decoded_while_it_streams_in(server_factory: Any) -> None:
    items = [
        {"metadata": {"name": f"cm-{i}", "managedFields": [{"manager": "x"}]}, "data": {"k": "v"}}
        for i in range(500)
    ]
    body = json.dumps(
        {"kind": "ConfigMapList", "metadata": {"resourceVersion": "77"}, "items": items},
        separators=(",", ":"),
    ).encode()
    chunks = [body[i : i + 1500] for i in range(0, len(body), 1500)]
    srv = server_factory(lambda seen: Reply(200, chunks=chunks))
    client = make_client(srv.url)
    seen: list[str] = []

    def hook(item: dict[str, Any]) -> dict[str, Any]:
        seen.append(item["metadata"]["name"])
        del item["metadata"]["managedFields"]
        return item

    out = client.list(CONFIGMAPS, resource_version="0", limit=500, item_hook=hook)
    assert out["metadata"] == {"resourceVersion": "77"}
    assert seen == [f"cm-{i}" for i in range(500)]
    assert out["items"][42] == {"metadata": {"name": "cm-42"}, "data": {"k": "v"}}
    assert client.request_counts() == {("list", "configmaps"): 1}
    # The connection went back to the pool and is reusable.
    assert client.list(CONFIGMAPS)["metadata"] == {"resourceVersion": "77"}


def test_list_cut_short_is_an_error(server_factory: Any) -> None:
    body = json.dumps({"items": [{"metadata": {"name": "a"}}] * 50}).encode()
    half = body[: len(body) // 2]
    answers = iter(
        [
            Reply(200, chunks=[half]),  # a complete HTTP response with half a document
            Reply(200, chunks=[half], abort=True),  # the connection dies mid-body
        ]
    )
    srv = server_factory(lambda seen: next(answers))
    client = make_client(srv.url)
    with pytest.raises(ApiError) as info:
        client.list(CONFIGMAPS)
    assert info.value.status == 200
    assert info.value.reason == "InvalidResponse"
    with pytest.raises(ConnectionFailed):
        client.list(CONFIGMAPS)


def test_gzip_is_requested_and_decoded_but_not_for_watches(server_factory: Any) -> None:
    body = json.dumps(
        {"metadata": {"resourceVersion": "9"}, "items": [cm(f"o{i}") for i in range(300)]},
        separators=(",", ":"),
    ).encode()
    answers = iter(
        [
            Reply(200, raw=gzip.compress(body), headers={"Content-Encoding": "gzip"}),
            Reply(200, chunks=[]),
        ]
    )
    srv = server_factory(lambda seen: next(answers))
    client = make_client(srv.url)
    out = client.list(CONFIGMAPS)
    assert [o["metadata"]["name"] for o in out["items"]] == [f"o{i}" for i in range(300)]
    assert srv.requests[0].headers["accept-encoding"] == "gzip"
    list(client.watch(CONFIGMAPS, resource_version="9", timeout_seconds=1, read_timeout=5))
    assert srv.requests[1].headers.get("accept-encoding", "identity") != "gzip"


class RecordingMetrics:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def request(self, code: str, method: str, host: str) -> None:
        self.calls.append(("request", code, method, host))

    def request_duration(self, verb: str, host: str, seconds: float) -> None:
        self.calls.append(("duration", verb, host))

    def rate_limiter_duration(self, verb: str, host: str, seconds: float) -> None:
        self.calls.append(("rate_limiter", verb, host, seconds))

    def retry(self, code: str, method: str, host: str, wait_seconds: float) -> None:
        self.calls.append(("retry", code, method, host, wait_seconds))


def test_429_is_retried_after_the_asked_wait_logged_and_counted(server_factory: Any) -> None:
    """Issue 18: client-go's metrics and a debug line per 429 with its Retry-After."""
    answers = iter([Reply(429, "Too many requests", {"Retry-After": "2"}), Reply(201, cm("a"))])
    srv = server_factory(lambda seen: next(answers))
    clock = FakeClock(0.0)
    metrics = RecordingMetrics()
    client = make_client(srv.url, clock=clock, draws=(0.5,))
    client.set_metrics(metrics)
    host = srv.url.split("://", 1)[1]
    with structlog.testing.capture_logs() as logs:
        t, out = run_in_thread(lambda: client.create(CONFIGMAPS, "ns", cm("a")))
        assert clock.wait_for_waiter(deadline=2.5)
        clock.step(2.5)
        t.join(5)
    assert out.get_nowait()[0] == "ok"
    assert [c for c in metrics.calls if c[0] in ("request", "retry")] == [
        ("request", "429", "POST", host),
        ("retry", "429", "POST", host, 2.5),  # the seconds waited, jitter included
        ("request", "201", "POST", host),
    ]
    assert [c for c in metrics.calls if c[0] == "rate_limiter"] == [
        ("rate_limiter", "POST", host, 0.0),
        ("rate_limiter", "POST", host, 0.0),
    ]
    (line,) = [entry for entry in logs if entry["log_level"] == "debug"]
    assert line["retry_after"] == 2.0
    assert line["wait"] == 2.5
    assert line["code"] == 429
    assert line["verb"] == "create"


def test_exhausted_retries_warn_at_most_every_30_seconds(server_factory: Any) -> None:
    srv = server_factory(lambda seen: Reply(429, "Too many requests", {"Retry-After": "0"}))
    clock = FakeClock(0.0)
    client = make_client(srv.url, clock=clock)
    client._transport._retries.max_retries = 1
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            with pytest.raises(ApiError):
                client.get(CONFIGMAPS, "ns", "x")
        clock.step(30)
        with pytest.raises(ApiError):
            client.get(CONFIGMAPS, "ns", "x")
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert len(warnings) == 2
    assert warnings[0]["retries"] == 1
    assert warnings[1]["suppressed_since_last"] == 2
    assert len([e for e in logs if e["log_level"] == "debug" and e.get("code") == 429]) == 4


def test_the_client_side_rate_limiter_wait_is_observed(server_factory: Any) -> None:
    srv = server_factory(lambda seen: Reply(200, cm("a")))
    clock = FakeClock(0.0)
    metrics = RecordingMetrics()
    client = make_client(srv.url, clock=clock, qps=1, burst=1)
    client.set_metrics(metrics)
    client.get(CONFIGMAPS, "ns", "a")
    t, out = run_in_thread(lambda: client.get(CONFIGMAPS, "ns", "a"))
    assert clock.wait_for_waiter()
    clock.step(1)
    t.join(5)
    assert out.get_nowait()[0] == "ok"
    waits = [c[3] for c in metrics.calls if c[0] == "rate_limiter"]
    assert waits == [0.0, 1.0]


def test_a_fenced_client_sends_no_write_once_the_fence_closes(server_factory: Any) -> None:
    """Every mutating verb checks the fence just before sending; reads never do."""
    srv = server_factory(lambda seen: Reply(200, cm("a")))
    open_ = [True]
    checks: list[bool] = []

    def fence() -> bool:
        checks.append(open_[0])
        return open_[0]

    client = make_client(srv.url).with_fence(fence)
    client.create(CONFIGMAPS, "default", cm("a"))
    assert len(srv.requests) == 1
    open_[0] = False
    writes: list[Callable[[], Any]] = [
        lambda: client.create(CONFIGMAPS, "default", cm("a")),
        lambda: client.update(CONFIGMAPS, "default", "a", cm("a")),
        lambda: client.patch(CONFIGMAPS, "default", "a", {"data": {}}, patch_type="merge"),
        lambda: client.delete(CONFIGMAPS, "default", "a"),
        lambda: client.request("POST", "/api/v1/namespaces/default/configmaps", body=cm("b")),
    ]
    for write in writes:
        with pytest.raises(LeaseNotHeld):
            write()
    assert len(srv.requests) == 1, "a fenced write reached the server"
    client.get(CONFIGMAPS, "default", "a")
    client.list(CONFIGMAPS, "default")
    assert [s.method for s in srv.requests] == ["POST", "GET", "GET"]
    assert checks == [True] + [False] * len(writes)
    assert client.request_counts() == {
        ("create", "configmaps"): 1,
        ("get", "configmaps"): 1,
        ("list", "configmaps"): 1,
    }


def test_the_fence_is_checked_after_a_retry_after_wait(server_factory: Any) -> None:
    """A write that waited (Retry-After) is checked again before it is re-sent."""
    answers = iter([Reply(429, {"kind": "Status", "code": 429}, {"Retry-After": "1"})])
    srv = server_factory(lambda seen: next(answers))
    clock = FakeClock(100.0)
    open_ = [True]
    client = make_client(srv.url, clock=clock).with_fence(lambda: open_[0])
    t, out = run_in_thread(lambda: client.create(CONFIGMAPS, "default", cm("a")))
    assert clock.wait_for_waiter(deadline=101.0)
    open_[0] = False  # the lease ran out while the request waited
    clock.step(1.0)
    t.join(5)
    kind, value = out.get_nowait()
    assert kind == "err"
    assert isinstance(value, LeaseNotHeld)
    assert len(srv.requests) == 1


def test_a_429_throttles_the_client_and_its_fenced_copies_until_its_retries_are_due(
    server_factory: Any,
) -> None:
    """Issue 18: background writers can tell that APF is rejecting this client, and for how long."""
    answers = iter(
        [
            Reply(503, {"kind": "Status", "code": 503}, {"Retry-After": "5"}),
            Reply(429, {"kind": "Status", "code": 429}, {"Retry-After": "3"}),
            Reply(201, cm("a")),
        ]
    )
    srv = server_factory(lambda seen: next(answers))
    clock = FakeClock(100.0)
    client = make_client(srv.url, clock=clock)
    fenced = client.with_fence(lambda: True)
    assert client.throttled_for() == 0.0
    t, out = run_in_thread(lambda: fenced.create(CONFIGMAPS, "default", cm("a")))
    # A 5xx with Retry-After is retried but is not throttling.
    assert clock.wait_for_waiter(deadline=105.0)
    assert client.throttled_for() == 0.0
    clock.step(5.0)
    # The 429 is: both the client and its fenced copy report the wait left until every
    # retry it can cause is due: its Retry-After (3 s) plus the jitter window (1.5 s).
    assert clock.wait_for_waiter(deadline=108.0)
    assert client.throttled_for() == 4.5
    assert fenced.throttled_for() == 4.5
    waiter, waited = run_in_thread(client.wait_while_throttled)
    assert clock.wait_for_waiter(deadline=109.5)
    clock.step(3.0)
    t.join(5)  # this retry drew no jitter: sent once the Retry-After ran out
    assert out.get_nowait()[0] == "ok"
    assert client.throttled_for() == 1.5
    assert waiter.is_alive()
    clock.step(1.5)
    waiter.join(5)
    assert waited.get_nowait() == ("ok", 4.5)
    assert client.throttled_for() == 0.0
    assert client.wait_while_throttled() == 0.0


def test_body_encoding_and_decoding_match_the_standard_library() -> None:
    """encode_body/decode_body (orjson) give the bytes and values json.dumps/loads give."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "a",
            "labels": {"app.kubernetes.io/managed-by": "cbop"},
            "ownerReferences": [{"controller": True, "blockOwnerDeletion": True, "uid": "u"}],
            "finalizers": [],
            "generation": 2**53 + 1,
            "deletionGracePeriodSeconds": None,
        },
        "data": {"k": 'ї 😀 \u2028 \x00 " \\ \n', "empty": "", "e\u0301": "x"},
        "binaryData": {"b": "AAEC"},
    }
    standard = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    assert encode_body(body) == standard
    assert decode_body(standard) == json.loads(standard) == body
    assert decode_body(b"[1, 2]") == [1, 2]
    with pytest.raises(TypeError):
        encode_body({1: "a non-string key"})
    with pytest.raises(ValueError, match="end of data"):
        decode_body(b'{"truncated": ')


def test_after_a_429_a_write_waits_for_a_seat_and_asks_the_fence_after_the_wait(
    server_factory: Any,
) -> None:
    """Once throttled, a request beyond the in-flight limit is not sent until one in
    flight is answered; a fenced write asks its fence after that wait, not before."""
    slow = threading.Event()

    def respond(seen: Seen) -> Reply:
        if seen.path.endswith("/busy"):
            return Reply(429, "Too many requests", {"Retry-After": "0"})
        if seen.path.endswith("/slow"):
            slow.wait(5.0)
        return Reply(200, cm("a"))

    srv = server_factory(respond)
    clock = FakeClock(0.0)
    open_ = [True]
    client = make_client(srv.url, clock=clock)
    client._transport._retries.max_retries = 0
    fenced = client.with_fence(lambda: open_[0])
    with pytest.raises(ApiError):
        client.get(CONFIGMAPS, "ns", "busy")  # one in flight, turned away: limit 1
    reader, read = run_in_thread(lambda: client.get(CONFIGMAPS, "ns", "slow"))
    deadline = time.monotonic() + 5.0  # a real-time guard: the server is real
    while len(srv.requests) < 2:
        assert time.monotonic() < deadline, "the slow GET never arrived"
        time.sleep(0.01)
    writer, wrote = run_in_thread(lambda: fenced.create(CONFIGMAPS, "ns", cm("b")))
    assert clock.wait_for_waiter(timeout=5.0)  # the write waits for a seat
    open_[0] = False  # the lease is lost meanwhile
    slow.set()
    reader.join(5.0)
    writer.join(5.0)
    assert read.get_nowait()[0] == "ok"
    outcome = wrote.get_nowait()
    assert outcome[0] == "err"
    assert isinstance(outcome[1], LeaseNotHeld)
    assert [s.method for s in srv.requests] == ["GET", "GET"], "the write reached the server"


@pytest.mark.parametrize(
    "query",
    [
        None,
        {"labelSelector": "app in (a,b),tier!=x", "limit": 500, "watch": True},
        {
            "fieldSelector": "metadata.name=a/b c",
            "resourceVersion": "0",
            "allowWatchBookmarks": False,
        },
    ],
    ids=["none", "selector", "escapes"],
)
def test_request_target_matches_the_generated_clients_serialisation(
    query: dict[str, str | int | bool] | None,
) -> None:
    # The transport builds URLs and headers itself for speed; they must stay what the
    # generated client's param_serialize makes of the same request.
    configuration = k8s_client.Configuration(
        host="https://127.0.0.1:6443",
        api_key={"BearerToken": "token-one"},
        api_key_prefix={"BearerToken": "Bearer"},
    )
    client = KubeClient.from_configuration(configuration, qps=0, user_agent="cbop-test/1")
    transport = client._transport
    path = "/api/v1/namespaces/ns/configmaps"
    ours = transport._target("GET", path, query, {"Accept": "application/json"})
    theirs = transport.api_client.param_serialize(
        method="GET",
        resource_path=path,
        query_params=[(k, query_value(v)) for k, v in (query or {}).items()],
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    assert ours == theirs[:3]
    assert ours[2]["authorization"] == "Bearer token-one"
    assert ours[2]["User-Agent"] == "cbop-test/1"


class ClosingServer:
    """A loopback HTTP/1.1 server that closes a kept-alive connection unanswered.

    The first request on the first connection is answered (``Content-Length``, kept
    alive); the next request on that connection is read and the connection closed
    without a byte of answer, as an idle-connection reaper does in the race with a
    request going out; every request on a later connection is answered.
    """

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requests: list[tuple[int, str]] = []  # (connection number, request line)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _read_request(self, reader: Any) -> str | None:
        line = reader.readline()
        if not line:
            return None
        while reader.readline() not in (b"\r\n", b""):
            pass
        return str(line.decode().strip())

    def _serve(self) -> None:
        for number in range(2):
            conn, _ = self.sock.accept()
            reader = conn.makefile("rb")
            while (line := self._read_request(reader)) is not None:
                self.requests.append((number, line))
                if number == 0 and len(self.requests) == 2:
                    break  # close without answering
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(self.body), self.body)
                )
            reader.close()
            conn.close()

    def close(self) -> None:
        self.sock.close()


def test_a_get_on_a_connection_closed_unanswered_is_sent_again_once() -> None:
    body = json.dumps({"metadata": {"resourceVersion": "5"}, "items": [cm("a")]}).encode()
    srv = ClosingServer(body)
    try:
        client = make_client(srv.url)
        assert client.list(CONFIGMAPS)["metadata"] == {"resourceVersion": "5"}
        # The second list goes out on the kept-alive connection, which the server
        # closes unanswered: the GET is sent again on a new connection, once.
        assert client.list(CONFIGMAPS)["items"][0]["metadata"]["name"] == "a"
        assert [n for n, _ in srv.requests] == [0, 0, 1]
        assert client.request_counts() == {("list", "configmaps"): 2}
    finally:
        srv.close()


def test_closed_before_answer_is_only_a_connection_closed_before_any_byte() -> None:
    gone = urllib3.exceptions.ProtocolError(
        "Connection aborted.", http.client.RemoteDisconnected("closed")
    )
    assert closed_before_answer(urllib3.exceptions.MaxRetryError(None, "/x", gone))  # type: ignore[arg-type]
    reset = urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError())
    assert not closed_before_answer(urllib3.exceptions.MaxRetryError(None, "/x", reset))  # type: ignore[arg-type]
    assert not closed_before_answer(urllib3.exceptions.ReadTimeoutError(None, "/x", "slow"))  # type: ignore[arg-type]
