"""What the bench ran on: cores, CPU model and memory, read from /proc."""

from __future__ import annotations

import os
import platform
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
