"""hifi daemons as real child processes, for the demo and the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hifi.kafka.settings import ENV_KEYS, KafkaSettings


def start_daemon(
    module: str,
    args: list[str],
    *,
    log_path: Path,
    bootstrap: str | None = None,
    kafka: KafkaSettings | None = None,
) -> subprocess.Popen[bytes]:
    """Start `python -m MODULE ARGS --log-format json`, logging to `log_path`, against `bootstrap`
    or with every `HIFI_KAFKA_*` variable of `kafka` (security included) in place of this
    process's own; `bootstrap`, when both are given, names the address."""
    if bootstrap is None and kafka is None:
        raise ValueError("start_daemon needs bootstrap= or kafka=")
    env = dict(os.environ)
    if kafka is not None:
        for variable in ENV_KEYS.values():
            env.pop(variable, None)
        env.update(kafka.environment())
    if bootstrap is not None:
        env["HIFI_KAFKA_BOOTSTRAP"] = bootstrap
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args, "--log-format", "json"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
