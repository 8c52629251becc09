"""Operator processes under test, and the bench's own toolchain.

The kopf peer and the plots run from the bench's own virtualenv and the controller-runtime
peer is a Go binary; both are built on demand under
``${XDG_CACHE_HOME:-~/.cache}/cbop/bench/`` and rebuilt when their inputs change.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.operators.cluster import REPO

BENCH = REPO / "bench"
PEERS = BENCH / "peers"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    path = Path(base) / "cbop" / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _digest(paths: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def bench_python() -> Path:
    """The bench virtualenv's python (kopf, matplotlib, py-spy), created if missing or stale."""
    requirements = BENCH / "requirements.txt"
    venv = cache_dir() / "venv"
    stamp = venv / ".requirements-sha"
    want = _digest([requirements])
    python = venv / "bin" / "python"
    if python.exists() and stamp.exists() and stamp.read_text() == want:
        return python
    print(f"bench: creating {venv} from {requirements.relative_to(REPO)}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-r", str(requirements)], check=True)
    stamp.write_text(want)
    return python


def controller_runtime_binary() -> Path:
    """Build (once per source change) the controller-runtime peer into the cache dir."""
    src = PEERS / "controller-runtime"
    inputs = [*src.glob("*.go"), src / "go.mod", src / "go.sum"]
    binary = cache_dir() / f"controller-runtime-peer-{_digest(inputs)}"
    if binary.exists():
        return binary
    print(f"bench: building {binary.name} (go build)", file=sys.stderr)
    tmp = binary.with_suffix(".tmp")
    subprocess.run(["go", "build", "-trimpath", "-o", str(tmp), "."], cwd=src, check=True)
    tmp.rename(binary)
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------ operators

IMPLEMENTATIONS = ("raw", "cbop", "controller-runtime", "kopf")
#: Variants measured in S1 only, at the sizes up to the given one: cbop with its former
#: default client-side limit (20/s, burst 30), kopf with ``queueing.worker_limit = 4``,
#: and controller-runtime with its own defaults (``MaxConcurrentReconciles`` unset, so 1,
#: as a kubebuilder scaffold leaves it; no client-side limit).
VARIANTS = {"cbop-qps20": 1000, "kopf-wl4": 100, "controller-runtime-defaults": 3000}

#: controller-runtime's default ``controller.Options.MaxConcurrentReconciles``.
CONTROLLER_RUNTIME_DEFAULT_WORKERS = 1


class Operator:
    """One operator process for one namespace.

    Args:
        impl: ``cbop``, ``cbop-qps20`` (cbop with its former default client limits),
            ``controller-runtime``, ``controller-runtime-defaults`` (its default of one
            concurrent reconcile, whatever ``workers`` says) or ``kopf``.
        kubeconfig: admin kubeconfig.
        namespace: the only namespace it watches (cbop: None for all namespaces).
        workers: concurrent reconciles.
        resync: informer resync period in seconds (kopf: a per-bundle timer), 0 = default.
        log_path: where its output goes.
        extra_args: more flags (cbop, e.g. ``--shards=3``, and controller-runtime, e.g.
            ``--sources`` or ``--cluster-bundles``).
    """

    def __init__(
        self,
        impl: str,
        kubeconfig: Path,
        namespace: str | None,
        *,
        workers: int,
        resync: float,
        log_path: Path,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.impl = impl
        self.probe_port = free_port()
        self.metrics_port = free_port()
        metrics = f"127.0.0.1:{self.metrics_port}"
        probe = f"127.0.0.1:{self.probe_port}"
        env: dict[str, str] = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        self.ready_path = "/readyz"
        if impl in ("cbop", "cbop-qps20"):
            limits = ["--kube-api-qps", "0"]
            if impl == "cbop-qps20":  # the client-side limit cbop once had by default
                limits = ["--kube-api-qps", "20", "--kube-api-burst", "30"]
            cmd = [
                sys.executable,
                "-m",
                "cbop",
                f"--kubeconfig={kubeconfig}",
                *([f"--namespace={namespace}"] if namespace else []),
                f"--workers={workers}",
                f"--metrics-bind-address={metrics}",
                f"--health-probe-bind-address={probe}",
                f"--resync-period={resync or 36000:g}s",
                "--log-format=json",
                # The peers do the ConfigBundle job only: so does cbop here.
                "--no-rollout",
                *limits,
                *extra_args,
            ]
        elif impl in ("controller-runtime", "controller-runtime-defaults"):
            if impl == "controller-runtime-defaults":
                workers = CONTROLLER_RUNTIME_DEFAULT_WORKERS
            cmd = [
                str(controller_runtime_binary()),
                f"--kubeconfig={kubeconfig}",
                # None: every namespace (the peer's default), as cbop without --namespace.
                *([f"--namespace={namespace}"] if namespace else []),
                f"--workers={workers}",
                f"--metrics-bind-address={metrics}",
                f"--health-probe-bind-address={probe}",
                f"--resync-period={resync or 36000:g}s",
                *extra_args,
            ]
        elif impl in ("kopf", "kopf-wl4"):
            env["BENCH_WORKERS"] = str(workers)
            env["BENCH_KOPF_WORKER_LIMIT"] = "4" if impl == "kopf-wl4" else "0"
            env["BENCH_RESYNC_SECONDS"] = f"{resync:g}"
            self.ready_path = "/healthz"
            cmd = [
                str(bench_python()),
                "-m",
                "kopf",
                "run",
                "--standalone",
                f"--namespace={namespace}",
                f"--liveness=http://{probe}/healthz",
                str(PEERS / "kopf" / "operator.py"),
            ]
        else:
            raise ValueError(f"not an operator: {impl}")
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self.pid = self.proc.pid
        self.started = time.monotonic()

    def wait_ready(self, timeout: float = 120.0) -> float:
        """Wait for the readiness (kopf: liveness) endpoint; return seconds since start."""
        url = f"http://127.0.0.1:{self.probe_port}{self.ready_path}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.impl} exited with {self.proc.returncode}; see {self.log_path}"
                )
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(url, timeout=2) as resp,
            ):
                if resp.status == 200:
                    return time.monotonic() - self.started
            time.sleep(0.1)
        raise TimeoutError(f"{self.impl} not ready after {timeout:.0f} s; see {self.log_path}")

    def stop(self, grace: float = 30.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()


def run_plot(results_json: Path, out_prefix: Path) -> list[Path]:
    """Draw the PNGs with matplotlib from the bench virtualenv; return their paths."""
    script = Path(__file__).with_name("plot.py")
    out = subprocess.run(
        [str(bench_python()), str(script), str(results_json), str(out_prefix)],
        check=True,
        capture_output=True,
        text=True,
    )
    return [Path(line) for line in out.stdout.splitlines() if line.strip()]


def cbop_revision() -> str:
    """The commit cbop runs from, with ``+dirty`` when src/ has uncommitted changes."""
    git = ["git", "-C", str(REPO)]
    head = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "src"], capture_output=True, text=True, check=False
    )
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def machine() -> Mapping[str, str]:
    """nproc, memory, CPU model, load, kernel and toolchain versions of this machine."""
    model = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kib = 0
    with contextlib.suppress(OSError), open("/proc/meminfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    go = subprocess.run(["go", "version"], capture_output=True, text=True, check=False).stdout
    return {
        "host": socket.gethostname(),
        "nproc": str(os.cpu_count()),
        "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "cpu": model,
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "kernel": os.uname().release,
        "python": sys.version.split()[0],
        "go": go.split()[2] if go else "?",
    }
