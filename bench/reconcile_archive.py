"""A synthetic auditor archive for `make bench-reconcile`: N events over one UTC day of minutes.

Written exactly as the auditor writes it (`hifi.accounting.archive_layout`'s schemas and partition
directories, zstd, the auditor's dictionary columns, its settings file), hour by hour and a
column at a time with numpy: no Python loop over events. The same plan and seed give the same
rows (file names included).

What happens to the events of one day, on one destination and one topic of 8 partitions:

- most are delivered by one of two connectors in a batch fact (one fact per partition and
  quarter second), a few batches stall for seconds (the lag percentiles' tail);
- some are handed off, routed and re-offered by the retrier, then delivered half a minute or
  more later; some are still in retry (handed off and routed, nothing final);
- some are dead-lettered: a 4xx by the connector, `expired` by the retrier after their retry
  tiers ran out, and a few dead-lettered then delivered hours later (a 2xx wins);
- some are filtered; about 1 in 1,000 has no id (`problem` `no_id`, a null `event_id`);
- 1 % of the delivered ones are delivered again minutes later (duplicates);
- a crash repeats rows: 1 % of each hour's entered rows and 1 % of its facts are written a
  second time, in a file of their own;
- exactly `missing` events (default N / 10,000) have no outcome at all: the loss.

Outcome rows are filed under the minute of the event's time, as the auditor files them, so
late facts land in the hour of their event; each hour has `files_per_hour` files of each kind
(the auditor's flushes) and one of repeats.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from auditor.archive import write_settings
from auditor.archive.files import DICTIONARY_COLUMNS as _DICTIONARY
from config.destination import Accounting
from hifi.accounting.archive_layout import (
    ENTERED_SCHEMA,
    HOUR_MS,
    OUTCOME_SCHEMA,
    Kind,
    partition_dir,
)
from hifi.accounting.buckets import MINUTE_MS
from hifi.vocabulary import Outcome, Reason

DAY_MS = 86_400_000
DEFAULT_DAY = "2026-11-01"
DEFAULT_DEST = "bench"
TOPIC = "orders"
PARTITIONS = 8
CONNECTORS = ("connector@bench-a:4101", "connector@bench-b:4102")
RETRIER = "retrier@bench-a:4201"
_NODES = (*CONNECTORS, RETRIER)
_OUTCOMES = tuple(str(o) for o in Outcome)
_REASONS = (str(Reason.HTTP_4XX), str(Reason.EXPIRED))
_STATUS_4XX = np.array([400, 404, 409, 422], dtype=np.int32)

# what becomes of an event (the missing ones are chosen apart, exactly)
DIRECT, RETRIED, IN_RETRY, DEAD_4XX, EXPIRED, DEAD_THEN_DELIVERED, FILTERED, MISSING = range(8)
_FATE_P = {
    DIRECT: 0.955,
    RETRIED: 0.02,
    IN_RETRY: 0.005,
    DEAD_4XX: 0.008,
    EXPIRED: 0.004,
    DEAD_THEN_DELIVERED: 0.001,
    FILTERED: 0.007,
}
NO_ID_P = 0.001
DUPLICATE_P = 0.01
REPEAT_P = 0.01
STALL_P = 0.005  # batch facts that take seconds (the destination was slow)
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Plan:
    """What to generate."""

    events: int
    seed: int = 7
    day: str = DEFAULT_DAY
    dest: str = DEFAULT_DEST
    missing: int | None = None  # default: events // 10,000 (at least 1)
    files_per_hour: int = 6

    @property
    def missing_events(self) -> int:
        if self.missing is not None:
            return min(self.missing, self.events)
        return min(self.events, max(1, self.events // 10_000))

    @property
    def start_ms(self) -> int:
        midnight = datetime.combine(date.fromisoformat(self.day), datetime.min.time(), UTC)
        return int(midnight.timestamp() * 1000)


@dataclass
class Truth:
    """What the generator put in the archive, by status of each event (the known answer)."""

    events: int = 0
    entered_rows: int = 0
    outcome_rows: int = 0
    delivered: int = 0
    dead_lettered: int = 0
    filtered: int = 0
    in_retry: int = 0
    missing: int = 0
    duplicates: int = 0
    files: int = 0
    bytes: int = 0

    def add(self, other: Truth) -> None:
        for name, value in asdict(other).items():
            if isinstance(value, int):
                setattr(self, name, getattr(self, name) + value)


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijection of uint64, so distinct inputs stay distinct."""
    z = values.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def hex_strings(
    words: list[np.ndarray], prefix: bytes = b"", valid: np.ndarray | None = None
) -> Any:
    """A string array: `prefix` and 16 hex digits per uint64 word, built in numpy."""
    n = len(words[0])
    width = len(prefix) + 16 * len(words)
    buf = np.empty((n, width), dtype=np.uint8)
    if prefix:
        buf[:, : len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    at = len(prefix)
    for word in words:
        for digit in range(16):
            shift = np.uint64(4 * (15 - digit))
            buf[:, at] = _HEX[((word >> shift) & np.uint64(15)).astype(np.intp)]
            at += 1
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    bitmap = None
    nulls = 0
    if valid is not None and not valid.all():
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
        nulls = int(n - valid.sum())
    return pa.Array.from_buffers(
        pa.string(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(buf)], null_count=nulls
    )


def _key(plan: Plan, what: str) -> np.uint64:
    digest = hashlib.blake2b(f"{plan.seed}/{what}".encode(), digest_size=8).digest()
    return np.uint64(int.from_bytes(digest, "little"))


@dataclass
class _Facts:
    """Outcome rows being built: per row the event's index and the fact's values."""

    event: list[np.ndarray] = field(default_factory=list)
    fact: list[np.ndarray] = field(default_factory=list)  # fact number, unique in the archive
    outcome: list[np.ndarray] = field(default_factory=list)
    node: list[np.ndarray] = field(default_factory=list)
    reason: list[np.ndarray] = field(default_factory=list)  # -1: none
    status: list[np.ndarray] = field(default_factory=list)  # 0: none
    outcome_ms: list[np.ndarray] = field(default_factory=list)
    taken_ms: list[np.ndarray] = field(default_factory=list)
    facts: int = 0  # facts numbered so far

    def add(
        self,
        rng: np.random.Generator,
        events: np.ndarray,
        partition: np.ndarray,
        ready_ms: np.ndarray,
        *,
        outcome: Outcome,
        node: np.ndarray | int,
        window_ms: int,
        delay_ms: tuple[float, float],
        taken_ms: np.ndarray | None = None,
        reason: int = -1,
        status: np.ndarray | int = 0,
    ) -> np.ndarray:
        """One fact per partition and `window_ms` of `ready_ms` (the events a node handles
        together), at its last event's ready time plus a lognormal delay (median, sigma);
        returns each event's outcome time."""
        n = len(events)
        if n == 0:
            return np.empty(0, dtype=np.int64)
        groups, inverse = np.unique(
            partition.astype(np.int64) << 40 | ready_ms // window_ms, return_inverse=True
        )
        last = np.full(len(groups), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(last, inverse, ready_ms)
        median, sigma = delay_ms
        delay = rng.lognormal(np.log(median), sigma, len(groups)).astype(np.int64)
        stalled = rng.random(len(groups)) < STALL_P
        delay[stalled] += rng.integers(1_000, 8_000, int(stalled.sum()))
        at = (last + delay)[inverse]
        self.event.append(events)
        self.fact.append(self.facts + inverse.astype(np.int64))
        self.facts += len(groups)
        self.outcome.append(np.full(n, _OUTCOMES.index(str(outcome)), dtype=np.int8))
        self.node.append(np.broadcast_to(np.asarray(node, dtype=np.int8), (n,)).copy())
        self.reason.append(np.full(n, reason, dtype=np.int8))
        self.status.append(np.broadcast_to(np.asarray(status, dtype=np.int32), (n,)).copy())
        self.outcome_ms.append(at)
        self.taken_ms.append(np.zeros(n, dtype=np.int64) if taken_ms is None else taken_ms)
        return at


def _strings(values: tuple[str, ...], codes: np.ndarray) -> Any:
    """`values[code]` per row, decoded from a dictionary in C; code -1 is null."""
    indices = pa.array(codes.astype(np.int32), mask=codes < 0)
    return pa.DictionaryArray.from_arrays(indices, pa.array(values)).dictionary_decode()


@dataclass
class _Hour:
    """One hour of events, with its entered and outcome tables."""

    entered: Any
    outcomes: Any
    entered_repeats: Any
    outcome_repeats: Any
    truth: Truth


def _hour(
    plan: Plan,
    hour: int,
    n: int,
    n_missing: int,
    first_event: int,
    next_offset: np.ndarray,
    first_fact: int,
) -> tuple[_Hour, int]:
    rng = np.random.default_rng([plan.seed, hour])
    start = plan.start_ms + hour * HOUR_MS
    event_ms = np.sort(start + rng.integers(0, HOUR_MS, n, dtype=np.int64))
    partition = rng.integers(0, PARTITIONS, n).astype(np.int32)
    order = np.argsort(partition, kind="stable")
    per_partition = np.bincount(partition, minlength=PARTITIONS)
    offset = np.empty(n, dtype=np.int64)
    starts = np.repeat(np.cumsum(per_partition) - per_partition, per_partition)
    offset[order] = np.arange(n) - starts + np.repeat(next_offset, per_partition)
    next_offset += per_partition
    kafka_ms = event_ms + rng.integers(0, 20, n)
    taken_ms = kafka_ms + rng.integers(1, 30, n)
    has_id = rng.random(n) >= NO_ID_P
    numbers = np.arange(first_event, first_event + n, dtype=np.uint64)
    event_id = hex_strings([_mix(numbers ^ _key(plan, "event"))], b"ev-", has_id)
    fates = np.array(list(_FATE_P))
    p = np.array(list(_FATE_P.values()))
    fate = rng.choice(fates, size=n, p=p / p.sum())
    fate[rng.choice(n, n_missing, replace=False)] = MISSING
    connector = (partition % len(CONNECTORS)).astype(np.int8)
    retrier = _NODES.index(RETRIER)

    facts = _Facts(facts=first_fact)

    def of(*wanted: int) -> np.ndarray:
        return np.flatnonzero(np.isin(fate, wanted))

    def add(idx: np.ndarray, ready: np.ndarray, **kw: Any) -> np.ndarray:
        return facts.add(rng, idx, partition[idx], ready, **kw)

    # first attempts by a connector
    direct = of(DIRECT)
    delivered_at = np.full(n, -1, dtype=np.int64)
    delivered_at[direct] = add(
        direct,
        taken_ms[direct],
        outcome=Outcome.DELIVERED,
        node=connector[direct],
        window_ms=250,
        delay_ms=(25.0, 0.8),
        taken_ms=taken_ms[direct],
        status=200,
    )
    dead = of(DEAD_4XX, DEAD_THEN_DELIVERED)
    dead_at = add(
        dead,
        taken_ms[dead],
        outcome=Outcome.DEAD_LETTERED,
        node=connector[dead],
        window_ms=250,
        delay_ms=(60.0, 0.5),
        taken_ms=taken_ms[dead],
        reason=_REASONS.index(str(Reason.HTTP_4XX)),
        status=_STATUS_4XX[rng.integers(0, len(_STATUS_4XX), len(dead))],
    )
    filtered = of(FILTERED)
    add(
        filtered,
        taken_ms[filtered],
        outcome=Outcome.FILTERED,
        node=connector[filtered],
        window_ms=250,
        delay_ms=(2.0, 0.3),
        taken_ms=taken_ms[filtered],
    )
    # the retry path: handed off, routed, re-offered (or not yet), then delivered or expired
    retried = of(RETRIED, IN_RETRY, EXPIRED)
    handed_at = add(
        retried,
        taken_ms[retried] + rng.integers(500, 3_000, len(retried)),
        outcome=Outcome.HANDED_OFF,
        node=connector[retried],
        window_ms=1_000,
        delay_ms=(5.0, 0.5),
        taken_ms=taken_ms[retried],
        status=503,
    )
    routed_at = add(
        retried,
        handed_at,
        outcome=Outcome.ROUTED,
        node=retrier,
        window_ms=1_000,
        delay_ms=(10.0, 0.5),
    )
    back = np.isin(fate[retried], (RETRIED,))
    again = retried[back]
    offered_at = add(
        again,
        routed_at[back] + rng.integers(30_000, 60_000, len(again)),
        outcome=Outcome.RE_OFFERED,
        node=retrier,
        window_ms=1_000,
        delay_ms=(5.0, 0.5),
    )
    retaken = offered_at + rng.integers(2, 40, len(again))
    delivered_at[again] = add(
        again,
        retaken,
        outcome=Outcome.DELIVERED,
        node=connector[again],
        window_ms=250,
        delay_ms=(25.0, 0.8),
        taken_ms=retaken,
        status=200,
    )
    gone = np.isin(fate[retried], (EXPIRED,))
    expired = retried[gone]
    add(
        expired,
        routed_at[gone] + rng.integers(600_000, 3_600_000, len(expired)),
        outcome=Outcome.DEAD_LETTERED,
        node=retrier,
        window_ms=1_000,
        delay_ms=(5.0, 0.5),
        reason=_REASONS.index(str(Reason.EXPIRED)),
    )
    # dead letters replayed hours later and accepted: a 2xx wins over the dead letter
    replayed = np.isin(fate[dead], (DEAD_THEN_DELIVERED,))
    late = dead[replayed]
    replay_taken = dead_at[replayed] + rng.integers(600_000, 7_200_000, len(late))
    delivered_at[late] = add(
        late,
        replay_taken,
        outcome=Outcome.DELIVERED,
        node=connector[late],
        window_ms=250,
        delay_ms=(25.0, 0.8),
        taken_ms=replay_taken,
        status=200,
    )
    # delivered again minutes later (a rebalance before the commit): duplicates
    once = np.flatnonzero(delivered_at >= 0)
    twice = once[rng.random(len(once)) < DUPLICATE_P]
    again_taken = delivered_at[twice] + rng.integers(60_000, 600_000, len(twice))
    add(
        twice,
        again_taken,
        outcome=Outcome.DELIVERED,
        node=connector[twice],
        window_ms=250,
        delay_ms=(25.0, 0.8),
        taken_ms=again_taken,
        status=200,
    )

    minute_ms = event_ms - event_ms % MINUTE_MS
    problem = _strings(("no_id",), np.where(has_id, -1, 0))
    entered = pa.Table.from_arrays(
        [
            pa.array(minute_ms),
            _strings((TOPIC,), np.zeros(n, dtype=np.int8)),
            pa.array(partition),
            pa.array(offset),
            event_id,
            pa.array(event_ms),
            pa.array(kafka_ms),
            pa.array(kafka_ms + rng.integers(50, 500, n)),
            problem,
            pa.array(np.zeros(n, dtype=np.int32)),  # topic_epoch: never re-created
        ],
        schema=ENTERED_SCHEMA,
    )
    ev = np.concatenate(facts.event)
    fact_no = np.concatenate(facts.fact).astype(np.uint64)
    fact_word = _mix(fact_no ^ _key(plan, "fact"))
    status = np.concatenate(facts.status)
    outcomes = pa.Table.from_arrays(
        [
            pa.array(minute_ms[ev]),
            hex_strings([fact_word, _mix(fact_word)]),
            _strings(_NODES, np.concatenate(facts.node)),
            _strings(_OUTCOMES, np.concatenate(facts.outcome)),
            _strings(_REASONS, np.concatenate(facts.reason)),
            pa.array(status, mask=status == 0),
            pa.array(np.concatenate(facts.outcome_ms)),
            entered["topic"].take(pa.array(ev)),
            pa.array(partition[ev]),
            pa.array(offset[ev]),
            event_id.take(pa.array(ev)),
            pa.array(event_ms[ev]),
            pa.array(np.concatenate(facts.taken_ms)),
            pa.array(np.zeros(len(ev), dtype=np.int32)),  # topic_epoch
        ],
        schema=OUTCOME_SCHEMA,
    )
    # a crash repeats rows: a run of entered rows, and whole facts
    run = max(1, round(n * REPEAT_P)) if n else 0
    run_start = int(rng.integers(0, max(1, n - run + 1)))
    entered_repeats = entered.slice(run_start, run)
    repeated_facts = rng.random(facts.facts - first_fact) < REPEAT_P
    outcome_repeats = outcomes.filter(
        pa.array(repeated_facts[fact_no.astype(np.int64) - first_fact])
    )
    dead_final = np.isin(fate, (DEAD_4XX, EXPIRED))
    truth = Truth(
        events=n,
        entered_rows=n + entered_repeats.num_rows,
        outcome_rows=outcomes.num_rows + outcome_repeats.num_rows,
        delivered=int((delivered_at >= 0).sum()),
        dead_lettered=int(dead_final.sum()),
        filtered=len(filtered),
        in_retry=int((fate == IN_RETRY).sum()),
        missing=n_missing,
        duplicates=len(twice),
    )
    return _Hour(entered, outcomes, entered_repeats, outcome_repeats, truth), facts.facts


def _write(root: Path, plan: Plan, kind: Kind, hour: int, tables: list[Any], truth: Truth) -> None:
    directory = partition_dir(root, kind, plan.dest, hour)
    directory.mkdir(parents=True, exist_ok=True)
    for i, table in enumerate(tables):
        if table.num_rows == 0:
            continue
        first = min(table["minute_ms"].to_numpy())
        tag = hashlib.blake2b(f"{plan.seed}/{kind}/{hour}/{i}".encode(), digest_size=4).hexdigest()
        path = directory / f"part-{first}-{tag}.parquet"
        pq.write_table(table, path, compression="zstd", use_dictionary=_DICTIONARY[kind])
        truth.files += 1
        truth.bytes += path.stat().st_size


def _flushes(table: Any, by: str, files: int) -> list[Any]:
    """The table in `files` pieces in the order of `by`, as the auditor's flushes cut it."""
    ordered = table.take(pa.array(np.argsort(table[by].to_numpy(), kind="stable")))
    bounds = np.linspace(0, ordered.num_rows, files + 1).astype(int)
    return [ordered.slice(a, b - a) for a, b in itertools.pairwise(bounds)]


def generate(root: Path, plan: Plan) -> Truth:
    """Write the archive of `plan` under `root` (which must not hold one already)."""
    hours = DAY_MS // HOUR_MS
    rng = np.random.default_rng([plan.seed, 1_000_003])
    per_hour = rng.multinomial(plan.events, [1 / hours] * hours)
    missing = rng.multivariate_hypergeometric(per_hour, plan.missing_events)
    write_settings(
        root,
        plan.dest,
        Accounting(settle_s=60.0, lag_sla_s=1.0).model_dump(),
        now_ms=plan.start_ms,
    )
    truth = Truth()
    next_offset = np.zeros(PARTITIONS, dtype=np.int64)
    first_event = first_fact = 0
    for hour in range(hours):
        made, first_fact = _hour(
            plan,
            hour,
            int(per_hour[hour]),
            int(missing[hour]),
            first_event,
            next_offset,
            first_fact,
        )
        first_event += int(per_hour[hour])
        index = plan.start_ms // HOUR_MS + hour
        for kind, table, clock, repeats in (
            (Kind.ENTERED, made.entered, "observed_ms", made.entered_repeats),
            (Kind.OUTCOMES, made.outcomes, "outcome_ms", made.outcome_repeats),
        ):
            pieces = [*_flushes(table, clock, plan.files_per_hour), repeats]
            _write(root, plan, kind, index, pieces, made.truth)
        truth.add(made.truth)
    return truth
