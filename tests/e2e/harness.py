"""Helpers for the operator's end-to-end tests: run cbop, wait, read the API server.

Nothing here fakes the API server: cbop runs as a real subprocess (``python -m cbop``)
against the session's local control plane, and counts come from the API server's own
``/metrics`` (``apiserver_request_total``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from cbop.kube import CONFIGBUNDLES, CONFIGMAPS, EVENTS, NAMESPACES, ApiError, KubeClient
from cbop_testing.envtest import ControlPlane
from cbop_testing.envtest.process import free_ports

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "manifests" / "crd" / "cbop.dev_configbundles.yaml"
#: The ``verb`` label values of writes in ``apiserver_request_total`` (the HTTP method,
#: or APPLY for server-side apply).
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY")


def kubectl(
    plane: ControlPlane,
    *args: str,
    namespace: str | None = None,
    stdin: str | None = None,
    timeout: float = 120.0,
) -> str:
    """Run the control plane's ``kubectl`` with ``args`` (in ``namespace`` if given).

    Returns its standard output (str). Raises AssertionError with kubectl's standard error
    when it exits non-zero, and subprocess.TimeoutExpired after ``timeout`` seconds.
    """
    scope = ["-n", namespace] if namespace is not None else []
    result = subprocess.run(
        [str(plane.binaries.kubectl), f"--kubeconfig={plane.kubeconfig_path}", *scope, *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


def wait_for(
    probe: Callable[[], Any],
    timeout: float = 30.0,
    interval: float = 0.1,
    message: str = "condition",
) -> Any:
    """Poll ``probe`` until it returns a truthy value; return it.

    Raises:
        AssertionError: not true within ``timeout`` seconds (with the last value seen).
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except ApiError as err:
            last = err
        if last and not isinstance(last, ApiError):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout} s waiting for {message}; last: {last!r}"
            )
        time.sleep(interval)


def free_port() -> int:
    """Return a free loopback port, reserved machine-wide for a while (as the control
    plane's: :func:`cbop_testing.envtest.process.free_ports`), so that tests on parallel
    workers are never given the same one."""
    return free_ports(1)[0]


def bundle(name: str, spec: Mapping[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "cbop.dev/v1beta1",
        "kind": "ConfigBundle",
        "metadata": {"name": name, **metadata},
        "spec": dict(spec),
    }


def set_spec(kube: KubeClient, namespace: str, name: str, spec: Mapping[str, Any]) -> int:
    """Replace the bundle's whole spec with one JSON patch (no read-modify-write race).

    Returns the new ``metadata.generation``.
    """
    out = kube.patch(
        CONFIGBUNDLES,
        namespace,
        name,
        [{"op": "replace", "path": "/spec", "value": dict(spec)}],
        patch_type="json",
    )
    return int(out["metadata"]["generation"])


def ready(
    kube: KubeClient, namespace: str, name: str, generation: int | None = None
) -> dict[str, Any] | None:
    """Return the bundle when its Ready condition is True (for ``generation``, if given)."""
    obj = kube.get(CONFIGBUNDLES, namespace, name)
    status = obj.get("status") or {}
    if generation is not None and status.get("observedGeneration") != generation:
        return None
    for cond in status.get("conditions") or ():
        if cond["type"] == "Ready" and cond["status"] == "True":
            return obj
    return None


def condition(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    """Return the bundle's Ready condition, or None."""
    obj = kube.get(CONFIGBUNDLES, namespace, name)
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond["type"] == "Ready":
            return dict(cond)
    return None


def get_or_none(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.get(CONFIGMAPS, namespace, name)
    except ApiError as err:
        if err.is_not_found:
            return None
        raise


def events(kube: KubeClient, namespace: str, reason: str | None = None) -> list[dict[str, Any]]:
    items = kube.list(EVENTS, namespace)["items"]
    return [e for e in items if reason is None or e.get("reason") == reason]


def wait_no_terminating_namespaces(kube: KubeClient, timeout: float = 120.0) -> None:
    """Wait until no namespace is terminating: their deletion makes writes of its own."""
    wait_for(
        lambda: all(
            (n.get("status") or {}).get("phase") != "Terminating"
            for n in kube.list(NAMESPACES)["items"]
        ),
        timeout,
        interval=1,
        message="no namespace terminating",
    )


def apiserver_writes(
    kube: KubeClient,
    resources: Sequence[str] = ("configmaps", "configbundles"),
    *,
    codes: Sequence[str] | None = None,
) -> dict[tuple[str, str], float]:
    """Sum of ``apiserver_request_total`` for write verbs by (verb, resource).

    ``codes``: count only answers with these HTTP codes (e.g. ``("201",)``); all by default.
    """
    text = raw_get(kube, "/metrics")
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            verb, resource = sample.labels.get("verb", ""), sample.labels.get("resource", "")
            if codes is not None and sample.labels.get("code", "") not in codes:
                continue
            if verb in WRITE_VERBS and resource in resources:
                out[(verb, resource)] = out.get((verb, resource), 0.0) + sample.value
    return out


def raw_get(kube: KubeClient, path: str) -> str:
    """GET a non-JSON path (e.g. ``/metrics``) with the client's credentials."""
    api = kube._transport.api_client
    response = api.rest_client.pool_manager.request(
        "GET", api.configuration.host + path, headers=api.default_headers, preload_content=True
    )
    assert response.status == 200, (response.status, response.data[:200])
    return str(response.data.decode())


class Operator:
    """A cbop process (``python -m cbop``) under test.

    Args:
        kubeconfig: kubeconfig path it connects with.
        namespaces: ``--namespace`` values (each test scopes cbop to its namespace).
        args: extra flags.
        log_path: where its stderr goes.
    """

    def __init__(
        self,
        kubeconfig: str | Path,
        namespaces: Sequence[str],
        *,
        args: Sequence[str] = (),
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.metrics_port = free_port()
        self.probe_port = free_port()
        self.log_path = log_path
        cmd = [
            sys.executable,
            "-m",
            "cbop",
            "--kubeconfig",
            str(kubeconfig),
            "--metrics-bind-address",
            f"127.0.0.1:{self.metrics_port}",
            "--health-probe-bind-address",
            f"127.0.0.1:{self.probe_port}",
            "--log-format",
            "json",
            "--log-level",
            "debug",
            *[f"--namespace={ns}" for ns in namespaces],
            *args,
        ]
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )

    def get(self, path: str, port: int | None = None) -> tuple[int, str]:
        url = f"http://127.0.0.1:{port or self.probe_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def wait_ready(self, timeout: float = 60.0) -> Operator:
        def probe() -> bool:
            assert self.proc.poll() is None, (
                f"cbop exited with {self.proc.returncode}:\n{self.logs()}"
            )
            with contextlib.suppress(OSError):
                return self.get("/readyz")[0] == 200
            return False

        wait_for(probe, timeout, message="cbop /readyz")
        return self

    def metrics(self) -> dict[str, float]:
        """Scrape /metrics: ``name{labels}`` -> value (labels sorted, as text)."""
        status, text = self.get("/metrics", self.metrics_port)
        assert status == 200
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}"] = s.value
        return out

    def metrics_text(self) -> str:
        return self.get("/metrics", self.metrics_port)[1]

    def logs(self) -> str:
        if not self._log.closed:  # closed once the process was stopped
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-20000:]

    def log_records(self) -> list[dict[str, Any]]:
        records = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                records.append(json.loads(line))
        return records

    def send(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 40.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        return self.proc.returncode


@contextlib.contextmanager
def operator(
    kubeconfig: str | Path,
    namespaces: Sequence[str],
    log_path: Path,
    *,
    args: Sequence[str] = (),
    ready_timeout: float = 60.0,
) -> Iterator[Operator]:
    op = Operator(kubeconfig, namespaces, args=args, log_path=log_path)
    try:
        op.wait_ready(ready_timeout)
        yield op
    finally:
        code = op.stop()
        assert code in (0, -9, -15), f"cbop exited with {code}:\n{op.logs()}"


def error_lines(stderr: str) -> list[str]:
    """Return the messages of the ``error``-level JSON log lines in ``stderr``, in order.

    cbop reports a fatal error as one such line (``{"level": "error", "event": ...}``).
    """
    found = []
    for line in stderr.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("level") == "error":
                found.append(str(record.get("event")))
    return found


def run_cli(
    kubeconfig: str | Path, *args: str, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m cbop --kubeconfig ... ARGS`` to completion."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "cbop",
            "--kubeconfig",
            str(kubeconfig),
            "--log-level",
            "warning",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
