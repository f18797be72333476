"""Replay marks against the real broker: `dlq replay` records what it replayed in NAME.dlq_replays,
a second replay skips it unless `--again`, `dlq list` shows the mark, bad records are skipped."""

from __future__ import annotations

import getpass
import re
import time
from pathlib import Path

import orjson
import pytest

from config.destination import Destination
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from retrier.replays import ReplayFilter, decode_replay, read_replay_marks
from tests.helpers import make_destination
from tests.retrier.support import (
    create_topics,
    dead_letter,
    id_of,
    produce_all,
    run_retrier_command,
)

pytestmark = [pytest.mark.integration]

ORIGIN = re.compile(r" origin=src/0/(\S+) ")
MARK = re.compile(r" replayed=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ by (\S+) body=")


async def _destination(
    settings: KafkaSettings, catalog_dir: Path, name: str, letters: dict[str, str]
) -> Destination:
    """A destination whose NAME.dlq holds one dead letter per id, with its reason."""
    dest = make_destination(catalog_dir, name, "https://x.test/", "src")
    await create_topics(settings, dest)
    await _add_letters(settings, dest, letters)
    return dest


async def _add_letters(settings: KafkaSettings, dest: Destination, letters: dict[str, str]) -> None:
    now_ms = int(time.time() * 1000)
    await produce_all(
        settings, (dead_letter(dest, i, reason, dead_ms=now_ms) for i, reason in letters.items())
    )


def _lines_by_id(out: str) -> dict[str, str]:
    """The lines of `dlq list` by event id (the letters' origins are src/0/ID)."""
    lines: dict[str, str] = {}
    for line in out.splitlines():
        origin = ORIGIN.search(line)
        assert origin is not None, line
        lines[origin[1]] = line
    return lines


async def test_replay_marks_letters_and_a_second_replay_skips_them(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """A replay writes one record naming its letters by DLQ coordinates, who and when; the next
    replay (and its dry run) skips them, a new letter alone is replayed, `--again` replays all."""
    dest = await _destination(kafka_settings, catalog_dir, unique, dict.fromkeys("abc", "expired"))
    replay = ["dlq", "replay", "--dest", unique, "--catalog", str(catalog_dir)]
    route = f"dead letters from {unique}.dlq into {unique}.retry_out"
    bootstrap = kafka_settings.bootstrap
    before_ms = int(time.time() * 1000)

    code, out, err = await run_retrier_command(
        *replay, "--reason", "expired", "--by", "alice", bootstrap=bootstrap
    )
    assert code == 0, err
    assert out.splitlines() == [
        f"replayed 3 {route}",
        "skipped 0 dead letters replayed before (--again replays them)",
    ]
    (record,) = await read_topic(kafka_settings, dest.dlq_replays_topic)
    first = decode_replay(record.value)
    letters = await read_topic(kafka_settings, dest.dlq_topic)
    assert sorted(first.coordinates()) == sorted((r.partition, r.offset) for r in letters)
    assert (first.by, first.filter, first.parts) == ("alice", ReplayFilter(reason="expired"), 1)
    assert before_ms <= first.at_ms <= int(time.time() * 1000)

    code, out, err = await run_retrier_command(*replay, "--dry-run", bootstrap=bootstrap)
    assert (code, out.splitlines()) == (
        0,
        [
            f"would replay 0 {route} (dry run)",
            "skipped 3 dead letters replayed before (--again replays them)",
        ],
    ), err
    code, out, err = await run_retrier_command(*replay, bootstrap=bootstrap)
    assert (code, out.splitlines()[0]) == (0, f"replayed 0 {route}"), err

    await _add_letters(kafka_settings, dest, {"d": "http_4xx"})
    code, out, err = await run_retrier_command(*replay, bootstrap=bootstrap)
    assert (code, out.splitlines()[0]) == (0, f"replayed 1 {route}"), err
    code, out, err = await run_retrier_command(
        *replay, "--again", "--by", "carol", bootstrap=bootstrap
    )
    assert (code, out.splitlines()[0]) == (0, f"replayed 4 {route}"), err

    reoffered = await read_topic(kafka_settings, dest.retry_out_topic)
    assert sorted(id_of(r) for r in reoffered) == sorted("abcd" * 2)
    replays = [
        decode_replay(r.value) for r in await read_topic(kafka_settings, dest.dlq_replays_topic)
    ]
    assert sorted((r.by, len(list(r.coordinates())), r.filter.again) for r in replays) == sorted(
        [("alice", 3, False), (getpass.getuser(), 1, False), ("carol", 4, True)]
    )


async def test_dlq_list_shows_the_mark_and_counts_replayed_letters(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """`dlq list` puts `replayed=TIME by WHO` on replayed letters only, counts them in the
    footer, and `--replayed` / `--not-replayed` pick either side."""
    await _destination(
        kafka_settings, catalog_dir, unique, {"a": "expired", "b": "http_4xx", "c": "expired"}
    )
    common = ["--dest", unique, "--catalog", str(catalog_dir)]
    bootstrap = kafka_settings.bootstrap
    code, _, err = await run_retrier_command(
        "dlq", "replay", *common, "--reason", "http_4xx", "--by", "alice", bootstrap=bootstrap
    )
    assert code == 0, err

    code, out, err = await run_retrier_command("dlq", "list", *common, bootstrap=bootstrap)
    assert code == 0, err
    lines = _lines_by_id(out)
    assert sorted(lines) == ["a", "b", "c"]
    mark = MARK.search(lines["b"])
    assert mark is not None
    assert mark[1] == "alice"
    assert MARK.search(lines["a"]) is None
    assert MARK.search(lines["c"]) is None
    assert err.strip().splitlines()[-1] == f"3 dead letters in {unique}.dlq, 1 replayed"

    code, out, _ = await run_retrier_command(
        "dlq", "list", *common, "--replayed", bootstrap=bootstrap
    )
    assert (code, sorted(_lines_by_id(out))) == (0, ["b"])
    code, out, _ = await run_retrier_command(
        "dlq", "list", *common, "--not-replayed", bootstrap=bootstrap
    )
    assert (code, sorted(_lines_by_id(out))) == (0, ["a", "c"])


async def test_a_corrupt_replay_record_is_skipped_and_counted(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """Garbage and a newer major version in NAME.dlq_replays are skipped with one warning line;
    the marks of the good record still count in `dlq list` and in the next replay."""
    dest = await _destination(kafka_settings, catalog_dir, unique, dict.fromkeys("ab", "expired"))
    common = ["--dest", unique, "--catalog", str(catalog_dir)]
    bootstrap = kafka_settings.bootstrap
    code, _, err = await run_retrier_command(
        "dlq", "replay", *common, "--by", "alice", bootstrap=bootstrap
    )
    assert code == 0, err
    newer = orjson.dumps({"version": "2.0", "letters": {"0": [0]}})
    await produce_all(
        kafka_settings,
        [(dest.dlq_replays_topic, None, value, []) for value in (b"\x00not json", newer)],
    )

    marks = await read_replay_marks(kafka_settings, dest)
    assert (marks.records, len(marks), len(marks.skipped)) == (1, 2, 2)
    assert sorted(s.why for s in marks.skipped) == ["newer_major", "undecodable"]

    code, out, err = await run_retrier_command("dlq", "list", *common, bootstrap=bootstrap)
    assert code == 0, err
    assert "Traceback" not in err
    assert all(MARK.search(line) for line in out.splitlines())
    warnings = [orjson.loads(line) for line in err.splitlines() if "replay_records_skipped" in line]
    assert len(warnings) == 1
    assert (warnings[0]["level"], warnings[0]["skipped"], warnings[0]["newer_major"]) == (
        "warning",
        2,
        1,
    )
    assert err.strip().splitlines()[-1] == f"2 dead letters in {unique}.dlq, 2 replayed"
    code, out, err = await run_retrier_command(
        "dlq", "replay", *common, "--dry-run", bootstrap=bootstrap
    )
    assert (code, out.splitlines()[1]) == (
        0,
        "skipped 2 dead letters replayed before (--again replays them)",
    ), err
