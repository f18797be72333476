"""The member writing a destination's merged minutes is killed -9: the next owner of the lead share
carries on from its snapshot, writing no final minute twice nor differently.

Two auditor processes of one group (the lead share is the destination's first partition) and a
single auditor in this process. A gap on another partition makes an older minute final with
missing events (the loss alarm); once the lead's member wrote it, that member is killed -9 and
the minute of the run's events becomes final under the member that takes the lead share.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import orjson
import pyarrow.parquet as pq
import pytest
from aiokafka import TopicPartition

from auditor.archive.read import read_minutes
from auditor.daemon import Auditor
from auditor.shares import snapshot_name
from auditor.tables import iso_minute, report_row
from connector import Connector
from devstack.destination import TestDestination
from devstack.kafka_tools import move_committed, produce_events
from devstack.ports import free_port
from hifi import kafka
from hifi.audit import AUDIT_TOPIC_ENV_VAR
from hifi.kafka.settings import ENV_KEYS, KafkaSettings
from tests.auditor.group import PARTITIONS, Scene, scene
from tests.auditor.story import AuditorProcess
from tests.auditor.support import COUNTS, by_minute, now_ms, rows_of, running, settled, tables
from tests.helpers import running as delivering

pytestmark = [pytest.mark.integration]

Row = dict[str, Any]

EARLY, GAP = 60, 5
SESSION_TIMEOUT_S = 6  # how long the group takes to notice the killed member (the least allowed)
_WAIT_S = 60.0


async def test_the_lead_members_successor_writes_the_merged_minutes_once(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    tmp_path: Path,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lead share's member wrote a final minute with missing events (its row, the loss
    alarm, the missing ids) and is killed -9. The other member takes the lead share and writes
    nothing of that minute again until its missing events are delivered late: then one new
    row, the figures the single auditor's, the alarm raised once."""
    group = await scene(kafka_settings, catalog_dir, tmp_path, unique, destination.url, 1.0)
    name, minute = group.dest.name, _iso(group)
    monkeypatch.setenv(AUDIT_TOPIC_ENV_VAR, group.audit_topic)  # for the auditor processes
    monkeypatch.setenv(ENV_KEYS["session_timeout_s"], str(SESSION_TIMEOUT_S))
    single = group.single()
    async with httpx.AsyncClient(timeout=5.0) as client, running(single):
        with _members(group, catalog_dir, kafka_settings) as members:
            for member in members:
                member.start()  # they start while the events are written
            await _gap(kafka_settings, group)
            await produce_events(kafka_settings, name, group.events("early", EARLY))
            async with delivering(_connector(group)):
                owners = await _split(client, members)
                lead = next(m for m, shares in owners.items() if f"{name}/0" in shares)
                survivor = next(m for m in members if m is not lead)
                await _older_written(lead, group)
                assert await _until_async(lambda: _lead_saved(group)), (
                    "the lead's snapshot never took the final minute in"
                )
            lead.kill9()
            killed_ms = now_ms()
            # the gap's events delivered late: the partition read again from its start
            await move_committed(kafka_settings, group.dest.connector_group, name, 1, 0)
            async with delivering(_connector(group)):
                await destination.wait_for_ids({f"gap-{i}" for i in range(GAP)}, _WAIT_S)
                redelivered_ms = now_ms()
                found = await _table(survivor, group, lambda row: row["missing"] == 0)
                status = await _status(client, survivor)
        reference = await settled(single, name, EARLY + GAP, timeout_s=_WAIT_S)
        assert await _until_async(lambda: _single_delivered(single, name)), "the single auditor"
        reference = rows_of(single, name)
        logs = sorted(group.work.glob("member-*/auditor-*.log"))

    assert status is not None
    assert f"{name}/0" in status["owned_shares"]
    assert by_minute(found, COUNTS) == by_minute(reference, COUNTS)
    row = by_minute(reference, COUNTS)[minute]
    assert (row["entered"], row["delivered"], row["missing"]) == (EARLY + GAP, EARLY + GAP, 0)
    archived = _archived_rows(group.work / "archive")
    assert sorted(archived) == [group.minute_ms]
    after = [r for r in archived[group.minute_ms] if r["written_ms"] > killed_ms]
    assert [r["written_ms"] > redelivered_ms - 1_000 for r in after] == [True]
    assert (after[0]["missing"], after[0]["delivered"]) == (0, EARLY + GAP)
    alarms = [a for a in _alarms(logs) if a["minute"] == minute]
    assert len(alarms) == 1, alarms


def _connector(group: Scene) -> Connector:
    return Connector(group.dest, group.settings, audit_topic=group.audit_topic)


async def _single_delivered(single: Auditor, dest: str) -> bool:
    delivered: int = sum(r["delivered"] for r in rows_of(single, dest))
    return delivered == EARLY + GAP


def _iso(group: Scene) -> str:
    return iso_minute(group.minute_ms)


async def _gap(settings: KafkaSettings, group: Scene) -> None:
    """`GAP` events of the scene's minute on partition 1 that the connector does not read: its
    committed offset is moved past them before it starts."""
    name = group.dest.name
    at_ms = group.minute_ms + 1_000
    records: list[Any] = [
        (name, None, orjson.dumps({"id": f"gap-{i}", "event_time": at_ms}), []) for i in range(GAP)
    ]
    async with kafka.producer(settings) as producer:
        await producer.send_all(records, partition=1)
    await move_committed(settings, group.dest.connector_group, name, 1, GAP)


@contextlib.contextmanager
def _members(
    group: Scene, catalog_dir: Path, settings: KafkaSettings
) -> Iterator[list[AuditorProcess]]:
    """Two auditor processes of the group, stopped on the way out."""
    args = [
        *("--dest", group.dest.name, "--catalog", str(catalog_dir)),
        *("--archive", str(group.work / "archive"), "--archive-roll-s", "0.5"),
        *("--group", group.group_id),
    ]
    members = []
    for i in range(2):
        work = group.work / f"member-{i}"
        work.mkdir()
        members.append(
            AuditorProcess(args, bootstrap=settings.bootstrap, work=work, port=free_port())
        )
    try:
        yield members
    finally:
        for member in members:
            member.stop()


async def _status(client: httpx.AsyncClient, member: AuditorProcess) -> dict[str, Any] | None:
    try:
        response = await client.get(f"{member.url}/status")
    except httpx.HTTPError:
        return None
    found: dict[str, Any] | None = response.json() if response.status_code == 200 else None
    return found


async def _split(
    client: httpx.AsyncClient, members: list[AuditorProcess]
) -> dict[AuditorProcess, list[str]]:
    """Wait until the members share the destination's partitions; each one's shares."""
    owners: dict[AuditorProcess, list[str]] = {}

    async def split() -> bool:
        owners.clear()
        for member in members:
            status = await _status(client, member)
            if status is None or status["rebalancing"] or not status["owned_shares"]:
                return False
            owners[member] = status["owned_shares"]
        return len({s for shares in owners.values() for s in shares}) == PARTITIONS

    assert await _until_async(split), "the members never shared the partitions"
    return owners


async def _rows(member: AuditorProcess, group: Scene) -> list[dict[str, Any]]:
    return await tables(member.url, group.dest.name) or []


async def _older_written(member: AuditorProcess, group: Scene) -> None:
    """Wait until the lead's member shows the minute final, its events delivered but the gap's,
    those named."""
    assert await _until_async(lambda: _has(member, group, _complete)), (
        "the minute never became final with its missing ids"
    )


async def _has(member: AuditorProcess, group: Scene, wanted: Callable[[Row], bool]) -> bool:
    rows = [r for r in await _rows(member, group) if r["minute"] == _iso(group)]
    return bool(rows) and wanted(rows[0])


def _complete(row: Row) -> bool:
    """Whether the minute's row is final with every event delivered but the gap's, named."""
    return bool(row["final"]) and (row["delivered"], len(row["missing_ids"])) == (EARLY, GAP)


async def _lead_saved(group: Scene) -> bool:
    """Whether the archive holds the minute's complete row and the lead share's snapshot of the
    same roll or a later one (its successor starts past that row)."""
    archive, minute_ms = group.work / "archive", group.minute_ms
    rows = read_minutes(archive, group.dest.name, from_ms=minute_ms, to_ms=minute_ms + 1)
    if not rows or not _complete(report_row(rows[0])):
        return False
    lead = TopicPartition(group.dest.name, 0)
    path = archive / "_state" / f"{snapshot_name(group.group_id, lead)}.snapshot"
    try:
        state = msgspec.msgpack.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError):
        return False
    before_ms = state["lead"].get(group.dest.name, {}).get("before_ms") or 0
    return int(state["written_ms"]) >= int(rows[0]["written_ms"]) and int(before_ms) > minute_ms


async def _table(member: AuditorProcess, group: Scene, wanted: Callable[[Row], bool]) -> list[Row]:
    """Wait until `member`'s row of the minute is final and `wanted`; its table then."""
    assert await _until_async(lambda: _has(member, group, lambda r: r["final"] and wanted(r))), (
        "the survivor's minute never became what was wanted"
    )
    return await _rows(member, group)


async def _until_async(condition: Any, timeout_s: float = _WAIT_S) -> bool:
    """Await `condition()` until it is true, or `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.5)
    return True


def _archived_rows(root: Path) -> dict[int, list[dict[str, Any]]]:
    """Every `minutes` row in the archive (not only each minute's latest), by minute."""
    found: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(root.glob("minutes/**/*.parquet")):
        for row in pq.read_table(path).to_pylist():
            found[row["minute_ms"]].append(row)
    return dict(found)


def _alarms(logs: list[Path]) -> list[dict[str, Any]]:
    """The loss alarms the member processes logged."""
    found = []
    for path in logs:
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("event") == "loss_alarm":
                    found.append(entry)
    return found
