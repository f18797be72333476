"""`auditor report` refuses what it cannot answer with one line on stderr and a non-zero exit."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack.ports import free_port
from tests.auditor.support import run_auditor_command

pytestmark = [pytest.mark.integration]  # each test runs the command as a process


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        (
            ["--url", "http://127.0.0.1:9", "--archive", "{archive}"],
            2,
            "give exactly one of --url (a running auditor) and --archive (a directory)",
        ),
        ([], 2, "give exactly one of --url (a running auditor) and --archive (a directory)"),
        (
            ["--archive", "{archive}", "--availability", "--day", "2024-02-30"],
            2,
            "--day '2024-02-30': use a date, YYYY-MM-DD",
        ),
        (
            ["--url", "127.0.0.1:9402"],
            2,
            "--url '127.0.0.1:9402': use the auditor's ops address, http://HOST:PORT",
        ),
        (["--url", "{closed}"], 1, "--url {closed}: "),
        (
            ["--archive", "{archive}"],
            2,
            "--archive {archive}: nothing archived for destination 'd'",
        ),
        (["--archive", "{archive}/none"], 2, "--archive {archive}/none: not a directory"),
    ],
    ids=["both", "neither", "bad-day", "url-not-http", "url-unreachable", "dest-unknown", "no-dir"],
)
async def test_bad_report_invocations_are_one_line_and_fail(
    tmp_path: Path, args: list[str], code: int, line: str
) -> None:
    """Both or neither of --url/--archive, a bad --day or --url, an unreachable auditor, a destination not archived."""
    where = {"archive": str(tmp_path), "closed": f"http://127.0.0.1:{free_port()}"}
    argv = [arg.format(**where) for arg in args]
    got, out, err = await run_auditor_command("report", "--dest", "d", *argv)
    assert (got, out) == (code, "")
    assert err.startswith("auditor report: " + line.format(**where)), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
