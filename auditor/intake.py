"""Records into shares: entries into their partition's ledgers, audit facts into the shares they are about.

The auditor reads every record the connector reads, and every fact the connector writes: this
is its hot path. An entry goes to the share of its source partition. A fact is keyed by its
origin partition (`hifi/audit/keys.py`): one not about a share this member owns is skipped by
its key, before it is decoded, and one at an audit offset the share applied already (read
again after a rebalance, or before the share's snapshot was written) is skipped too. A fact
written before the split, keyed by its destination, is decoded and its slices applied each to
its own share (other members take the other slices).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import msgspec
import structlog
from aiokafka import TopicPartition

from auditor import metrics
from auditor.entered import entered_columns
from auditor.epochs import Epochs
from auditor.health import Health
from auditor.shares import Books, Share
from config.destination import Destination
from config.parsing import parse
from hifi.accounting.buckets import MINUTE_MS, Problem
from hifi.accounting.incarnations import Incarnations, key
from hifi.accounting.ledger import Ledger
from hifi.audit import TOPIC_MARK, Fact, FactRefused, decode_facts
from hifi.audit.keys import origin_of_key
from hifi.vocabulary import Outcome

log = structlog.get_logger(__name__)

_offset_of = attrgetter("offset")


class Intake:
    """Takes one member's records into its shares; fed by the auditor's event loop only."""

    def __init__(
        self,
        books: Books,
        *,
        epochs: Epochs,
        incarnations: Incarnations,
        now_ms: Callable[[], int],
    ) -> None:
        self._dests, self._shares, self._archive = books.dests, books.shares, books.archive
        self._epochs = epochs
        self._incarnations = incarnations
        self._now_ms = now_ms
        self.readers: dict[str, list[Destination]] = defaultdict(list)
        for dest in self._dests.values():
            for topic in dest.source_topics:
                self.readers[topic].append(dest)
        self.health = {name: Health() for name in self._dests}
        self.refused: dict[str, int] = defaultdict(int)
        self._refusal_logged: set[str] = set()
        # per share and destination, the final minutes a late outcome changed: when
        self.changed: dict[tuple[TopicPartition, str], dict[int, int]] = defaultdict(dict)

    # --- entries ------------------------------------------------------------------------

    def entries(self, share: Share, tp: TopicPartition, records: list[Any], epoch: int) -> None:
        for dest in self.readers.get(tp.topic, ()):
            self._entries(dest, share.ledgers[dest.name], tp, records, epoch)

    def _entries(
        self, dest: Destination, ledger: Ledger, tp: TopicPartition, records: list[Any], epoch: int
    ) -> None:
        """Note one poll of one partition as entered, a column at a time."""
        name = dest.name
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

    # --- facts --------------------------------------------------------------------------

    def facts(self, tp: TopicPartition, records: list[Any], *, again: bool = False) -> None:
        """Apply the facts of one poll of audit partition `tp` to the shares they are about;
        `again`: facts held while a partition started over (`auditor.epochs`), applied now
        whatever the shares' audit offsets say."""
        read_ms = self._now_ms()
        shares = self._shares
        for record in records:
            origin = origin_of_key(record.key)
            share: Share | None = None
            if origin is not None:
                share = shares.get(TopicPartition(*origin))
                if share is None or not (again or share.takes(tp.partition, record.offset)):
                    continue  # about another member's share, or applied already
            try:
                facts = decode_facts(record.value, record.headers)
            except FactRefused as exc:
                self._refuse(record, exc)
                continue
            for fact in facts:  # one, or (1.4) those of one origin partition written together
                self._fact(fact, record, share, tp.partition, again, read_ms)
        if records and not again:
            last = records[-1]
            for owned in shares.values():
                owned.applied_to(tp.partition, last.offset + 1, last.timestamp)

    def _fact(
        self,
        fact: Fact,
        record: Any,
        share: Share | None,
        partition: int,
        again: bool,
        read_ms: int,
    ) -> None:
        """Apply one fact of the audit record `record` (of audit partition `partition`)."""
        dests = self._dests_of(fact)
        if not dests or self._epochs.holds(fact, record):
            return  # destinations this auditor does not serve, or a fact held
        applied = self._apply(fact, dests, share, partition, record.offset, again, read_ms)
        if applied or not fact.slices:  # a breaker fact: every member keeps its health
            for dest in dests:
                self.health[dest].note(fact, read_ms)

    def _apply(
        self,
        fact: Fact,
        dests: list[str],
        share: Share | None,
        audit_partition: int,
        offset: int,
        again: bool,
        read_ms: int,
    ) -> bool:
        """Apply `fact` to its share, or each slice of an unsplit fact to its own; whether any
        share of this member took some of it."""
        epochs = self._incarnations.epochs_of(fact)
        if share is not None:
            for dest in dests:
                ledger = share.ledgers.get(dest)
                if ledger is not None:
                    self._apply_to(share.tp, ledger, fact, epochs, read_ms)
            return True
        applied = False
        for i, part in enumerate(fact.slices):
            owner = self._shares.get(TopicPartition(part.topic, part.partition))
            if owner is None or not (again or owner.takes(audit_partition, offset)):
                continue
            one = fact if len(fact.slices) == 1 else msgspec.structs.replace(fact, slices=[part])
            for dest in dests:
                ledger = owner.ledgers.get(dest)
                if ledger is not None:
                    self._apply_to(owner.tp, ledger, one, epochs[i : i + 1], read_ms)
                    applied = True
        return applied

    def _apply_to(
        self, tp: TopicPartition, ledger: Ledger, fact: Fact, epochs: list[int], read_ms: int
    ) -> None:
        dest = ledger.dest
        repeated = ledger.repeated_facts
        changes = ledger.apply(fact, epochs)
        if ledger.repeated_facts != repeated:
            metrics.REPEATED.labels(dest).inc()
            return
        for i, part in enumerate(fact.slices):
            minutes = [t - t % MINUTE_MS for t in part.event_times_ms]
            self._archive.outcomes(dest, minutes, fact, part, epoch=epochs[i] if epochs else 0)
        if changes:
            changed = self.changed[tp, dest]
            for change in changes:
                changed[change.minute_ms] = read_ms
                metrics.count_late(dest, change)

    def _dests_of(self, fact: Fact) -> list[str]:
        """The destinations a fact counts for: its own, or for an accepted fact (which names a
        stream's topic) every one whose `source_topics` include the topic."""
        if fact.outcome == Outcome.ACCEPTED:
            return [d.name for d in self.readers.get(fact.dest.removeprefix(TOPIC_MARK), ())]
        return [fact.dest] if fact.dest in self._dests else []

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
