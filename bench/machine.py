"""What the bench ran on: cores, CPU model and memory, read from /proc."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path


def describe(proc: Path = Path("/proc")) -> dict[str, object]:
    """nproc, CPU model, total memory (MiB), kernel and Python versions."""
    model = "unknown"
    memory_mib = 0
    try:
        for line in (proc / "cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_mib = int(line.split()[1]) // 1024
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count() or 0,
        "cpu_model": model,
        "memory_mib": memory_mib,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def _ticks_per_s() -> int:
    return int(os.sysconf("SC_CLK_TCK"))


def busy_cpu_s(proc: Path = Path("/proc")) -> float:
    """CPU seconds all cores spent busy since boot (everything but idle and iowait)."""
    fields = (proc / "stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(value) for value in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / _ticks_per_s()


def tree_cpu_s(pid: int, proc: Path = Path("/proc")) -> float:
    """CPU seconds of process `pid` and its children (broker, destination, connector), reaped or not."""
    total = 0.0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        fields = stat.rsplit(")", 1)[1].split()
        if int(entry.name) == pid:  # its own time and that of children it has reaped
            total += sum(int(value) for value in fields[11:15]) / _ticks_per_s()
        elif int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / _ticks_per_s()
    return total


class CpuWatch:
    """Cores used by this bench's processes and by everything else on the machine, over a span."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._start = (time.monotonic(), busy_cpu_s(), tree_cpu_s(self._pid))

    def cores(self) -> tuple[float, float]:
        """(ours, others) in cores since construction."""
        wall0, busy0, ours0 = self._start
        wall = max(1e-9, time.monotonic() - wall0)
        busy = busy_cpu_s() - busy0
        ours = tree_cpu_s(self._pid) - ours0
        return ours / wall, max(0.0, busy - ours) / wall
