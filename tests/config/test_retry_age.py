"""A `max_retry_age_s` shorter than the retry tiers: accepted, and said at start and in `--check`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from config.catalog import Catalog
from config.destination import Destination
from config.retry_age import tiers_never_run
from hifi.kafka.settings import KafkaSettings
from retrier.cli import _check
from retrier.daemon import Retrier
from tests.helpers import write_destination


def _dest(tmp_path: Path, name: str, tiers_s: list[float], max_age_s: float) -> Destination:
    write_destination(
        tmp_path,
        name,
        url="https://x.test/",
        source_topics=["src"],
        retry_tiers_s=tiers_s,
        max_retry_age_s=max_age_s,
    )
    return Catalog(tmp_path).load(name)


def test_the_tiers_whose_turn_comes_after_the_age_limit(tmp_path: Path) -> None:
    """The k-th re-offer comes no sooner than the sum of the first k+1 tiers."""
    tiers_s = [
        30.0,
        120.0,
        600.0,
        1800.0,
        7200.0,
    ]  # due 30 s, 2.5 min, 12.5 min, 42.5 min, 2 h 42.5 min
    assert tiers_never_run(_dest(tmp_path, "a", tiers_s, 3600)) == [4]
    assert tiers_never_run(_dest(tmp_path, "b", tiers_s, 600)) == [2, 3, 4]
    assert tiers_never_run(_dest(tmp_path, "c", tiers_s, 9750)) == []


def test_check_warns_naming_the_tiers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`retrier --check` warns (exit 0 still) and names each tier that can never run."""
    dest = _dest(tmp_path, "shop", [30.0, 120.0, 600.0, 1800.0, 7200.0], 3600)
    report = asyncio.run(_check([dest], KafkaSettings(), probe=False))
    out = capsys.readouterr().out
    assert (report.warnings, report.refused, report.unreachable) == (1, False, False)
    assert "retry tiers 30 s, 2 min, 10 min, 30 min, 2 h; expiry after 1 h" in out
    warning = next(line for line in out.splitlines() if line.startswith("warning"))
    assert (
        "max_retry_age_s (1 h) is shorter than the sum of retry_tiers_s (2 h 42 min 30 s)"
        in warning
    )
    assert "tier shop.retry_tier4 (2 h) can never re-offer an event" in warning
    assert "retry_tier3" not in warning


def test_check_says_nothing_when_every_tier_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = asyncio.run(
        _check([_dest(tmp_path, "ok", [5.0, 10.0], 3600)], KafkaSettings(), probe=False)
    )
    assert report.warnings == 0
    assert "warning" not in capsys.readouterr().out


def test_the_retrier_warns_at_start(tmp_path: Path) -> None:
    """The retrier logs the same warning once per such destination when it starts."""
    cut = _dest(tmp_path, "cut", [60.0, 600.0], 300)
    fine = _dest(tmp_path, "fine", [60.0, 600.0], 3600)
    with capture_logs() as logs:
        Retrier([cut, fine], KafkaSettings())
    warned = [entry for entry in logs if entry["event"] == "retry_tiers_never_run"]
    assert [entry["dest"] for entry in warned] == ["cut"]
    assert "tier cut.retry_tier1 (10 min) can never re-offer" in warned[0]["detail"]
