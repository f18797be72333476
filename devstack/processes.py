"""hifi daemons as real child processes, for the demo and the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def start_daemon(
    module: str, args: list[str], *, bootstrap: str, log_path: Path
) -> subprocess.Popen[bytes]:
    """Start `python -m MODULE ARGS --log-format json` against `bootstrap`, logging to `log_path`."""
    env = {**os.environ, "HIFI_KAFKA_BOOTSTRAP": bootstrap}
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args, "--log-format", "json"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
