"""`connector rewind` against the real broker: time to offset, dry run, refusal while the group is active."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from connector.backfill import positions
from devstack.destination import TestDestination
from hifi.kafka.consuming import open_consumer
from hifi.kafka.reading import committed_offsets
from hifi.kafka.settings import KafkaSettings
from tests.connector.replay_support import (
    BASE_MS,
    STEP_MS,
    at,
    commit_offsets,
    run_command,
    seed,
)
from tests.helpers import make_destination, start_daemon, wait_exit, write_destination

pytestmark = [pytest.mark.integration]

PER_PARTITION = 50


async def _setup(settings: KafkaSettings, catalog_dir: Path, name: str) -> list[TopicPartition]:
    """A destination whose two source partitions hold 50 records stamped BASE_MS + i s."""
    write_destination(catalog_dir, name, url="https://x.test/", source_topics=[f"{name}.src"])
    await seed(settings, f"{name}.src", partitions=2, per_partition=PER_PARTITION)
    return [TopicPartition(f"{name}.src", p) for p in range(2)]


async def _committed(settings: KafkaSettings, name: str) -> dict[int, int | None]:
    return await committed_offsets(settings, f"hifi.connector.{name}", f"{name}.src")


async def _rewind(
    settings: KafkaSettings, catalog_dir: Path, dest: str, to: str, *extra: str
) -> tuple[int, str, str]:
    """`connector rewind --dest DEST --catalog DIR --to TO [EXTRA]` as its own process."""
    return await run_command(
        "rewind",
        "--dest",
        dest,
        "--catalog",
        str(catalog_dir),
        "--to",
        to,
        *extra,
        bootstrap=settings.bootstrap,
    )


async def test_time_to_offset_checks_the_brokers_answer(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """The first record at or after a time is found whatever the broker answers: exact times,
    times between records, before the first and after the last; `searched` is set exactly when
    the broker's offsets_for_times answer was not that record (Tansu answers by write time)."""
    tps = await _setup(kafka_settings, catalog_dir, unique)
    cases = {
        BASE_MS - 60_000: 0,
        BASE_MS + 20 * STEP_MS: 20,
        BASE_MS + 20 * STEP_MS + 1: 21,
        BASE_MS + 37 * STEP_MS - 1: 37,
        BASE_MS + 49 * STEP_MS: 49,
        BASE_MS + 90 * STEP_MS: PER_PARTITION,
    }
    async with positions.reader(kafka_settings) as consumer:
        for time_ms, expected in cases.items():
            answers = await consumer.offsets_for_times(dict.fromkeys(tps, time_ms))
            found = await positions.offsets_at(consumer, tps, time_ms)
            for tp in tps:
                assert found[tp].offset == expected, (time_ms - BASE_MS, tp)
                assert (found[tp].begin, found[tp].end) == (0, PER_PARTITION)
                broker_right = answers[tp] == (None if expected == PER_PARTITION else expected)
                assert found[tp].searched == (not broker_right)


async def test_rewind_moves_the_group_to_the_first_record_at_time(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """A rewind to a time between two records commits, per partition, the offset of the later
    one and prints the committed offset before, the offset after and the records delivered
    again; records stamped far from their write time prove the timestamps are what counts."""
    tps = await _setup(kafka_settings, catalog_dir, unique)
    await commit_offsets(kafka_settings, f"hifi.connector.{unique}", dict.fromkeys(tps, 45))
    code, out, err = await _rewind(kafka_settings, catalog_dir, unique, at(20.5))
    assert code == 0, err
    assert await _committed(kafka_settings, unique) == {0: 21, 1: 21}
    assert "committed before" in out
    rows = [line.split() for line in out.splitlines() if f"{unique}.src" in line]
    assert [[cell for cell in row if cell.isdigit()] for row in rows] == [
        ["0", "45", "21", "24", "0"],
        ["1", "45", "21", "24", "0"],
    ]
    assert "delivered again: 48 records" in out


async def test_rewind_past_the_last_record_goes_to_the_end(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """A time after every record moves each partition to its end offset (a relative time)."""
    await _setup(kafka_settings, catalog_dir, unique)
    code, _, err = await _rewind(kafka_settings, catalog_dir, unique, "0s")
    assert code == 0, err
    assert await _committed(kafka_settings, unique) == {0: PER_PARTITION, 1: PER_PARTITION}


async def test_dry_run_changes_nothing(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """--dry-run prints the same table (committed now, after, delivered again) and commits nothing."""
    tps = await _setup(kafka_settings, catalog_dir, unique)
    await commit_offsets(kafka_settings, f"hifi.connector.{unique}", dict.fromkeys(tps, 45))
    code, out, err = await _rewind(kafka_settings, catalog_dir, unique, at(10), "--dry-run")
    assert code == 0, err
    assert "would move" in out
    assert "committed now" in out
    assert "delivered again: 70 records" in out
    assert await _committed(kafka_settings, unique) == {0: 45, 1: 45}


async def test_refuses_while_a_member_of_the_group_is_active(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """With a consumer of the connector's group running, rewind exits 1 with one line and
    leaves the committed offsets alone."""
    tps = await _setup(kafka_settings, catalog_dir, unique)
    group = f"hifi.connector.{unique}"
    await commit_offsets(kafka_settings, group, dict.fromkeys(tps, 45))
    # Tansu completes a join after half the session timeout: a short one keeps the test quick
    async with open_consumer(
        kafka_settings, group_id=group, session_timeout_ms=2000, heartbeat_interval_ms=300
    ) as member:
        member.subscribe([f"{unique}.src"])
        for _ in range(100):
            if member.assignment():
                break
            await member.getmany(timeout_ms=100, max_records=1)
        assert member.assignment()
        code, out, err = await _rewind(kafka_settings, catalog_dir, unique, at(10))
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"connector rewind: group {group} has 1 active members")
    assert "stop every connector" in err
    assert await _committed(kafka_settings, unique) == {0: 45, 1: 45}


async def test_rewinds_once_the_connector_stopped_cleanly(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """A member of the connector's group that stopped cleanly has left it, also on the
    development broker (Tansu numbers the first generation 0, which aiokafka never leaves, and
    expires no session): the rewind then moves the offsets."""
    tps = await _setup(kafka_settings, catalog_dir, unique)
    group = f"hifi.connector.{unique}"
    async with open_consumer(kafka_settings, group_id=group) as member:
        member.subscribe([f"{unique}.src"])
        for _ in range(100):
            if member.assignment():
                break
            await member.getmany(timeout_ms=100, max_records=1)
        assert member.assignment()
        await member.commit(dict.fromkeys(tps, 45))
    code, out, err = await _rewind(kafka_settings, catalog_dir, unique, at(10))
    assert code == 0, err
    assert "delivered again: 70 records" in out
    assert await _committed(kafka_settings, unique) == {0: 10, 1: 10}


async def test_rewinds_after_the_connector_process_stopped(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """The rehearsal of docs/backfill.md on the development broker: a connector delivers
    everything and stops by itself (--until-idle), then the rewind moves its group."""
    await seed(kafka_settings, f"{unique}.src", partitions=2, per_partition=PER_PARTITION)
    make_destination(catalog_dir, unique, destination.url, f"{unique}.src")
    process = start_daemon(
        "connector",
        [
            "--dest",
            unique,
            "--catalog",
            str(catalog_dir),
            "--metrics-port",
            "0",
            "--until-idle",
            "1",
        ],
        bootstrap=kafka_settings.bootstrap,
        log_path=tmp_path / "connector.log",
    )
    processes.append(process)
    assert await wait_exit(process, 90) == 0
    assert len(set(destination.delivered_ids())) == 2 * PER_PARTITION
    code, out, err = await _rewind(kafka_settings, catalog_dir, unique, at(40))
    assert code == 0, err
    assert "delivered again: 20 records" in out
    assert await _committed(kafka_settings, unique) == {0: 40, 1: 40}


async def test_broker_down_is_one_line(catalog_dir: Path, unique: str) -> None:
    """No broker at the address: one line naming it, exit 1, no traceback."""
    write_destination(catalog_dir, unique, url="https://x.test/", source_topics=["src"])
    code, out, err = await run_command(
        "rewind",
        "--dest",
        unique,
        "--catalog",
        str(catalog_dir),
        "--to",
        "1h",
        bootstrap="127.0.0.1:1",
    )
    assert code == 1
    assert (out, err.count("\n")) == ("", 1), err
    assert err.startswith("connector rewind: kafka 127.0.0.1:1")
    assert "Traceback" not in err


async def test_missing_source_topic_and_bad_time_are_one_line(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """A source topic that does not exist (exit 1) and an unreadable --to (exit 2) are one line."""
    write_destination(catalog_dir, unique, url="https://x.test/", source_topics=[f"{unique}.none"])
    code, _, err = await _rewind(kafka_settings, catalog_dir, unique, "1h")
    assert code == 1
    assert err.count("\n") == 1, err
    assert f"source topic '{unique}.none' of destination '{unique}' does not exist" in err
    code, _, err = await _rewind(kafka_settings, catalog_dir, unique, "yesterday")
    assert code == 2
    assert err.startswith("connector rewind: --to 'yesterday': use an ISO timestamp")
