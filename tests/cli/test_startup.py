"""`--help`, `--version` and usage errors load none of hifi's runtime: the commands answer at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hifi.environment import ARROW_POOL_ENV

pytestmark = [pytest.mark.integration]  # each case is a fresh interpreter

COMMANDS = {
    "connector": "connector.cli",
    "retrier": "retrier.cli",
    "auditor": "auditor.cli",
    "spark-batch": "spark_batch.cli",
    "hifi-tenants": "tenants.cli",
    "ingest": "ingest.cli",
}
SUBCOMMANDS = {
    "connector": ["rewind", "backfill"],
    "retrier": ["dlq", "dlq list", "dlq replay"],
    "auditor": ["report"],
    "spark-batch": ["reconcile"],
    "hifi-tenants": ["push", "get", "diff"],
    "ingest": ["hash-token"],
}
# what a command loads only once a subcommand or the daemon runs
HEAVY = {
    "aiohttp",
    "aiokafka",
    "asyncio",
    "config",
    "httpx",
    "numpy",
    "orjson",
    "pyarrow",
    "pydantic",
    "pyspark",
    "redis",
    "rich",
    "starlette",
    "structlog",
    "uvicorn",
}
_PROBE = """
import json, sys
from {module} import main
sys.argv = {argv!r}
try:
    main()
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
loaded = sorted({{name.split(".")[0] for name in sys.modules}} & set({heavy!r}))
print("\\n" + json.dumps({{"code": code, "loaded": loaded}}))
"""


def _answer(prog: str, *args: str) -> tuple[int, list[str], str]:
    """Run PROG ARGS in a fresh interpreter: its exit code, the heavy packages it loaded, stdout."""
    probe = _PROBE.format(module=COMMANDS[prog], argv=[prog, *args], heavy=sorted(HEAVY))
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stderr
    output, _, last = run.stdout.rstrip("\n").rpartition("\n")
    found = json.loads(last)
    return found["code"], found["loaded"], output


@pytest.mark.parametrize("prog", COMMANDS)
def test_version_and_help_load_nothing_heavy(prog: str) -> None:
    """`--version`, `--help` and each subcommand's `--help` answer without importing the
    daemon, the catalog, Kafka, HTTP, Redis, Arrow or Spark."""
    code, loaded, output = _answer(prog, "--version")
    assert (code, loaded) == (0, [])
    assert output.startswith(f"{prog} ")
    for args in [[], *(sub.split() for sub in SUBCOMMANDS[prog])]:
        code, loaded, output = _answer(prog, *args, "--help")
        assert (code, loaded) == (0, []), args
        assert "Usage:" in output


@pytest.mark.parametrize("prog", COMMANDS)
def test_a_usage_error_loads_nothing_heavy(prog: str) -> None:
    """A flag the command does not know is refused (exit 2) before anything heavy loads."""
    code, loaded, _ = _answer(prog, "--no-such-flag")
    assert (code, loaded) == (2, [])


DAEMONS = ("connector", "retrier", "auditor", "ingest")
_ALLOCATORS_PROBE = """
import os, sys
from {module} import main
sys.argv = [{prog!r}, "--version"]
try:
    main()
except SystemExit:
    pass
import pyarrow
print(os.environ.get({pool_env!r}), pyarrow.default_memory_pool().backend_name)
"""


@pytest.mark.parametrize("prog", DAEMONS)
def test_a_daemon_sets_arrows_allocator_before_arrow_loads(prog: str) -> None:
    """Arrow reads ARROW_DEFAULT_MEMORY_POOL once, when it loads: a daemon's `main()` sets it
    first thing (`hifi.allocators`), so Arrow's internals too allocate from the C library."""
    probe = _ALLOCATORS_PROBE.format(module=COMMANDS[prog], prog=prog, pool_env=ARROW_POOL_ENV)
    env = {k: v for k, v in os.environ.items() if k != ARROW_POOL_ENV}
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[-2:] == ["system", "system"]
