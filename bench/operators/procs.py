"""Operator processes under test, their RSS/CPU sampling, and the bench's own toolchain.

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
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.operators.cluster import REPO

BENCH = REPO / "bench"
PEERS = BENCH / "peers"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


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


# ------------------------------------------------------------------------- sampling


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, summed over its cores,
    from the first line of /proc/stat (busy is everything but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    total = sum(ticks[:8])  # guest time is already counted in user and nice
    return (total - ticks[3] - ticks[4]) / CLK_TCK, total / CLK_TCK


class CpuShare:
    """CPU seconds of named processes and of the whole machine between two points.

    ``pids`` maps a name (e.g. ``kube-apiserver``) to a process id; a process that has
    exited before construction or by :meth:`stop` is left out of the result.
    """

    def __init__(self, pids: Mapping[str, int]) -> None:
        self._pids = dict(pids)
        self._start = self._read()

    def _read(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, pid in self._pids.items():
            with contextlib.suppress(OSError):
                out[name] = cpu_seconds(pid)
        out["machine busy"], out["machine total"] = machine_cpu_seconds()
        return out

    def stop(self) -> dict[str, float]:
        """CPU seconds used since construction, by name, plus ``machine busy`` and
        ``machine total`` (busy + idle, i.e. wall seconds times cores)."""
        end = self._read()
        return {k: round(v - self._start[k], 2) for k, v in end.items() if k in self._start}


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB, from /proc/<pid>/status."""
    rss = hwm = 0
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


@dataclass
class Sampler:
    """Samples a process's RSS and CPU time every ``interval`` seconds on a thread."""

    pid: int
    interval: float = 0.5
    samples: list[tuple[float, int, int, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                rss, hwm = memory_kib(self.pid)
                self.samples.append((time.monotonic(), rss, hwm, cpu_seconds(self.pid)))
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)

    def peak_mib(self) -> float:
        return max((s[2] for s in self.samples), default=0) / 1024

    def mean_rss_mib(self, since: float) -> float:
        window = [s[1] for s in self.samples if s[0] >= since]
        return sum(window) / len(window) / 1024 if window else 0.0

    def quiet_from(self, since: float, *, below: float = 0.03, window: float = 3.0) -> float | None:
        """The time of the first sample at or after ``since`` that begins a quiet ``window``.

        None when there is none.

        Quiet: under ``below`` cores over the next ``window`` seconds (from this sample to
        the first sample at least ``window`` s later), to the sampling interval's
        resolution, unlike :func:`wait_quiet`, which only sees whole windows.
        """
        samples = self.samples
        j = 0
        for i, (t0, _, _, cpu0) in enumerate(samples):
            if t0 < since:
                continue
            j = max(j, i + 1)
            while j < len(samples) and samples[j][0] - t0 < window:
                j += 1
            if j == len(samples):
                return None
            t1, cpu1 = samples[j][0], samples[j][3]
            if (cpu1 - cpu0) / (t1 - t0) < below:
                return t0
        return None


def wait_quiet(
    pid: int, *, below: float = 0.03, window: float = 3.0, timeout: float = 120.0
) -> float:
    """Wait until the process uses under ``below`` cores over ``window`` s; return the wait."""
    start = time.monotonic()
    last = cpu_seconds(pid)
    while time.monotonic() - start < timeout:
        time.sleep(window)
        now = cpu_seconds(pid)
        if (now - last) / window < below:
            break
        last = now
    return time.monotonic() - start


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
            ``--sources``).
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
