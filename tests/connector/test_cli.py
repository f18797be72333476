"""The connector command line: help, and one-line exit-2 errors for bad flags and bad catalogs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import write_destination

pytestmark = [pytest.mark.integration]  # each test runs the command as a process

CONNECTOR = [sys.executable, "-m", "connector"]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CONNECTOR, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_help() -> None:
    """--help documents the flags and exits 0."""
    result = _run("--help")
    assert result.returncode == 0
    for flag in ("--dest", "--catalog", "--metrics-port", "--until-idle", "--log-format"):
        assert flag in result.stdout


def test_missing_destination_exits_2_with_one_line(catalog_dir: Path) -> None:
    """An unknown destination is one line on stderr and exit code 2, no traceback."""
    result = _run("--dest", "missing", "--catalog", str(catalog_dir))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("connector: destination 'missing'")


def test_typo_in_catalog_exits_2_with_one_line(catalog_dir: Path) -> None:
    """A catalog file with a typo'd key is one line naming the file and key, exit code 2."""
    write_destination(
        catalog_dir, "bad", url="https://x.test/", source_topics=["e"], max_in_fligth=3
    )
    result = _run("--dest", "bad", "--catalog", str(catalog_dir))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "bad.toml" in result.stderr
    assert "max_in_fligth" in result.stderr
    assert "Traceback" not in result.stderr


def test_catalog_from_environment(catalog_dir: Path) -> None:
    """HIFI_CATALOG_DIR chooses the catalog when --catalog is not given."""
    result = _run("--dest", "nowhere", env={"HIFI_CATALOG_DIR": str(catalog_dir)})
    assert result.returncode == 2
    assert str(catalog_dir) in result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--dest", "x", "--metrics-port", "70000"), "Invalid value for '--metrics-port'"),
        (("--dest", "x", "--until-idle", "-1"), "Invalid value for '--until-idle'"),
        (("--dest", "x", "--until-idle", "soon"), "Invalid value for '--until-idle'"),
        (("--dest", "x", "--log-format", "xml"), "Invalid value for '--log-format'"),
        (("--dest", "x", "--bogus"), "No such option '--bogus'"),
        ((), "Missing option '--dest'"),
        (("--dest",), "Option '--dest' requires an argument"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: tuple[str, ...], says: str) -> None:
    """A bad flag is one line on stderr, `connector: ...` naming the flag, and exit code 2."""
    result = _run(*args)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"connector: {says}"), result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_bad_kafka_environment_exits_2(catalog_dir: Path) -> None:
    """An invalid HIFI_KAFKA_* variable is named in a one-line error."""
    write_destination(catalog_dir, "ok", url="https://x.test/", source_topics=["e"])
    result = _run(
        "--dest", "ok", "--catalog", str(catalog_dir), env={"HIFI_KAFKA_SECURITY_PROTOCOL": "TLS"}
    )
    assert result.returncode == 2
    assert "HIFI_KAFKA_SECURITY_PROTOCOL" in result.stderr
