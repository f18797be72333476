"""`auditor --check` changes nothing: it reads where the archive would go, creating nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from tests.helpers import write_destination


def _check(catalog: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--catalog", str(catalog), "--check", *args])
    return result.exit_code, result.output


def test_check_creates_no_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the default ./hifi-archive nor an --archive that does not exist is created;
    the check says the auditor will create it, and exits 0."""
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    write_destination(catalog, "shop", url="https://x.test/", source_topics=["src"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HIFI_ARCHIVE_DIR", raising=False)
    code, out = _check(catalog)
    assert code == 0, out
    assert "archive hifi-archive: does not exist yet; the auditor will create it" in out
    assert "destination shop: audit on, settle 5 min, lag SLA 1 s" in out
    assert not (tmp_path / "hifi-archive").exists()
    code, out = _check(catalog, "--archive", str(tmp_path / "deep" / "archive"))
    assert code == 0, out
    assert not (tmp_path / "deep").exists()


def test_check_of_an_existing_archive_writes_nothing(tmp_path: Path) -> None:
    """An existing archive is reported writable and left as it was (no probe file, no clean-up
    of a temporary file an auditor left); a file in its place is exit 2 in one line."""
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    write_destination(catalog, "shop", url="https://x.test/", source_topics=["src"])
    archive = tmp_path / "archive"
    archive.mkdir()
    left = archive / ".rows-1.parquet.tmp"
    left.write_bytes(b"")
    os.utime(left, (0, 0))  # old enough for an auditor's start to remove it
    code, out = _check(catalog, "--archive", str(archive))
    assert code == 0, out
    assert f"archive {archive}: writable" in out
    assert [p.name for p in archive.iterdir()] == [left.name]
    as_file = tmp_path / "file"
    as_file.write_text("")
    code, out = _check(catalog, "--archive", str(as_file))
    assert code == 2
    assert "is a file, not a directory" in out
