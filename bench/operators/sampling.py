"""What a process and the machine spend: CPU seconds, RSS, load, from /proc.

The bench reads these itself rather than from the operators' metrics so that every
implementation is measured the same way (cbop, the Go peer and kopf export different
metrics, the raw floor none).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

CLK_TCK = os.sysconf("SC_CLK_TCK")


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


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, e.g. ``"3.10 2.95 2.40"``."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


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
        resolution, unlike :func:`wait_cpu_quiet`, which only sees whole windows.
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


def wait_cpu_quiet(
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
