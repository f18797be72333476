"""The auditor's partition handler: records and facts into the ledgers, rolls written, then committed."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any

import msgspec
import structlog
from aiokafka import TopicPartition

from auditor import metrics
from auditor.archive import Archive, PendingFiles, write_snapshot
from auditor.buckets import MINUTE_MS, Problem, Settled
from auditor.entered import entered_columns
from auditor.epochs import Epochs
from auditor.health import Health
from auditor.incarnations import Incarnations, key
from auditor.ledger import Ledger
from auditor.missing import missing_ids, missing_origins
from auditor.progress import ProgressClock
from auditor.tables import archive_row, iso_minute
from config.destination import Destination
from config.parsing import parse
from hifi.audit import TOPIC_MARK, Fact, FactRefused, decode_fact
from hifi.errors import HifiError
from hifi.vocabulary import Outcome
from hifi.worker import PartitionHandler, Work

log = structlog.get_logger(__name__)

ROLL_ROWS = 200_000  # roll sooner once this many rows wait: bounds the offsets tracked per roll
MAX_BUFFERED_ROWS = 400_000  # intake pauses while this many rows wait for a roll
SNAPSHOT_FORMAT = 1
_offset_of = attrgetter("offset")
_kafka_ms_of_record = attrgetter("timestamp")


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class Accounts(PartitionHandler):
    """What the auditor does with its records: note entries, apply facts, roll, settle minutes."""

    def __init__(
        self,
        dests: Mapping[str, Destination],
        archive: Archive,
        *,
        audit_topic: str,
        clock: ProgressClock,
        roll_s: float,
        snapshot_name: str,
        now_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._dests = dests
        self._archive = archive
        self._audit_topic = audit_topic
        self._clock = clock
        self._roll_s = roll_s
        self._snapshot_name = snapshot_name
        self._now_ms = now_ms
        self.ledgers = {name: Ledger(name, dest.accounting) for name, dest in dests.items()}
        self.health = {name: Health() for name in dests}
        self.incarnations = Incarnations()
        self._epochs = Epochs(self.incarnations, clock, now_ms)
        self._readers: dict[str, list[Destination]] = defaultdict(list)
        for dest in dests.values():
            for topic in dest.source_topics:
                self._readers[topic].append(dest)
        self._offsets: dict[TopicPartition, list[int]] = defaultdict(list)
        self._facts: list[tuple[TopicPartition, list[Any]]] = []  # audit records of the poll
        self._last_roll = time.monotonic()
        self._to_resolve: list[tuple[str, int, dict[tuple[str, int], list[int]]]] = []
        self._changed: set[tuple[str, int]] = set()  # final minutes a late outcome changed
        self.refused: dict[str, int] = defaultdict(int)
        self._refusal_logged: set[str] = set()
        self._then_stop: Callable[[], None] | None = None  # set by `roll_and_stop`
        self.stopping = False  # the last roll is taken: nothing settles after it

    async def restore(self) -> None:
        """Carry on from the last snapshot in the archive, if there is one."""
        from auditor.archive.read import read_snapshot

        data = await asyncio.to_thread(read_snapshot, self._archive.root, self._snapshot_name)
        if data is None:
            log.info("no_snapshot", archive=str(self._archive.root))
            return
        try:
            state = msgspec.msgpack.decode(data)
            if state.get("format") != SNAPSHOT_FORMAT:
                raise ValueError(f"format {state.get('format')!r}, not {SNAPSHOT_FORMAT}")
            for name, ledger_state in state["ledgers"].items():
                if name in self.ledgers:
                    self.ledgers[name].restore(ledger_state)
            for name, health_state in state.get("health", {}).items():  # older snapshots have none
                if name in self.health:
                    self.health[name].restore(health_state)
            self._clock.restore(state["progress"])
            self.incarnations.restore(state.get("incarnations", ()))  # older snapshots: none
            self._again(self._epochs.restore(state.get("held_facts", ())))
        except (msgspec.DecodeError, ValueError, KeyError, TypeError) as exc:
            raise HifiError(
                f"archive {self._archive.root}: snapshot {self._snapshot_name} cannot be read:"
                f" {exc}; move it away to start the tables afresh from the committed offsets"
            ) from None
        log.info(
            "snapshot_restored",
            minutes={n: len(ledger.buckets) for n, ledger in self.ledgers.items()},
        )

    # --- taking records in ------------------------------------------------------------

    def take(self, tp: TopicPartition, records: list[Any]) -> None:
        if not records or self.stopping:
            return  # after the last roll: left uncommitted, read again by the next run
        self._offsets[tp].extend(map(_offset_of, records))
        metrics.RECORDS.labels(tp.topic).inc(len(records))
        last, readers = records[-1], self._readers.get(tp.topic, ())
        epoch, held = self._epochs.of_poll(tp, records[0]) if readers else (0, [])
        self._again(held)  # facts that waited for this epoch
        self._clock.read(tp, last.offset + 1, max(map(_kafka_ms_of_record, records)))
        if tp.topic == self._audit_topic:
            self._facts.append((tp, records))  # after the poll's entries: their epochs first
        for dest in readers:
            self._take_entries(dest, tp, records, epoch)

    def started_over(self, tp: TopicPartition) -> None:
        """A source partition's topic was created again while the auditor runs (`auditor.epochs`)."""
        if tp.topic in self._readers:
            self._epochs.started_over(tp)

    def _again(self, records: list[Any]) -> None:
        """Facts held while a partition started over: applied after the poll's entries."""
        if records:
            self._facts.append((TopicPartition(self._audit_topic, -1), records))

    def _take_entries(
        self, dest: Destination, tp: TopicPartition, records: list[Any], epoch: int
    ) -> None:
        """Note one poll of one partition as entered, a column at a time (the auditor reads
        every record the connector reads: this is its hot path)."""
        ledger, name = self.ledgers[dest.name], dest.name
        observed_ms = self._now_ms()
        parsed = parse(dest, tp, records, taken_ms=observed_ms)  # the connector's rules
        columns = entered_columns(ledger, parsed)
        self._archive.entered_many(name, tp.topic, tp.partition, observed_ms, columns, epoch=epoch)
        minutes, offsets, problems = columns.minutes_ms, columns.offsets, columns.problems
        origin = (key(tp.topic, epoch), tp.partition)
        if minutes and min(minutes) == max(minutes):
            ledger.enter(minutes[0], origin, offsets)
        else:
            by_minute: dict[int, list[int]] = defaultdict(list)
            for minute, offset in zip(minutes, offsets, strict=True):
                by_minute[minute].append(offset)
            for minute, of_minute in by_minute.items():
                ledger.enter(minute, origin, of_minute)
        if problems.count(None) != len(problems):
            counted = Counter(
                (minute, problem)
                for minute, problem in zip(minutes, problems, strict=True)
                if problem is not None
            )
            for (minute, problem), count in counted.items():
                ledger.note_problem(minute, Problem(problem), count)
                metrics.PROBLEMS.labels(name, problem).inc(count)

    def _take_all_facts(self) -> None:
        """The facts of the polls taken in, once their entries are (a re-created partition's
        new epoch is known before a fact about its events counts)."""
        self._again(self._epochs.due())
        facts, self._facts = self._facts, []
        for _, records in facts:
            self._take_facts(records)

    def _take_facts(self, records: list[Any]) -> None:
        read_ms = self._now_ms()
        for record in records:
            try:
                fact = decode_fact(record.value, record.headers)
            except FactRefused as exc:
                self._refuse(record, exc)
                continue
            dests = self._dests_of(fact)
            if not dests or self._epochs.holds(fact, record):
                continue  # destinations this auditor does not serve, or a fact held
            epochs = self.incarnations.epochs_of(fact)
            for dest in dests:
                self._take_fact(dest, fact, epochs, read_ms)

    def _dests_of(self, fact: Fact) -> list[str]:
        """The destinations a fact counts for: its own, or for an accepted fact (which names a
        stream's topic) every one whose `source_topics` include the topic."""
        if fact.outcome == Outcome.ACCEPTED:
            return [d.name for d in self._readers.get(fact.dest.removeprefix(TOPIC_MARK), ())]
        return [fact.dest] if fact.dest in self.ledgers else []

    def _take_fact(self, dest: str, fact: Fact, epochs: list[int], read_ms: int) -> None:
        ledger = self.ledgers[dest]
        repeated = ledger.repeated_facts
        changes = ledger.apply(fact, epochs)
        if ledger.repeated_facts != repeated:
            metrics.REPEATED.labels(dest).inc()
            return
        self.health[dest].note(fact, read_ms)
        for i, part in enumerate(fact.slices):
            minutes = [t - t % MINUTE_MS for t in part.event_times_ms]
            self._archive.outcomes(dest, minutes, fact, part, epoch=epochs[i] if epochs else 0)
        for change in changes:
            self._changed.add((dest, change.minute_ms))
            metrics.count_late(dest, change)

    def _refuse(self, record: Any, exc: FactRefused) -> None:
        metrics.REFUSED.labels(exc.reason).inc()
        self.refused[exc.reason] += 1
        if exc.reason not in self._refusal_logged:  # the first of each reason; the rest counted
            self._refusal_logged.add(exc.reason)
            log.warning(
                "audit_record_refused",
                reason=exc.reason,
                error=str(exc),
                origin=f"{record.topic}/{record.partition}/{record.offset}",
            )

    # --- rolls --------------------------------------------------------------------------

    def roll_and_stop(self, then: Callable[[], None]) -> None:
        """Roll once more at the next chance, whatever `roll_s` says, then call `then` (the
        worker's stop): what the tables concluded (minutes made final since the last roll, the
        snapshot) is archived before the offsets behind it are committed and the auditor exits."""
        self._then_stop = then

    def next_work(self, *, poll_open: bool) -> Work | None:
        """A roll, once `roll_s` passed (or many rows wait, or a stop asks for the last one) and
        a whole poll is taken in."""
        archive = self._archive
        if poll_open or self.stopping:
            return None
        self._take_all_facts()
        last = self._then_stop is not None
        if not (self._offsets or archive.buffered_rows or self._changed):
            if last:
                self._stop_now()
            return None
        waited_s = time.monotonic() - self._last_roll
        if not last and waited_s < self._roll_s and archive.buffered_rows < ROLL_ROWS:
            return None
        self._last_roll = time.monotonic()
        self._archive_changed()
        pending = archive.take()
        state = self._snapshot()
        offsets, self._offsets = dict(self._offsets), defaultdict(list)
        resolve, self._to_resolve = self._to_resolve, []
        work = Work(self._roll(pending, state, resolve, last=last), offsets)
        if last:
            self._stop_now()
        return work

    def _stop_now(self) -> None:
        then, self._then_stop = self._then_stop, None
        self.stopping = True
        if then is not None:
            log.info("last_roll_started")
            then()

    def _archive_changed(self) -> None:
        """A new row for each final minute a late outcome changed since the last roll."""
        now_ms = self._now_ms()
        for dest, minute_ms in sorted(self._changed):
            ledger = self.ledgers[dest]
            bucket = ledger.buckets.get(minute_ms)
            if bucket is not None:
                self._archive.minute(dest, archive_row(ledger, bucket, written_ms=now_ms))
        self._changed.clear()

    @property
    def buffered_rows(self) -> int:
        return self._archive.buffered_rows

    def room(self) -> int:
        return max(0, MAX_BUFFERED_ROWS - self._archive.buffered_rows)

    def held(self, owned: set[TopicPartition]) -> set[TopicPartition]:
        self._clock.owned(owned)
        return set()

    @property
    def busy(self) -> bool:
        return bool(self._offsets or self._facts or self._changed) or self.buffered_rows > 0

    def drop(self, partitions: set[TopicPartition]) -> None:
        self._again(self._epochs.drop(partitions))
        for tp in partitions:
            self._offsets.pop(tp, None)
        self._facts = [(tp, records) for tp, records in self._facts if tp not in partitions]

    def _snapshot(self) -> bytes:
        state = {
            "format": SNAPSHOT_FORMAT,
            "written_ms": self._now_ms(),
            "ledgers": {name: ledger.snapshot() for name, ledger in self.ledgers.items()},
            "health": {name: health.snapshot() for name, health in self.health.items()},
            "progress": self._clock.state(),
            "incarnations": self.incarnations.state(),
            "held_facts": self._epochs.state(),
        }
        return msgspec.msgpack.encode(state)

    async def _roll(
        self,
        pending: PendingFiles,
        state: bytes,
        resolve: list[tuple[str, int, dict[tuple[str, int], list[int]]]],
        *,
        last: bool = False,
    ) -> None:
        """Write the rows, then the snapshot; name the missing events of minutes made final
        (their rows go in the next roll, or in this one when it is the last)."""
        await self._write(pending, state)
        for dest, minute_ms, origins in resolve:
            await self._resolve_missing(dest, minute_ms, origins)
        if last and self._archive.buffered_rows:
            await self._write(self._archive.take(), self._snapshot())

    async def _write(self, pending: PendingFiles, state: bytes) -> None:
        started = time.perf_counter()
        await asyncio.to_thread(pending.write)
        await asyncio.to_thread(write_snapshot, self._archive.root, self._snapshot_name, state)
        metrics.ARCHIVE_ROWS.inc(pending.rows)
        metrics.ARCHIVE_WRITE.observe(time.perf_counter() - started)

    async def _resolve_missing(
        self, dest: str, minute_ms: int, origins: dict[tuple[str, int], list[int]]
    ) -> None:
        """Name the missing events of a final minute by id, from the archive's entered rows."""
        try:
            ids = await missing_ids(self._archive.root, dest, minute_ms, origins)
        except HifiError as exc:
            log.warning(
                "missing_ids_unresolved", dest=dest, minute=iso_minute(minute_ms), error=str(exc)
            )
            return
        bucket = self.ledgers[dest].buckets.get(minute_ms)
        if bucket is not None:
            bucket.missing_ids = ids
            self._archive.minute(
                dest, archive_row(self.ledgers[dest], bucket, written_ms=self._now_ms())
            )
        log.error(
            "missing_events",
            dest=dest,
            minute=iso_minute(minute_ms),
            missing=len(ids),
            first_ids=ids[:10],
        )

    # --- settling -----------------------------------------------------------------------

    def after_commit(self, lag_records: Mapping[TopicPartition, int]) -> None:
        if self.stopping:
            return  # a minute settled now would be in no roll: the next run settles it
        self._take_all_facts()
        for tp, lag in self._clock.lag_records().items():
            metrics.CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(lag)
        now_ms = self._now_ms()
        for name, ledger in self.ledgers.items():
            dest = self._dests[name]
            progress_ms = self._clock.at([*dest.source_topics, self._audit_topic])
            final_before_ms = ledger.last_final_ms
            for settled in ledger.advance(progress_ms):
                self._settled(ledger, settled, now_ms)
            metrics.count_final(name, ledger.first_minute_ms, final_before_ms, ledger.last_final_ms)
            metrics.UNSETTLED.labels(name).set(ledger.unsettled())
            metrics.WAITING.labels(name).set(ledger.waiting_events())
            availability = ledger.availability(progress_ms)
            if availability is not None:
                metrics.AVAILABILITY.labels(name).set(availability)

    def _settled(self, ledger: Ledger, settled: Settled, now_ms: int) -> None:
        bucket, name = settled.bucket, ledger.dest
        counts, lags = ledger.tally(bucket), ledger.lags(bucket)
        self._archive.minute(name, archive_row(ledger, bucket, written_ms=now_ms))
        metrics.count_settled(name, counts, lags.p95_ms, settled)
        if settled.alarm:
            log.error(
                "loss_alarm",
                dest=name,
                minute=iso_minute(bucket.minute_ms),
                missing=counts.missing,
                entered=counts.entered,
                accepted=counts.accepted,
                loss_ratio=round(settled.loss_ratio, 6),
            )
        if counts.missing:
            self._to_resolve.append((name, bucket.minute_ms, missing_origins(bucket)))
