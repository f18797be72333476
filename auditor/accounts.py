"""The auditor's partition handler: its shares' records into their ledgers, rolls written, then committed.

A member of an auditor group owns some source partitions of its destinations, its **shares**
(`auditor/shares.py`, given by `auditor/assignor.py`), and reads every partition of the audit
topic, taking only the facts about its shares (`auditor/intake.py`). A share's state travels
in its own snapshot: read when the share is assigned, written with each roll before the
offsets behind it are committed. After each commit the member settles its shares on their
destination's clock and posts them to the board, where the other members read them
(`auditor/settling.py`).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import msgspec
import structlog
from aiokafka import TopicPartition

from auditor import metrics
from auditor.archive import Archive, PendingFiles
from auditor.archive.read import read_snapshot
from auditor.assignor import sources_of
from auditor.audit_reading import AuditReading
from auditor.epochs import Epochs
from auditor.health import Health, restore_health
from auditor.holdings import Holdings
from auditor.intake import Intake
from auditor.legacy import LegacySnapshot
from auditor.missing import Resolve, missing_ids, unnamed
from auditor.progress import ProgressClock
from auditor.settling import Settling
from auditor.shares import Books, Share, snapshot_digest, snapshot_name, write_share_snapshot
from config.destination import Destination
from hifi.accounting.incarnations import Incarnations
from hifi.accounting.tables import iso_minute
from hifi.errors import HifiError
from hifi.worker import PartitionHandler, Work

if TYPE_CHECKING:  # heavy: imported by the daemon only when a destination decodes
    from hifi.schema_registry import Decoding

log = structlog.get_logger(__name__)

ROLL_ROWS = 200_000  # roll sooner once this many rows wait: bounds the offsets tracked per roll
MAX_BUFFERED_ROWS = 400_000  # intake pauses while this many rows wait for a roll
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
        group_id: str,
        partitions: Mapping[str, Sequence[int]],
        member: str = "auditor",
        now_ms: Callable[[], int] = wall_clock_ms,
        holdings: Holdings | None = None,
        decodings: Mapping[str, Decoding] | None = None,
    ) -> None:
        """`partitions`: of each source topic, its partitions (the shares there are);
        `holdings`: where the sources hold events (None: none); `decodings`: by topic, `[decode]`."""
        self._dests = dests
        self._decodings = decodings or {}
        self._archive = archive
        self._audit_topic = audit_topic
        self._clock = clock
        self._roll_s = roll_s
        self._group_id = group_id
        self._now_ms = now_ms
        self.shares: dict[TopicPartition, Share] = {}
        self.incarnations = Incarnations()
        self._epochs = Epochs(self.incarnations, clock, now_ms)
        self._audit = AuditReading(self.shares, clock)
        books = Books(dests, self.shares, archive)
        self.intake = Intake(
            books,
            epochs=self._epochs,
            incarnations=self.incarnations,
            now_ms=now_ms,
        )
        self.settling = Settling(books, self.intake, group_id=group_id, member=member)
        self.settling.holdings, self.settling.incarnations = holdings, self.incarnations
        self.settling.know_partitions(partitions)
        self._legacy: LegacySnapshot | None = None
        self._offsets: dict[TopicPartition, list[int]] = defaultdict(list)
        self._facts: list[tuple[TopicPartition, list[Any], bool]] = []  # audit polls, `again`
        self._last_roll = time.monotonic()
        self._to_resolve: list[Resolve] = []
        self._audit_owned: set[TopicPartition] = set()
        # by snapshot name, the digest of the one this member read or wrote last (None: none)
        self._snapshot_digests: dict[str, bytes | None] = {}
        self._health_restored: set[str] = set()
        self._then_stop: Callable[[], None] | None = None  # set by `roll_and_stop`
        self.stopping = False  # the last roll is taken: nothing settles after it
        self.rebalancing = False  # revoked, not assigned again yet: nothing read, nothing posted

    @property
    def health(self) -> dict[str, Health]:
        return self.intake.health

    @property
    def refused(self) -> dict[str, int]:
        return self.intake.refused

    async def restore(self) -> None:
        """Read the group's snapshot of an auditor before shares (`auditor-GROUP`), if there is
        one: shares without a snapshot of their own start from it (`auditor/legacy.py`)."""
        name = f"auditor-{self._group_id}"
        data = await asyncio.to_thread(read_snapshot, self._archive.root, name)
        if data is None:
            log.info("no_group_snapshot", archive=str(self._archive.root))
            return
        self._legacy = LegacySnapshot.read(data, self._archive.root, name)
        log.info("group_snapshot_read", snapshot=name)

    # --- assignment ---------------------------------------------------------------------

    def assigned(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        """A rebalance gave this member `partitions`: keep the shares it still owns, read the
        snapshots of the new ones, forget the others (their snapshots are on disk as of their
        last roll, the commits with them); read the audit topic again from where the share
        least far along stopped (`auditor/audit_reading.py`)."""
        owned = sources_of(partitions, self._audit_topic)
        # a share kept whose snapshot another member wrote since (it owned the share while this
        # member waited for this assignment) is read again: the commits went on from there
        for tp in set(self.shares) - owned | {tp for tp in owned if self._moved(tp)}:
            del self.shares[tp]
            self.intake.changed = defaultdict(
                dict, {k: v for k, v in self.intake.changed.items() if k[0] != tp}
            )
        for tp in sorted(owned - set(self.shares)):
            self.shares[tp] = self._open_share(tp)
            self._to_resolve.extend(unnamed(tp, self.shares[tp]))
        self._audit_owned = partitions - owned
        positions = self._audit.positions(self._audit_owned)
        self.settling.assigned(set(self.shares))
        self.rebalancing = False  # a snapshot that cannot be read leaves it set: the worker stops
        log.info("shares_assigned", shares=sorted(f"{t.topic}/{t.partition}" for t in owned))
        return positions

    def rereads(self) -> set[TopicPartition]:
        return self._audit.rereads()

    def _moved(self, tp: TopicPartition) -> bool:
        """Whether the share held is not the one its snapshot holds (read or written last here)."""
        if tp not in self.shares:
            return False
        name = snapshot_name(self._group_id, tp)
        on_disk = snapshot_digest(read_snapshot(self._archive.root, name))
        if on_disk == self._snapshot_digests.get(name):
            return False
        log.info("share_read_again", share=f"{tp.topic}/{tp.partition}")
        return True

    def _open_share(self, tp: TopicPartition) -> Share:
        share = Share.of(tp, self.intake.readers.get(tp.topic, []))
        name = snapshot_name(self._group_id, tp)
        data = read_snapshot(self._archive.root, name)
        self._snapshot_digests[name] = snapshot_digest(data)
        try:
            if data is not None:
                state = msgspec.msgpack.decode(data)
                share.restore(state)
            elif self._legacy is not None:
                leads = {name: view.lead for name, view in self.settling.views.items()}
                state = self._legacy.share_state(
                    tp, share, leads=leads, audit_topic=self._audit_topic
                )
            else:
                return share
            self._clock.restore(state["progress"])
            self._epochs.restored(tp)  # its facts wait until it is read: which topic is it?
            self.incarnations.add(state["incarnations"])
            restore_health(self.health, self._health_restored, state.get("health", {}))
            self._again(self._epochs.restore(state.get("held_facts", ())))
        except (msgspec.DecodeError, ValueError, KeyError, TypeError) as exc:
            raise HifiError(
                f"archive {self._archive.root}: snapshot {name} cannot be read: {exc}; move it"
                " away to count the share afresh from the committed offsets"
            ) from None
        return share

    # --- taking records in ------------------------------------------------------------

    async def prepare(self, tp: TopicPartition, records: list[Any]) -> list[Any] | None:
        decoding = self._decodings.get(tp.topic)  # counted as the connector reads them
        return records if decoding is None else await decoding.prepare(tp.topic, records)

    def take(self, tp: TopicPartition, records: list[Any]) -> int | None:
        if not records or self.stopping:
            return None  # after the last roll: left uncommitted, read again by the next run
        if self.rebalancing:  # polled before the new shares are opened: read again after
            return int(records[0].offset)
        audit = tp.topic == self._audit_topic
        if audit:
            facts, again_from = self._audit.checked(tp, records)
            if again_from is not None:
                return again_from  # the audit topic started over: read from its beginning
        self._offsets[tp].extend(map(_offset_of, records))
        metrics.RECORDS.labels(tp.topic).inc(len(records))
        last = records[-1]
        if audit:
            self._clock.read(tp, last.offset + 1, max(map(_kafka_ms_of_record, records)))
            self._facts.append((tp, facts, False))  # after the poll's entries
            return None
        share = self.shares.get(tp)
        if share is None:
            return None
        epoch, held = self._epochs.of_poll(tp, records[0])
        self._again(held)  # facts that waited for this epoch
        self._clock.read(tp, last.offset + 1, max(map(_kafka_ms_of_record, records)))
        self.intake.entries(share, tp, records, epoch)
        return None

    def started_over(self, tp: TopicPartition) -> None:
        """A partition's topic was created again (`auditor.epochs`, `auditor.audit_reading`)."""
        if tp.topic == self._audit_topic:
            self._take_all_facts()  # the old topic's, before the shares forget how far they read
            self._audit.started_over(tp)
        elif tp.topic in self.intake.readers:
            self._epochs.started_over(tp)

    def _again(self, records: list[Any]) -> None:
        """Facts held while a partition started over: applied after the poll's entries."""
        if records:
            self._facts.append((TopicPartition(self._audit_topic, -1), records, True))

    def _take_all_facts(self) -> None:
        """The facts of the polls taken in, once their entries are (a re-created partition's
        new epoch is known before a fact about its events counts)."""
        self._again(self._epochs.due())
        facts, self._facts = self._facts, []
        for tp, records, again in facts:
            self.intake.facts(tp, records, again=again)

    # --- rolls --------------------------------------------------------------------------

    def roll_and_stop(self, then: Callable[[], None]) -> None:
        """Roll once more at the next chance, whatever `roll_s` says, then call `then` (the
        worker's stop): what the tables concluded (minutes made final since the last roll, the
        snapshots) is archived before the offsets behind it are committed and the auditor exits."""
        self._then_stop = then

    def next_work(self, *, poll_open: bool) -> Work | None:
        """A roll, once `roll_s` passed (or many rows wait, or a stop asks for the last one) and
        a whole poll is taken in."""
        archive = self._archive
        if poll_open or self.stopping or self.rebalancing:
            return None  # a roll between two assignments would save shares moving elsewhere
        self._take_all_facts()
        last = self._then_stop is not None
        if not (self._offsets or archive.buffered_rows or self._to_resolve):
            if last:
                self._stop_now()
            return None
        waited_s = time.monotonic() - self._last_roll
        if not last and waited_s < self._roll_s and archive.buffered_rows < ROLL_ROWS:
            return None
        self._last_roll = time.monotonic()
        pending = archive.take()
        states = self._snapshots()
        offsets, self._offsets = dict(self._offsets), defaultdict(list)
        resolve, self._to_resolve = self._to_resolve, []
        work = Work(self._roll(pending, states, resolve, last=last), offsets)
        if last:
            self._stop_now()
        return work

    def _stop_now(self) -> None:
        then, self._then_stop = self._then_stop, None
        self.stopping = True
        if then is not None:
            log.info("last_roll_started")
            then()

    @property
    def buffered_rows(self) -> int:
        return self._archive.buffered_rows

    def room(self) -> int:
        return max(0, MAX_BUFFERED_ROWS - self._archive.buffered_rows)

    def held(self, owned: set[TopicPartition]) -> set[TopicPartition]:
        self._clock.owned(owned)
        decodings = self._decodings  # a source whose registry does not answer waits
        return {tp for tp in owned if tp.topic in decodings and decodings[tp.topic].waiting()}

    @property
    def busy(self) -> bool:
        return bool(self._offsets or self._facts) or self.buffered_rows > 0

    def drop(self, partitions: set[TopicPartition]) -> None:
        self.rebalancing = True  # or stopping: the worker drops every partition then
        self._again(self._epochs.drop(partitions))
        for tp in partitions:
            self._offsets.pop(tp, None)
        self._facts = [f for f in self._facts if f[0] not in partitions]

    def _snapshots(self) -> dict[str, bytes]:
        """Each share's snapshot, taken now."""
        held = self._epochs.state()
        states = {}
        for tp, share in self.shares.items():
            state = share.state(
                self._clock.state(only=tp), self.incarnations.state(only=(tp.topic, tp.partition))
            )
            state["held_facts"] = held
            state["health"] = {
                name: self.health[name].snapshot() for name in share.ledgers if name in self.health
            }
            state["written_ms"] = self._now_ms()
            states[snapshot_name(self._group_id, tp)] = msgspec.msgpack.encode(state)
        return states

    async def _roll(
        self,
        pending: PendingFiles,
        states: dict[str, bytes],
        resolve: list[Resolve],
        *,
        last: bool = False,
    ) -> None:
        """Write the rows, then the snapshots; name the missing events of minutes made final
        (their rows go in the next roll, or in this one when it is the last)."""
        await self._write(pending, states)
        for tp, dest, minute_ms, origins in resolve:
            await self._resolve_missing(tp, dest, minute_ms, origins)
        if last and self._archive.buffered_rows:
            await self._write(self._archive.take(), self._snapshots())

    async def _write(self, pending: PendingFiles, states: dict[str, bytes]) -> None:
        started = time.perf_counter()
        await asyncio.to_thread(pending.write)
        root = self._archive.root
        for name, data in states.items():
            digest = await asyncio.to_thread(write_share_snapshot, root, name, data)
            self._snapshot_digests[name] = digest
        metrics.ARCHIVE_ROWS.inc(pending.rows)
        metrics.ARCHIVE_WRITE.observe(time.perf_counter() - started)

    async def _resolve_missing(
        self,
        tp: TopicPartition,
        dest: str,
        minute_ms: int,
        origins: dict[tuple[str, int], list[int]],
    ) -> None:
        """Name a share's missing events of a final minute by id, from the archive's entered
        rows; the destination's row gets them from the board (`auditor/lead.py`)."""
        try:
            ids = await missing_ids(self._archive.root, dest, minute_ms, origins)
        except HifiError as exc:
            log.warning(
                "missing_ids_unresolved", dest=dest, minute=iso_minute(minute_ms), error=str(exc)
            )
            return
        share = self.shares.get(tp)
        bucket = None if share is None else share.ledgers[dest].buckets.get(minute_ms)
        if bucket is not None:
            bucket.missing_ids = ids
            self.intake.changed[tp, dest][minute_ms] = self._now_ms()
        log.error(
            "missing_events",
            dest=dest,
            minute=iso_minute(minute_ms),
            share=f"{tp.topic}/{tp.partition}",
            missing=len(ids),
            first_ids=ids[:10],
        )

    # --- settling -----------------------------------------------------------------------

    def after_commit(self, lag_records: Mapping[TopicPartition, int]) -> None:
        if self.stopping:
            return  # a minute settled now would be in no roll: the next run settles it
        if self.rebalancing:
            return  # the facts taken of revoked partitions are dropped: the clock is ahead of them
        self._take_all_facts()
        for tp, lag in self._clock.lag_records().items():
            metrics.CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(lag)
        progress = {tp: self._clock.of([tp, *self._audit_owned]) for tp in self.shares}
        self._to_resolve.extend(self.settling.cycle(progress, self._now_ms()))
