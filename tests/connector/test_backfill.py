"""`connector backfill` against the real broker, as real processes: selection, headers, pacing, checkpoints, kill -9."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from aiokafka import TopicPartition

from config.parsing import parse
from connector.backfill.checkpoint import Checkpoint, Cursor, load, save
from connector.backfill.reoffer import chunk_events
from connector.daemon import Connector
from connector.pacing import Pacer
from devstack.destination import TestDestination
from hifi.errors import ConfigError
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from tests.connector.replay_support import (
    at,
    event_id,
    origins_of,
    run_command,
    seed,
    start_command,
    write_missing,
)
from tests.helpers import make_destination, until, write_destination

pytestmark = [pytest.mark.integration]


async def _setup(
    settings: KafkaSettings, catalog_dir: Path, name: str, *, per_partition: int = 40
) -> str:
    """A destination whose two source partitions hold records stamped BASE_MS + i s; its topic."""
    topic = f"{name}.src"
    write_destination(
        catalog_dir, name, url="https://x.test/", source_topics=[topic], internal_topic_partitions=2
    )
    await seed(settings, topic, partitions=2, per_partition=per_partition)
    return topic


def _args(name: str, catalog_dir: Path, *more: str) -> list[str]:
    return ["backfill", "--dest", name, "--catalog", str(catalog_dir), *more]


async def _retry_out(settings: KafkaSettings, name: str, *, at_least: int = 0) -> list[Any]:
    """NAME.retry_out to its end; with `at_least`, as soon as that many records are there."""
    return await read_topic(settings, f"{name}.retry_out", at_least=at_least)


async def test_backfill_reoffers_the_range_as_fresh_events(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str, tmp_path: Path
) -> None:
    """Every record from FROM (included) to TO (excluded) is re-offered once on NAME.retry_out,
    key and value unchanged, with hifi-origin, attempt 0 and its own headers; the connector's
    intake reads them as retried events with their original ids and origins. Run again, the
    finished backfill says so and re-offers nothing."""
    topic = await _setup(kafka_settings, catalog_dir, unique)
    env = {"HIFI_STATE_DIR": str(tmp_path / "state")}
    args = _args(unique, catalog_dir, "--from", at(10), "--to", at(29.5))
    code, out, err = await run_command(*args, bootstrap=kafka_settings.bootstrap, env=env)
    assert code == 0, err
    assert "scanned 40, selected 40, re-offered 40" in out
    assert f"checkpoint: {tmp_path / 'state' / 'backfill'}" in err
    records = await _retry_out(kafka_settings, unique)
    expected = {(topic, p, i) for p in range(2) for i in range(10, 30)}
    assert sorted(origins_of(records)) == sorted(expected)
    for record in records:
        _, partition, offset = origins_of([record])[0]
        assert record.key == f"key-{partition}-{offset}".encode()
        assert orjson.loads(record.value)["id"] == event_id(partition, offset)
        headers = dict(record.headers)
        assert headers["hifi-attempt"] == b"0"
        assert headers["hifi-dest"] == unique.encode()
        assert headers["trace"] == f"tr-{partition}-{offset}".encode()
        assert "hifi-history" not in headers
    dest = make_destination(catalog_dir, unique, "https://x.test/", topic)
    tp = TopicPartition(dest.retry_out_topic, 0)
    events = parse(dest, tp, records, taken_ms=1).events
    assert len(events) == len(records)
    for event in events:
        _, partition, offset = event.origin_parts
        assert event.retried
        assert event.id == event_id(partition, offset)
        assert event.origin == f"{topic}/{partition}/{offset}"
        assert event.attempt == 0
        assert event.history is None
        assert event.user_headers == [("trace", f"tr-{partition}-{offset}".encode())]

    code, out, err = await run_command(*args, bootstrap=kafka_settings.bootstrap, env=env)
    assert code == 0, err
    assert "already finished (40 re-offered); nothing to do" in out
    assert len(await _retry_out(kafka_settings, unique)) == 40


async def test_only_missing_reoffers_exactly_the_listed_origins(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str, tmp_path: Path
) -> None:
    """With --only-missing DIR only the origins listed for this destination and inside the range
    are re-offered: from its rows, or from files under dest=NAME/ without a dest column; files
    named `_*` or `.*` and other destinations' rows are not read."""
    topic = await _setup(kafka_settings, catalog_dir, unique)
    missing = tmp_path / "missing"
    listed = [(topic, 0, 3), (topic, 0, 12), (topic, 1, 25), (topic, 1, 39)]
    write_missing(missing / "dest=x" / "part-0.parquet", unique, listed[:2])
    write_missing(missing / "part-1.parquet", unique, listed[2:])
    write_missing(missing / "part-2.parquet", "other", [(topic, 0, 20), (topic, 1, 21)])
    write_missing(missing / "_tmp" / "part-3.parquet", unique, [(topic, 0, 22)])
    write_missing(missing / ".part-4.parquet", unique, [(topic, 0, 23)])
    write_missing(missing / f"dest={unique}" / "p.parquet", "", [(topic, 1, 26)], dest_column=False)
    write_missing(missing / "dest=other" / "p.parquet", "", [(topic, 1, 27)], dest_column=False)
    (missing / "_SUCCESS").write_text("")
    code, out, err = await run_command(
        *_args(
            unique, catalog_dir, "--from", at(10), "--to", at(30), "--only-missing", str(missing)
        ),
        bootstrap=kafka_settings.bootstrap,
        env={"HIFI_STATE_DIR": str(tmp_path / "state")},
    )
    assert code == 0, err
    assert "selected 3, re-offered 3" in out
    assert "5 listed for" in out
    records = await _retry_out(kafka_settings, unique)
    assert sorted(origins_of(records)) == [(topic, 0, 12), (topic, 1, 25), (topic, 1, 26)]


@pytest.mark.parametrize("problem", ["absent", "not_parquet", "no_offset", "offset_text"])
async def test_bad_only_missing_input_is_one_line_exit_2(
    catalog_dir: Path, unique: str, tmp_path: Path, problem: str
) -> None:
    """A missing path, a file that is not Parquet, or a file without the `offset` column (or
    with offsets as text) is one line naming the file and the problem, exit 2, before Kafka is
    reached (the broker address here answers nothing)."""
    write_destination(catalog_dir, unique, url="https://x.test/", source_topics=["src"])
    path = tmp_path / "missing"
    path.mkdir()
    bad = path / "part-0.parquet"
    good = path / "part-1.parquet"
    write_missing(good, unique, [("src", 0, 1)])
    if problem == "absent":
        bad = path = tmp_path / "nowhere"
        says = "does not exist"
    elif problem == "not_parquet":
        bad.write_text("dest,topic\n")
        says = "not a readable Parquet file"
    else:
        table = pa.Table.from_pylist([{"dest": unique, "topic": "src", "partition": 0}])
        if problem == "offset_text":
            table = table.append_column("offset", pa.array(["1"]))
            for name in ("minute_ms", "event_time_ms"):
                table = table.append_column(name, pa.array([0], pa.int64()))
            table = table.append_column("event_id", pa.array(["e"]))
        pq.write_table(table, bad)
        says = "column 'offset' is string, not integer" if problem == "offset_text" else "no column"
    code, out, err = await run_command(
        *_args(unique, catalog_dir, "--from", "2h", "--to", "1h", "--only-missing", str(path)),
        bootstrap="127.0.0.1:1",
        env={"HIFI_STATE_DIR": str(tmp_path / "state")},
    )
    assert code == 2
    assert (out, err.count("\n")) == ("", 1), err
    assert err.startswith(f"connector backfill: --only-missing {bad}: "), err
    assert says in err
    assert not (tmp_path / "state").exists()


async def test_broker_down_is_one_line(catalog_dir: Path, unique: str, tmp_path: Path) -> None:
    """No broker at the address: one line naming it, exit 1, no traceback, no checkpoint."""
    write_destination(catalog_dir, unique, url="https://x.test/", source_topics=["src"])
    code, out, err = await run_command(
        *_args(unique, catalog_dir, "--from", "2h", "--to", "1h"),
        bootstrap="127.0.0.1:1",
        env={"HIFI_STATE_DIR": str(tmp_path / "state")},
    )
    assert (code, out) == (1, "")
    last = err.strip().splitlines()[-1]
    assert last.startswith("connector backfill: kafka 127.0.0.1:1: ")
    assert err.count("\n") == 2, err  # the checkpoint's path, then the error
    assert "Traceback" not in err
    assert not (tmp_path / "state").exists()


async def test_dry_run_counts_and_writes_nothing(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str, tmp_path: Path
) -> None:
    """--dry-run prints per partition the offsets in range, scanned and selected, and writes
    neither records nor a checkpoint."""
    topic = await _setup(kafka_settings, catalog_dir, unique)
    missing = tmp_path / "missing.parquet"
    write_missing(missing, unique, [(topic, 1, 15), (topic, 1, 16)])
    state = tmp_path / "state"
    code, out, err = await run_command(
        *_args(unique, catalog_dir, "--from", at(10), "--to", at(20), "--dry-run"),
        bootstrap=kafka_settings.bootstrap,
        env={"HIFI_STATE_DIR": str(state)},
    )
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if topic in line]
    assert [[cell for cell in row if cell != "│"][1:] for row in rows] == [
        ["0", "10-19", "10", "10"],
        ["1", "10-19", "10", "10"],
    ]
    assert "dry run of" in out
    assert "scanned 20, selected 20" in out
    code, out, err = await run_command(
        *_args(unique, catalog_dir, "--from", at(10), "--to", at(20), "--dry-run"),
        "--only-missing",
        str(missing),
        bootstrap=kafka_settings.bootstrap,
        env={"HIFI_STATE_DIR": str(state)},
    )
    assert code == 0, err
    assert "scanned 2, selected 2; 2 listed" in out
    assert not state.exists()
    assert await _retry_out(kafka_settings, unique) == []


async def test_rate_paces_the_reoffers(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str, tmp_path: Path
) -> None:
    """At --rate 40 the 60 re-offers go out in chunks of 10 a quarter second apart: the first
    and last re-offer are at least (60 - 10) / 40 s apart by the producer's own timestamps."""
    await _setup(kafka_settings, catalog_dir, unique, per_partition=30)
    code, _, err = await run_command(
        *_args(unique, catalog_dir, "--from", at(0), "--to", at(30), "--rate", "40"),
        bootstrap=kafka_settings.bootstrap,
        env={"HIFI_STATE_DIR": str(tmp_path / "state")},
    )
    assert code == 0, err
    stamps = sorted(r.timestamp for r in await _retry_out(kafka_settings, unique))
    assert len(stamps) == 60
    assert stamps[-1] - stamps[0] >= (60 - chunk_events(40)) / 40 * 1000 - 50


def test_pacer_is_a_token_bucket() -> None:
    """A burst goes out at once, then each event waits 1/rate; a stop returns the tokens."""
    now_s = [100.0]
    pacer = Pacer(10.0, burst=5, clock_s=lambda: now_s[0])
    assert pacer.reserve(5) == 0.0
    assert pacer.reserve(5) == pytest.approx(0.5)
    now_s[0] += 0.5
    assert pacer.reserve(1) == pytest.approx(0.1)
    pacer.refund(1)
    now_s[0] += 10.0  # idle: the bucket refills to its burst, no further
    assert pacer.reserve(5) == 0.0
    assert pacer.reserve(1) == pytest.approx(0.1)
    assert Pacer(None, burst=500).reserve(10_000) == 0.0
    assert (chunk_events(None), chunk_events(2), chunk_events(40), chunk_events(1e6)) == (
        500,
        1,
        10,
        500,
    )


def test_checkpoint_is_replaced_whole(tmp_path: Path) -> None:
    """A checkpoint round-trips, leaves no temporary file, and a damaged one is refused."""
    path = tmp_path / "deep" / "cp.json"
    checkpoint = Checkpoint(
        "k", "d", 1, 2, "all", "all", None, 3, cursors=[Cursor("t", 0, 0, 9, 4)]
    )
    save(path, checkpoint)
    assert load(path) == checkpoint
    assert [p.name for p in path.parent.iterdir()] == ["cp.json"]
    assert load(tmp_path / "none.json") is None
    path.write_text(json.dumps({"format": 1, "key": "k"}))
    with pytest.raises(ConfigError, match="not a backfill checkpoint"):
        load(path)


async def test_kill_9_resumes_from_the_checkpoint(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str, tmp_path: Path
) -> None:
    """A backfill killed with SIGKILL and started again with the same arguments re-offers every
    selected event at least once, and again at most what it wrote after its last checkpoint:
    one checkpoint interval at the rate, plus a chunk."""
    topic = await _setup(kafka_settings, catalog_dir, unique, per_partition=150)
    rate, every_s = 100, 1.0
    cp = tmp_path / "backfill.json"
    args = _args(unique, catalog_dir, "--from", at(0), "--to", at(150), "--rate", str(rate))
    args += ["--checkpoint", str(cp), "--checkpoint-every", str(every_s)]
    first = await start_command(*args, bootstrap=kafka_settings.bootstrap)
    try:
        assert await until(lambda: _reoffered(cp) >= 80, timeout_s=30)
        # killed once it wrote records its checkpoint does not count yet
        await _retry_out(kafka_settings, unique, at_least=_reoffered(cp) + 1)
    finally:
        first.send_signal(signal.SIGKILL)
        await asyncio.wait_for(first.wait(), 30)
    saved = _reoffered(cp)
    written_first = len(await _retry_out(kafka_settings, unique))
    assert written_first >= saved
    code, out, err = await run_command(*args, bootstrap=kafka_settings.bootstrap)
    assert code == 0, err
    assert "resuming from the checkpoint" in err
    assert f"re-offered 300 (this run: {300 - saved})" in out
    records = await _retry_out(kafka_settings, unique)
    assert {(topic, p, i) for p in range(2) for i in range(150)} == set(origins_of(records))
    again = len(records) - 300
    assert again == written_first - saved
    assert again <= rate * every_s + 2 * chunk_events(rate)


async def test_sigterm_checkpoints_what_was_acknowledged(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str, tmp_path: Path
) -> None:
    """SIGTERM stops the backfill after the write in flight: it exits 1 with one line saying how
    to resume, and its checkpoint counts exactly the records on NAME.retry_out."""
    await _setup(kafka_settings, catalog_dir, unique, per_partition=100)
    cp = tmp_path / "backfill.json"
    # 200 records at 4/s: a backfill of 50 s, so the SIGTERM comes mid-way however slow the
    # machine is (at 10/s a run under four test workers once finished before it)
    args = _args(unique, catalog_dir, "--from", at(0), "--to", at(100), "--rate", "4")
    process = await start_command(
        *args, "--checkpoint", str(cp), bootstrap=kafka_settings.bootstrap
    )
    assert await until(cp.exists, timeout_s=30)
    await _retry_out(kafka_settings, unique, at_least=1)  # some re-offers
    assert process.returncode is None, "the backfill ended before the SIGTERM"
    process.send_signal(signal.SIGTERM)
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 1
    last = stderr.decode().strip().splitlines()[-1]
    assert last.startswith("connector backfill: stopped by SIGTERM after ")
    assert last.endswith(f"progress is saved in {cp}: run the same command again to resume")
    written = len(await _retry_out(kafka_settings, unique))
    assert 0 < written < 200
    assert _reoffered(cp) == written


async def test_the_connector_delivers_a_backfill_with_the_original_ids(
    kafka_settings: KafkaSettings,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    destination: TestDestination,
) -> None:
    """Rewound to the end of its topics, a connector delivers exactly the events a backfill of
    the missing ones re-offered, with their original ids."""
    topic = f"{unique}.src"
    dest = make_destination(catalog_dir, unique, destination.url, topic)
    await seed(kafka_settings, topic, partitions=2, per_partition=20)
    code, _, err = await run_command(
        "rewind",
        "--dest",
        unique,
        "--catalog",
        str(catalog_dir),
        "--to",
        "0s",
        bootstrap=kafka_settings.bootstrap,
    )
    assert code == 0, err
    missing = tmp_path / "missing.parquet"
    write_missing(missing, unique, [(topic, 0, 4), (topic, 1, 7), (topic, 1, 8)])
    code, _, err = await run_command(
        *_args(
            unique, catalog_dir, "--from", at(0), "--to", at(20), "--only-missing", str(missing)
        ),
        bootstrap=kafka_settings.bootstrap,
        env={"HIFI_STATE_DIR": str(tmp_path / "state")},
    )
    assert code == 0, err
    await asyncio.wait_for(Connector(dest, kafka_settings, until_idle_s=1.0).run(), 60)
    assert sorted(destination.delivered_ids()) == ["p0-4", "p1-7", "p1-8"]


def _reoffered(path: Path) -> int:
    """Events re-offered according to the checkpoint at `path` (0 while there is none)."""
    try:
        return sum(c["reoffered"] for c in json.loads(path.read_bytes())["cursors"])
    except (FileNotFoundError, json.JSONDecodeError):
        return 0
