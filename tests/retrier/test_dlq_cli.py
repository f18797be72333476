"""The DLQ tools as an operator runs them: no HTTP secret needed, a missing DLQ is simply empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from hifi.kafka.settings import KafkaSettings
from tests.helpers import write_destination
from tests.retrier.support import run_retrier_command

pytestmark = [pytest.mark.integration]


def _secretive(catalog_dir: Path, name: str) -> None:
    """A destination whose token comes from a variable the operator's shell does not have."""
    write_destination(
        catalog_dir,
        name,
        url="https://example.invalid/v1",
        source_topics=[f"{name}.src"],
        headers={"Authorization": "Bearer ${HIFI_TEST_UNSET_TOKEN}"},
    )


async def test_dlq_list_needs_no_secret_and_a_missing_dlq_has_no_letters(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """`dlq list` on a destination whose token is not set and whose DLQ was never created says
    0 dead letters and exits 0 (no traceback, no complaint about the token)."""
    _secretive(catalog_dir, unique)
    code, out, err = await run_retrier_command(
        "dlq",
        "list",
        "--dest",
        unique,
        "--catalog",
        str(catalog_dir),
        bootstrap=kafka_settings.bootstrap,
    )
    assert (code, out) == (0, "")
    assert err.strip().splitlines()[-1] == f"0 dead letters in {unique}.dlq, 0 replayed"
    assert "Traceback" not in err


async def test_dlq_replay_needs_no_secret(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """`dlq replay --dry-run` counts without the destination's token."""
    _secretive(catalog_dir, unique)
    code, out, err = await run_retrier_command(
        "dlq",
        "replay",
        "--dest",
        unique,
        "--catalog",
        str(catalog_dir),
        "--dry-run",
        bootstrap=kafka_settings.bootstrap,
    )
    assert code == 0, err
    assert out.startswith(f"would replay 0 dead letters from {unique}.dlq")


async def test_unknown_reason_is_refused_with_the_allowed_list(catalog_dir: Path) -> None:
    """`--reason` accepts exactly the dead-letter reasons, and names them when refusing."""
    code, _, err = await run_retrier_command(
        "dlq", "list", "--dest", "x", "--reason", "gone", bootstrap="127.0.0.1:1"
    )
    assert code == 2
    assert err.count("\n") == 1
    for reason in ("http_4xx", "redirect", "malformed", "too_large", "expired"):
        assert reason in err
