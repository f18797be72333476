"""docs/deploy-systemd.md's commands, run as written: the staged `systemd-analyze verify` of the
units accepts them from a checkout, and reports a unit whose program the install does not make."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.doc_commands import blocks, run_blocks
from tests.deploy.test_systemd import needs_systemd_analyze
from tests.deploy.units import UNIT_NAMES, UNITS_DIR

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "deploy-systemd.md"
STAGED_CHECK = "Checking the units before an install"


def _staged_check() -> str:
    """The page's one `sh` block under its staged-check heading."""
    (block,) = run_blocks(PAGE, STAGED_CHECK)
    assert block.lang == "sh"
    return block.text


def _run(script: str, checkout: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`script` run by sh from `checkout`, as an operator pastes it, its temporary files in
    `tmp_path` (`mktemp -d` honours TMPDIR)."""
    return subprocess.run(
        ["/bin/sh", "-eu", "-c", script],
        cwd=checkout,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_only_the_staged_check_is_marked_to_run() -> None:
    """The page's install steps change the host, so no test runs them; the staged check is the
    one block fenced `sh`, and it stages every unit deploy/systemd holds."""
    to_run = [block for block in blocks(PAGE) if block.lang in ("sh", "console")]
    assert [block.heading for block in to_run] == [STAGED_CHECK]
    script = _staged_check()
    assert "deploy/systemd/*.service" in script
    assert sorted(path.name for path in UNITS_DIR.glob("*.service")) == sorted(UNIT_NAMES)
    for name in UNIT_NAMES:
        assert name.replace("@.", "@tvinsight.") in script, f"{name} is not verified"


@pytest.mark.integration
@needs_systemd_analyze
def test_the_documented_staged_verify_accepts_the_units_as_written(tmp_path: Path) -> None:
    """The page's staged `systemd-analyze verify`, run as written from the checkout on a host
    without hifi's units installed, prints nothing and exits 0, and cleans up its root."""
    done = _run(_staged_check(), ROOT, tmp_path)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
@needs_systemd_analyze
def test_the_documented_staged_verify_reports_a_program_the_install_does_not_make(
    tmp_path: Path,
) -> None:
    """The same commands, in a checkout whose connector unit runs /opt/hifi/.venv/bin/connector
    (where nothing installs it), report it and fail, so the check above can fail."""
    checkout = tmp_path / "checkout"
    shutil.copytree(UNITS_DIR, checkout / "deploy" / "systemd")
    unit = checkout / "deploy" / "systemd" / "connector@.service"
    unit.write_text(unit.read_text().replace("/opt/hifi/bin/", "/opt/hifi/.venv/bin/"))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    done = _run(_staged_check(), checkout, temporary)
    assert done.returncode != 0
    assert "Command /opt/hifi/.venv/bin/connector is not executable" in done.stderr
