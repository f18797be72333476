"""Two minutes of faults for the auditor to account for, run once and shared by the tests that read them.

Four destinations feed one audit topic; a connector per destination, a retrier and an
uninterrupted auditor run in this process, a second auditor runs as a child process.

Minute A:
- `lag`: every request is answered after 2 s;
- `expiry`: answers 503 for good, with one retry tier: its events expire in the retrier;
- `odd`: good events among events without an id and events stamped 3 years away, and the
  audit topic gets records that are not usable facts (one of them claiming the odd events
  dead-lettered, in a newer major format);
- `outage`: its last 10 s the destination answers 503, until A is final (settle_s 1 s);
- the auditor process is killed with SIGKILL (after a roll); it is restarted only once A
  should have settled and the outage's events were delivered (late).

Minute B:
- `lag` answers at once: a first batch, then a second one after the auditor process is
  killed again; it is restarted only once B should have settled.

Waiting for minutes to end is what these tests cost, so they share this run.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
import orjson
import pytest

from auditor.archive.read import read_minutes
from auditor.daemon import Auditor
from auditor.defaults import GROUP_ID
from connector.daemon import Connector
from devstack.destination import Reply, TestDestination
from devstack.kafka_tools import produce, produce_events
from devstack.ports import free_port
from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.tables import iso_minute
from hifi.audit import AUDIT_TOPIC_ENV_VAR, HDR_FORMAT, Fact, Slice, encode_fact
from hifi.kafka import admin as kafka_admin
from hifi.kafka.producing import open_producer
from hifi.kafka.settings import KafkaSettings
from hifi.vocabulary import Outcome, Reason
from retrier.daemon import Retrier
from tests.auditor.support import (
    audited_destination,
    minute_start,
    now_ms,
    rows_of,
    sleep_until,
    tables,
)
from tests.helpers import events, start_daemon

OUTAGE_EVENTS = 200
EXPIRING_EVENTS = 20
SLOW_EVENTS = 100
FAST_BATCH = 100
GOOD_ODD, NO_ID, PAST, FUTURE = 50, 5, 3, 4
YEARS_3_MS = 3 * 365 * 86_400_000
# Audit records that are not usable facts, by the reason the auditor must refuse them.
REFUSALS = {"undecodable": 4, "newer_major": 1, "unknown_outcome": 1, "inconsistent": 1}
_LATEST_A_START_S = 35  # a later start of the run waits for the next minute
_WAIT_S = 90.0


@dataclass
class Story:
    """What the run did and saw; the auditors and the destinations keep running for the tests."""

    outage: str
    lag: str
    odd: str
    expiry: str
    live: Auditor
    live_task: asyncio.Task[None]
    live_url: str
    live_archive: Path
    process: AuditorProcess
    minute_a: str
    minute_b: str
    sinks: dict[str, TestDestination]
    outage_ids: set[str] = field(default_factory=set)
    outage_row_when_final: dict[str, Any] = field(default_factory=dict)
    process_rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    refused_before: dict[str, float] = field(default_factory=dict)
    process_archive: Path | None = None  # the archive of the auditor process (killed twice)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.outage, self.lag, self.odd, self.expiry)


class AuditorProcess:
    """`python -m auditor` on a fixed archive, port and (default) group; killed with SIGKILL on demand."""

    def __init__(self, args: list[str], *, bootstrap: str, work: Path, port: int) -> None:
        self._args = [*args, "--metrics-port", str(port)]
        self._bootstrap = bootstrap
        self._work = work
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.started_s = 0.0  # wall clock of the last start

    def start(self) -> None:
        self.starts += 1
        self.started_s = time.time()
        log_path = self._work / f"auditor-{self.starts}.log"
        self.process = start_daemon(
            "auditor", self._args, bootstrap=self._bootstrap, log_path=log_path
        )

    def kill9(self) -> None:
        assert self.process is not None, "the auditor never started"
        assert self.process.poll() is None, "the auditor exited by itself"
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


async def until(condition: Callable[[], Any], what: str, timeout_s: float = _WAIT_S) -> None:
    """Poll an async or plain condition every 0.25 s; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.25)


def _final(rows: list[dict[str, Any]] | None, minute: str) -> dict[str, Any] | None:
    row = next((r for r in rows or () if r["minute"] == minute), None)
    return row if row is not None and row["final"] else None


async def _produce_with_origins(
    settings: KafkaSettings, topic: str, values: list[bytes]
) -> list[tuple[int, int]]:
    async with open_producer(settings) as producer:
        metadata = await producer.send_all([(topic, None, value, []) for value in values])
    return [(m.partition, m.offset) for m in metadata]


async def _odd_input(settings: KafkaSettings, story: Story, audit_topic: str) -> None:
    """The odd destination's events, and audit records that are not usable facts."""
    now = now_ms()
    values = [orjson.dumps({"id": f"good-{i}", "event_time": now}) for i in range(GOOD_ODD)]
    values += [orjson.dumps({"event_time": now, "seq": i}) for i in range(NO_ID)]
    values += [
        orjson.dumps({"id": f"past-{i}", "event_time": now - YEARS_3_MS}) for i in range(PAST)
    ]
    values += [
        orjson.dumps({"id": f"future-{i}", "event_time": now + YEARS_3_MS}) for i in range(FUTURE)
    ]
    origins = await _produce_with_origins(settings, story.odd, values)
    slices = [
        Slice(story.odd, p, [o], [None], [now], [0]) for p, o in origins
    ]  # every odd event, claimed dead-lettered by facts the auditor must refuse

    def fact(major: int, outcome: str, parts: list[Slice]) -> bytes:
        return encode_fact(
            Fact(
                major,
                0,
                uuid.uuid4().hex,
                story.odd,
                "forger@test:1",
                outcome,
                str(Reason.HTTP_4XX),
                400,
                now,
                parts,
            )
        )

    garbage = [b"", b"\xff\x00 not msgpack", msgspec.msgpack.encode({"not": "a fact"}), b'{"a":1}']
    await produce(settings, audit_topic, garbage)
    newer = fact(2, str(Outcome.DEAD_LETTERED), slices)
    await produce(settings, audit_topic, [newer], headers=[(HDR_FORMAT, b"2.0")])
    unknown = fact(1, "vanished", slices)
    uneven = fact(1, str(Outcome.DEAD_LETTERED), [Slice(story.odd, 0, [0, 1], [None], [now], [0])])
    await produce(settings, audit_topic, [unknown, uneven], headers=[(HDR_FORMAT, b"1.0")])


def _snapshot_after(archive: Path, since_s: float) -> bool:
    """Whether the process wrote a share's snapshot (and so finished a roll) after `since_s`."""
    paths = (archive / "_state").glob(f"auditor-{GROUP_ID}--*.snapshot")
    return any(path.stat().st_mtime > since_s for path in paths)


async def _minute_a(
    settings: KafkaSettings, story: Story, audit_topic: str, proc_archive: Path
) -> int:
    """Everything of minute A; returns when B starts."""
    started = now_ms()
    a = minute_start(started)
    if started - a > _LATEST_A_START_S * 1000:
        a += MINUTE_MS
        await sleep_until(a + 100)
    b = a + MINUTE_MS
    story.minute_a, story.minute_b = iso_minute(a), iso_minute(b)
    story.sinks[story.lag].set_faults(1.0, [Reply(200, delay_s=2.0)])
    await produce_events(settings, story.lag, events(SLOW_EVENTS, prefix="slow"))
    await produce_events(settings, story.expiry, events(EXPIRING_EVENTS, prefix="doomed"))
    await _odd_input(settings, story, audit_topic)
    await sleep_until(b - 10_000)
    story.sinks[story.outage].set_faults(1.0, [Reply(503)])
    outage = events(OUTAGE_EVENTS, prefix="down")
    story.outage_ids = {e["id"] for e in outage}
    await produce_events(settings, story.outage, outage)
    assert now_ms() < b - 5_000, "the outage events were meant for minute A"
    await until(lambda: _snapshot_after(proc_archive, 0.0), "a roll of the process")
    story.process.kill9()  # A is not final: its buckets are in the snapshot and in Kafka
    return b


async def _minute_b(settings: KafkaSettings, story: Story, b: int, proc_archive: Path) -> None:
    await sleep_until(b)
    story.sinks[story.lag].reset_script()
    await produce_events(settings, story.lag, events(FAST_BATCH, prefix="fast1"))

    def outage_a() -> dict[str, Any] | None:
        return _final(rows_of(story.live, story.outage), story.minute_a)

    await until(outage_a, "minute A final while the destination is down")
    story.outage_row_when_final = outage_a() or {}
    story.sinks[story.outage].reset_script()
    await sleep_until(b + 8_000)  # A should have settled, and its events been delivered, meanwhile
    story.process.start()
    restarted_s = story.process.started_s
    await until(lambda: _snapshot_after(proc_archive, restarted_s), "a roll after the restart")
    story.process.kill9()  # B is not final; it has events in the snapshot
    await sleep_until(b + 25_000)
    await produce_events(settings, story.lag, events(FAST_BATCH, prefix="fast2"))
    assert now_ms() < b + 50_000, "the second batch was meant for minute B"
    await sleep_until(b + MINUTE_MS + 4_000)  # B should have settled meanwhile
    story.process.start()


async def _caught_up(story: Story, url: str, rows: dict[str, list[dict[str, Any]]]) -> bool:
    """Whether the auditor at `url` has A (and B) final and every outage event delivered."""
    for dest in story.names:
        found = await tables(url, dest)
        if found is None or not _final(found, story.minute_a):
            return False
        rows[dest] = found
    outage_a = _final(rows[story.outage], story.minute_a)
    return (
        outage_a is not None
        and outage_a["delivered"] == OUTAGE_EVENTS
        and _final(rows[story.lag], story.minute_b) is not None
    )


def _archived(story: Story) -> bool:
    found = read_minutes(story.live_archive, story.lag, from_ms=None, to_ms=None)
    return sum(1 for row in found if row["final"]) >= 2


async def play(settings: KafkaSettings, story: Story, audit_topic: str, proc_archive: Path) -> None:
    """Minutes A and B, then wait for both auditors to account for everything."""
    # Odd event times are judged against the minutes already final: wait until there are some.
    await until(lambda: _settling(story.live_url, story.odd), "the live auditor settling")
    await until(lambda: _settling(story.process.url, story.odd), "the auditor process settling")
    b = await _minute_a(settings, story, audit_topic, proc_archive)
    await _minute_b(settings, story, b, proc_archive)
    delivered = story.sinks[story.outage]
    assert await delivered.wait_for_ids(story.outage_ids, _WAIT_S), "outage events undelivered"
    live: dict[str, list[dict[str, Any]]] = {}
    await until(lambda: _caught_up(story, story.live_url, live), "the live auditor's tables")
    await until(
        lambda: _caught_up(story, story.process.url, story.process_rows),
        "the restarted process's tables",
    )
    await until(lambda: _archived(story), "the final rows in the archive")


async def _settling(url: str, dest: str) -> bool:
    """Whether the auditor at `url` has started settling minutes (its progress clock runs)."""
    try:
        async with httpx.AsyncClient(timeout=2.0) as client:
            response = await client.get(f"{url}/status")
    except httpx.HTTPError:
        return False
    if response.status_code != 200:
        return False
    return response.json()["dests"][dest]["final_before_ms"] is not None


@contextlib.asynccontextmanager
async def staged(
    settings: KafkaSettings, work: Path, refused_before: Mapping[str, float]
) -> AsyncIterator[Story]:
    """The destinations, daemons and auditors of the story, running; stopped on exit."""
    unique = "t" + uuid.uuid4().hex[:10]
    names = [f"{unique}-{name}" for name in ("outage", "lag", "odd", "expiry")]
    outage, lag, odd, expiry = names
    audit_topic = f"{unique}.audit"
    catalog = work / "catalog"
    catalog.mkdir()
    async with contextlib.AsyncExitStack() as stack:
        sinks = {name: await stack.enter_async_context(TestDestination()) for name in names}
        sinks[expiry].set_faults(1.0, [Reply(503)])  # down for good: its events expire
        await kafka_admin.ensure_topics(settings, names, partitions=2)
        dests = [
            audited_destination(
                catalog, outage, sinks[outage].url, outage, retry_tiers_s=[3.0] * 10
            ),
            audited_destination(catalog, lag, sinks[lag].url, lag, lag_sla_s=1.0),
            audited_destination(catalog, odd, sinks[odd].url, odd),
            audited_destination(catalog, expiry, sinks[expiry].url, expiry, retry_tiers_s=[2.0]),
        ]
        daemons: list[Connector | Retrier | Auditor] = [
            Connector(dest, settings, audit_topic=audit_topic) for dest in dests
        ]
        env = stack.enter_context(pytest.MonkeyPatch.context())
        env.setenv(AUDIT_TOPIC_ENV_VAR, audit_topic)  # for the retrier and the auditor process
        retried = [dests[0], dests[3]]
        daemons.append(Retrier(retried, settings, group_id=f"{unique}.retrier"))
        live = Auditor(
            dests,
            settings,
            archive_dir=work / "live",
            roll_s=0.5,
            metrics_port=0,
            topic=audit_topic,
            group_id=f"{unique}.live",
        )
        daemons.append(live)
        tasks = [asyncio.create_task(daemon.run()) for daemon in daemons]
        stack.push_async_callback(_stop, daemons, tasks)
        proc_archive = work / "process"
        args = [
            *(a for name in names for a in ("--dest", name)),
            "--catalog",
            str(catalog),
            "--archive",
            str(proc_archive),
            "--archive-roll-s",
            "0.5",
        ]
        process = AuditorProcess(args, bootstrap=settings.bootstrap, work=work, port=free_port())
        stack.callback(process.stop)
        process.start()
        await until(lambda: live.ops is not None and live.ops.port != 0, "the live ops port")
        assert live.ops is not None
        story = Story(
            outage,
            lag,
            odd,
            expiry,
            live,
            tasks[-1],
            f"http://127.0.0.1:{live.ops.port}",
            work / "live",
            process,
            "",
            "",
            sinks,
            refused_before=dict(refused_before),
            process_archive=proc_archive,
        )
        await play(settings, story, audit_topic, proc_archive)
        yield story


async def _stop(
    daemons: list[Connector | Retrier | Auditor], tasks: list[asyncio.Task[None]]
) -> None:
    for daemon in daemons:
        daemon.request_stop()
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
