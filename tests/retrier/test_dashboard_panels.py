"""The dashboard's failures, hand-offs and DLQ panels say what they mean: one outage is one
failure group, the hand-offs shown are the last few minutes' with their age, and dead letters
show as waiting and replayed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiokafka.structs import ConsumerRecord

from retrier.dashboard.api import _dlq_summary
from retrier.dlq.index import DeadLetterIndex
from retrier.status import RECENT_FAILURES_WINDOW_S, RecentFailures, document
from retrier.tiers import RetryState

TOPIC = "shop.dlq"
T0 = 1_790_000_000_000
UNAUTHORIZED = "HTTP 401 Unauthorized: token expired"


def _letter(offset: int, error: str, *, status: str = "401") -> ConsumerRecord[bytes, bytes]:
    """A record of NAME.dlq as the connector writes it, dead at `T0 + offset`."""
    headers = [
        ("hifi-reason", b"http_4xx"),
        ("hifi-dest", b"shop"),
        ("hifi-error", error.encode()),
        ("hifi-status", status.encode()),
        ("hifi-origin", f"shop.src/0/{offset}".encode()),
        ("hifi-event-id", f"e-{offset}".encode()),
    ]
    value = orjson.dumps({"id": f"e-{offset}"})
    return ConsumerRecord(
        TOPIC, 0, offset, T0 + offset, 0, None, value, None, 0, len(value), headers
    )


@pytest.fixture
def index(tmp_path: Path) -> Iterator[DeadLetterIndex]:
    with DeadLetterIndex(TOPIC, spill_dir=tmp_path / "spill") as opened:
        yield opened


def test_one_401_outage_is_one_failure_group(index: DeadLetterIndex) -> None:
    """Letters of one outage, alone or in groups dead-lettered whole once the bisection budget
    ran out, are one row: the group's size is not part of the failure."""
    errors = [
        UNAUTHORIZED,
        f"{UNAUTHORIZED} (in a rejected group of 2; bisection budget spent)",
        f"{UNAUTHORIZED} (in a rejected group of 4; bisection budget spent)",
        f"{UNAUTHORIZED} (in a rejected group of 32; bisection budget spent)",
    ]
    index.add(_letter(offset, errors[offset % 4]) for offset in range(40))
    index.add([_letter(40, "HTTP 400 Bad Request: no id", status="400")])
    summary = _dlq_summary(index, T0 + 60_000, quote_errors=True)
    assert summary["failure_groups"] == [
        {"status": "401", "error": UNAUTHORIZED, "count": 40},
        {"status": "400", "error": "HTTP 400 Bad Request: no id", "count": 1},
    ]


def test_dead_letters_show_as_waiting_and_replayed(index: DeadLetterIndex) -> None:
    """Once every letter was replayed none is waiting, though the DLQ still holds them all."""
    index.add(_letter(offset, UNAUTHORIZED) for offset in range(100))
    index.mark_replayed([(0, offset) for offset in range(60)], at_ms=T0 + 1000, by="ops")
    summary = _dlq_summary(index, T0 + 60_000, quote_errors=True)
    assert (summary["size"], summary["waiting"], summary["replayed"]) == (100, 40, 60)
    assert summary["by_reason"] == {"http_4xx": 40}
    index.mark_replayed([(0, offset) for offset in range(60, 100)], at_ms=T0 + 2000, by="ops")
    summary = _dlq_summary(index, T0 + 60_000, quote_errors=True)
    assert (summary["size"], summary["waiting"], summary["replayed"]) == (100, 0, 100)
    assert summary["by_reason"] == {}


def test_hand_offs_shown_are_the_last_few_minutes_with_their_age() -> None:
    """A hand-off seven minutes old is not "just now": only those of the last five minutes are
    shown, newest first, each with its age; the window is said."""
    recent = RecentFailures()
    now_ms = T0 + 3_600_000
    for age_s in (420, 299, 30):
        handoff_ms = now_ms - age_s * 1000
        state = RetryState(attempt=1, first_failure_ms=handoff_ms, handoff_ms=handoff_ms)
        recent.note("shop", {"hifi-status": b"503", "hifi-error": b"HTTP 503"}, state)
    report = document(["shop"], backlog=None, heads=[], recent=recent, now_ms=now_ms)
    shop = report["destinations"]["shop"]
    assert shop["recent_failures_window_s"] == RECENT_FAILURES_WINDOW_S == 300
    assert [entry["age_s"] for entry in shop["recent_failures"]] == [30.0, 299.0]
    assert all(entry["status"] == "503" for entry in shop["recent_failures"])
