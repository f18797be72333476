"""The auditor daemon: observes what enters each destination's source topics, reads the audit facts, keeps the accounts.

It is the third `PartitionWorker` daemon (group `hifi.auditor`). Several auditors of one
group share its destinations' source partitions (`auditor/assignor.py`, `auditor/shares.py`)
and each answers for the whole destination (`auditor/merged.py`). Its unit of work is a roll:
the archive rows and its shares' snapshots taken at one instant, written to closed files in a
thread; only then are the offsets of the records behind them done and committed. A kill -9
repeats rows in the archive, never drops one, and a restart carries on from the snapshots and
the committed offsets with the same tables (bitmaps and fact ids make a replay idempotent).

The auditor never touches the delivery path: being down, slow or killed delays only its own
tables, which catch up from Kafka when it comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from auditor import metrics
from auditor.accounts import Accounts, wall_clock_ms
from auditor.archive import (
    Archive,
    write_settings,
)
from auditor.assignor import shares_assignor
from auditor.defaults import DEFAULT_ROLL_S, GROUP_ID
from auditor.holdings import sampling
from auditor.pages import Pages
from auditor.progress import ProgressClock
from config.decode import Decode
from config.destination import Destination
from hifi import audit
from hifi.audit import AUDIT_RETENTION_MS, audit_topic
from hifi.errors import ConfigError
from hifi.kafka import admin as kafka_admin
from hifi.kafka.reach import KafkaReach
from hifi.kafka.settings import KafkaSettings
from hifi.named import by_name
from hifi.ops_http import DEFAULT_HOST, OpsServer
from hifi.worker import PartitionWorker, WorkerOptions

if TYPE_CHECKING:
    from hifi.schema_registry import Decoding

log = structlog.get_logger(__name__)

SHUTDOWN_TIMEOUT_S = 60.0  # the drain deadline: the last roll's writing and the final commit
# A stop waits this long at most for the last roll to start (a rebalance can hold the loop);
# without it the auditor stops as after a crash: the snapshot and the commits still agree.
LAST_ROLL_START_S = 10.0
_AUDIT_PARTITIONS = 4
_CONSUMER_OPTIONS: dict[str, Any] = {
    "max_partition_fetch_bytes": 4 * 1024 * 1024,
    "fetch_max_wait_ms": 250,
}


class Auditor:
    """Accounts for the events of some destinations; `run()` returns after a stop request or idle timeout."""

    def __init__(
        self,
        dests: Sequence[Destination],
        settings: KafkaSettings,
        *,
        archive_dir: Path,
        roll_s: float = DEFAULT_ROLL_S,
        metrics_port: int | None = None,
        metrics_host: str = DEFAULT_HOST,
        until_idle_s: float | None = None,
        group_id: str = GROUP_ID,
        topic: str | None = None,
    ) -> None:
        self.dests = by_name(
            dests, none="auditor: no destination to audit; add NAME.toml to the catalog"
        )
        self.group_id = group_id
        self.audit_topic = topic or audit_topic()
        self.archive_dir = archive_dir
        self._settings = settings
        self._roll_s = roll_s
        self.ops = OpsServer.on_port(metrics_port, host=metrics_host, component="auditor")
        for dest in dests:
            metrics.create_series(dest.name, lag_sla_s=dest.accounting.lag_sla_s)
        options = WorkerOptions(
            group_id=group_id,
            max_in_flight=1,  # one roll at a time, in order
            commit_interval_s=1.0,
            shutdown_timeout_s=SHUTDOWN_TIMEOUT_S,
            until_idle_s=until_idle_s,
            consumer_options={
                **_CONSUMER_OPTIONS,
                "partition_assignment_strategy": (shares_assignor(self.audit_topic),),
            },
            log_context={"component": "auditor"},
        )
        self.reach = KafkaReach("auditor", ops=self.ops)  # not ready while Kafka does not answer
        self._worker = PartitionWorker(settings, options, ops=self.ops, reach=self.reach)
        self.accounts: Accounts | None = None
        self._no_roll_after: asyncio.TimerHandle | None = None

    def request_stop(self) -> None:
        """Roll once more, then stop intake and drain; safe to call from a signal handler.

        The last roll writes what the tables concluded since the previous one (minutes made
        final, the snapshot) before the offsets behind it are committed: a stop right after a
        minute became final leaves it in the archive, as the live tables showed it.
        """
        accounts = self.accounts
        if accounts is None or self._no_roll_after is not None:  # not running, or asked twice
            self._worker.request_stop()
            return
        accounts.roll_and_stop(self._worker.request_stop)
        self._worker.wake()
        loop = asyncio.get_running_loop()
        self._no_roll_after = loop.call_later(LAST_ROLL_START_S, self._stop_without_roll)

    def _stop_without_roll(self) -> None:
        accounts = self.accounts
        if accounts is not None and not accounts.stopping:
            log.warning("last_roll_not_started", waited_s=LAST_ROLL_START_S)
            self._worker.request_stop()

    async def run(self) -> None:
        """Run until stopped, waiting for Kafka while it does not answer (`KafkaReach`);
        raises `HifiError` on what waiting cannot mend (a configuration error, a refusal)."""
        await self.reach.run_daemon(self.ops, self._session, stop=self._worker.stopping)

    async def _session(self) -> None:
        """Read the audit trail and the sources until stopped; Kafka not answering ends it."""
        archive = Archive(self.archive_dir)
        async with contextlib.AsyncExitStack() as stack:
            log.info("kafka_connecting", **self._settings.describe())
            existing = await kafka_admin.ensure_topics(
                self._settings,
                [self.audit_topic],
                partitions=_AUDIT_PARTITIONS,
                retention_ms=AUDIT_RETENTION_MS,
            )
            sources = self._source_topics(existing)
            now_ms = wall_clock_ms()
            for dest in self.dests.values():
                settings = dest.accounting.model_dump()
                await asyncio.to_thread(
                    write_settings, self.archive_dir, dest.name, settings, now_ms=now_ms
                )
            holdings = await stack.enter_async_context(
                sampling(self._settings, list(self.dests.values()))
            )
            decodings = await _decodings(stack, self.dests.values())
            accounts = Accounts(
                self.dests,
                archive,
                audit_topic=self.audit_topic,
                clock=ProgressClock(self._worker.highwater, wall_clock_ms),
                roll_s=self._roll_s,
                group_id=self.group_id,
                partitions=await kafka_admin.partitions_of(self._settings, sorted(sources)),
                member=audit.node_name("auditor"),
                holdings=holdings,
                decodings=decodings,
            )
            await accounts.restore()
            self.accounts = accounts
            if self.ops is not None:
                pages = Pages(accounts, wall_clock_ms, self._worker.started_over)
                self.ops.serve_json("/tables", pages.tables)
                self.ops.serve_json("/status", pages.status)
            topics = sorted({*sources, self.audit_topic})
            log.info("auditor_started", dests=sorted(self.dests), topics=topics)
            try:
                await self._worker.run(accounts, topics=topics)
            finally:
                if self._no_roll_after is not None:
                    self._no_roll_after.cancel()

    def _source_topics(self, existing: set[str]) -> set[str]:
        topics: set[str] = set()
        for dest in self.dests.values():
            missing = sorted(set(dest.source_topics) - existing)
            metrics.MISSING_TOPICS.labels(dest.name).set(len(missing))
            for topic in missing:
                log.warning(
                    "source_topic_missing",
                    dest=dest.name,
                    topic=topic,
                    hint="nothing can enter from it; the auditor reads it once it exists",
                )
            topics.update(dest.source_topics)
        return topics


async def _decodings(
    stack: contextlib.AsyncExitStack, dests: Iterable[Destination]
) -> dict[str, Decoding]:
    """By source topic, the decoder of its destinations' `[decode]`, one per registry; a topic
    whose destinations do not agree on `[decode]` is a `ConfigError` (counted one way only)."""
    by_topic: dict[str, tuple[Decode | None, str]] = {}
    for dest in dests:
        for topic in dest.source_topics:
            first = by_topic.setdefault(topic, (dest.decode, dest.name))
            if first[0] != dest.decode:
                raise ConfigError(
                    f"source topic {topic!r}: destinations {first[1]!r} and {dest.name!r} do not"
                    " agree on [decode]; give destinations that read one topic the same [decode]"
                )
    if all(decode is None for decode, _ in by_topic.values()):
        return {}
    from hifi.schema_registry import Decoding, RecordDecoder  # heavy: only when decoding

    decodings: dict[str, Decoding] = {}
    for decode in {decode for decode, _ in by_topic.values() if decode is not None}:
        topics = [topic for topic, (wanted, _) in by_topic.items() if wanted == decode]
        decoder = await stack.enter_async_context(RecordDecoder(decode.registry(None)))
        decodings.update(dict.fromkeys(topics, Decoding(decoder, topics)))
    return decodings
