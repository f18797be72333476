"""The audit trail: one Kafka record (an audit fact) per outcome of a request or hand-off.

A fact says what became of a group of events at one node of the chain: the destination, the
node, the outcome (`hifi.vocabulary.Outcome`, with a `Reason` for a dead letter), when, and,
per event, its origin (`topic/partition/offset` where it first entered hifi), its id, its event
time and when the node took it in. The auditor (`auditor/`) reads the facts of `hifi.audit`
beside the source topics it observes itself, and accounts for every event by origin.

Encoding: MessagePack, the events of a fact grouped by origin partition in columns (`Slice`,
`hifi/audit/columns.py`). The format version travels in the header `hifi-audit-format`
("MAJOR.MINOR") and in the value. A reader takes any minor version of its major one (a newer
minor only appends fields, which an older reader ignores, and a newer reader gives a field an
older minor lacks its default) and refuses a newer major with `FactRefused`, counted by reason:
a rolling upgrade writes facts an older auditor skips visibly, never misreads.

Versions: 1.0 is the first; 1.1 appends the batch a fact's events were sent in (`batch`, None
for events never sent to the destination, and for every 1.0 fact) and the requests spent so far
bisecting that batch (`bisection_requests`), so the auditor counts a rejected batch once and
its bisection requests apart (`auditor/health.py`). 1.2 adds a second kind of fact: a circuit
breaker's change (`BREAKER`, `BreakerChange`), which names no events; a 1.1 reader refuses it as
an unknown outcome (`hifi_auditor_refused_facts_total{reason="unknown_outcome"}`), so the
auditor is upgraded first. 1.3 adds the facts of events the ingest service accepted
(`Outcome.ACCEPTED`, `hifi/audit/accepted.py`): they name a stream's topic, not a destination
(their `dest` is `topic:` and the topic of their events); a 1.2 reader refuses them as it
refuses breaker facts. 1.4 lets one record hold several facts of one origin partition (a
MessagePack array of facts, their number in the header `hifi-audit-facts`; `grouped_records`):
a connector writes the facts of the outcomes it meets together in one record per origin
partition. A 1.3 reader refuses such a record as undecodable, so the auditor is upgraded first.

A fact names one origin partition and is keyed by it (`hifi/audit/keys.py`). It is written
with acks=all and awaited before the offsets of its events are committed: a crash can repeat a
fact, never lose one. Each fact has a random `fact_id`; the auditor counts a repeated fact once.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import msgspec
from prometheus_client import Counter

# the columns of a fact (`hifi/audit/columns.py`), re-exported: writers of facts import them here
from hifi.audit.columns import Observed, Slice, slices_of
from hifi.audit.keys import chunks_of, origin_key
from hifi.errors import HifiError
from hifi.kafka.clients import Record
from hifi.vocabulary import Outcome, Reason

AUDIT_TOPIC_ENV_VAR = "HIFI_AUDIT_TOPIC"
DEFAULT_AUDIT_TOPIC = "hifi.audit"
AUDIT_RETENTION_MS = 7 * 86_400_000  # the audit topic's retention when hifi creates it
HDR_FORMAT = "hifi-audit-format"
FORMAT_MAJOR = 1
FORMAT_MINOR = 4
_FORMAT = f"{FORMAT_MAJOR}.{FORMAT_MINOR}".encode()
FACT_HEADERS = [(HDR_FORMAT, _FORMAT)]
#: 1.4: on a record that holds several facts (a MessagePack array of them), their number
HDR_FACTS = "hifi-audit-facts"
#: a group of facts grows to this many bytes at most (a larger fact is written alone): a
#: group is never a record larger than the facts it holds would be
GROUP_MAX_BYTES = 1024 * 1024
# Events per fact at most: a batch of 100,000 events with 250-byte ids is ~30 MB; the producer
# takes 16 MiB per request, so a large outcome is written as several facts.
MAX_EVENTS_PER_FACT = 20_000
#: the outcome of a breaker fact (1.2): not an event's outcome, so not in `Outcome`
BREAKER = "breaker"
BREAKER_STATES = ("closed", "half_open", "open")  # `connector.breaker.BreakerState` names
BREAKER_ERROR_MAX_CHARS = 120
#: an accepted fact's `dest` (1.3): this and the stream's topic; never a destination's name
TOPIC_MARK = "topic:"

FACTS_WRITTEN = Counter(
    "hifi_audit_facts", "Audit facts acknowledged by the broker, by outcome.", ["dest", "outcome"]
)
EVENTS_WRITTEN = Counter(
    "hifi_audit_events",
    "Events named in audit facts acknowledged by the broker, by outcome.",
    ["dest", "outcome"],
)


def audit_topic(environ: dict[str, str] | None = None) -> str:
    """`HIFI_AUDIT_TOPIC`, or `hifi.audit`."""
    env = os.environ if environ is None else environ
    return env.get(AUDIT_TOPIC_ENV_VAR) or DEFAULT_AUDIT_TOPIC


def node_name(component: str) -> str:
    """Which process wrote a fact: `connector@host:pid`."""
    return f"{component}@{socket.gethostname()}:{os.getpid()}"


def component_of(node: str) -> str:
    """The component of a fact's node: `connector` for `connector@host:pid`."""
    return node.partition("@")[0]


class BreakerChange(msgspec.Struct, array_like=True, gc=False):
    """A circuit breaker's change at one connector replica (format 1.2)."""

    route: str | None  # the tenant route's name; None for the destination's own breaker
    state: str  # one of `BREAKER_STATES`
    since_ms: int  # when it left closed (open or half-open), or when it closed
    last_error: str | None  # masked and short; None when closed
    replica: str  # the connector's --instance-id, else host:pid


class Fact(msgspec.Struct, array_like=True, gc=False):
    """One outcome of one request or hand-off, for the events it names."""

    major: int
    minor: int
    fact_id: str
    dest: str
    node: str
    outcome: str  # an `Outcome` value
    reason: str | None  # a `Reason` value for a dead letter, else None
    status: int | None  # the destination's HTTP status, when one answered
    outcome_ms: int
    slices: list[Slice]
    batch: str | None = None  # 1.1: the id of the batch sent to the destination, if one was
    bisection_requests: int = 0  # 1.1: requests spent bisecting that batch when this was written
    breaker: BreakerChange | None = None  # 1.2: the change of a `BREAKER` fact, else None

    def events(self) -> int:
        return sum(len(s.offsets) for s in self.slices)


class Refusal(StrEnum):
    """Why the auditor could not use an audit record (a metric label)."""

    #: the value is not a fact of a format this reader knows
    UNDECODABLE = "undecodable"
    #: written by a newer major version of hifi
    NEWER_MAJOR = "newer_major"
    #: an outcome or reason outside hifi's vocabulary
    UNKNOWN_OUTCOME = "unknown_outcome"
    #: the columns of a slice differ in length
    INCONSISTENT = "inconsistent"


class FactRefused(HifiError):
    """An audit record the auditor cannot use; `reason` is a `Refusal`."""

    def __init__(self, message: str, *, reason: Refusal) -> None:
        super().__init__(message)
        self.reason = reason


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Fact)
_group_decoder = msgspec.msgpack.Decoder(list[msgspec.Raw])
_OUTCOMES = frozenset(Outcome)
_REASONS = frozenset(Reason)


def decode_fact(value: bytes | None, headers: Any) -> Fact:
    """The fact of one audit record; `FactRefused` says why it cannot be used."""
    declared = next((v for n, v in (headers or ()) if n == HDR_FORMAT and v is not None), None)
    if declared is not None:
        major = declared.split(b".", 1)[0]
        if major.isdigit() and int(major) > FORMAT_MAJOR:
            raise FactRefused(
                f"audit format {declared.decode(errors='replace')} is newer than"
                f" {FORMAT_MAJOR}.x; upgrade the auditor",
                reason=Refusal.NEWER_MAJOR,
            )
    if not value:
        raise FactRefused("audit record has no value", reason=Refusal.UNDECODABLE)
    try:
        fact = _decoder.decode(value)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise FactRefused(
            f"audit record is not a fact: {exc}", reason=Refusal.UNDECODABLE
        ) from None
    if fact.major > FORMAT_MAJOR:
        raise FactRefused(
            f"audit format {fact.major}.{fact.minor} is newer than {FORMAT_MAJOR}.x",
            reason=Refusal.NEWER_MAJOR,
        )
    if fact.outcome == BREAKER:
        return _checked_breaker(fact)
    if fact.outcome not in _OUTCOMES or (fact.reason is not None and fact.reason not in _REASONS):
        raise FactRefused(
            f"audit fact has outcome {fact.outcome!r}, reason {fact.reason!r}",
            reason=Refusal.UNKNOWN_OUTCOME,
        )
    return _checked_events(fact)


def decode_facts(value: bytes | None, headers: Any) -> list[Fact]:
    """The facts of one audit record: one, or (1.4) the several it holds; `FactRefused`
    says why they cannot be used (one refused, the record is)."""
    count = next((v for n, v in (headers or ()) if n == HDR_FACTS and v is not None), None)
    if count is None:
        return [decode_fact(value, headers)]
    try:
        values = _group_decoder.decode(value or b"")
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise FactRefused(
            f"audit record is not a group of facts: {exc}", reason=Refusal.UNDECODABLE
        ) from None
    if count != b"%d" % len(values):
        raise FactRefused(
            f"audit record holds {len(values)} facts, its {HDR_FACTS} header says"
            f" {count.decode(errors='replace')!r}",
            reason=Refusal.INCONSISTENT,
        )
    return [decode_fact(bytes(raw), headers) for raw in values]


def _checked_events(fact: Fact) -> Fact:
    """The columns of each slice have one length; an accepted fact's name the topic of its
    `dest`."""
    if fact.outcome == Outcome.ACCEPTED and any(
        TOPIC_MARK + part.topic != fact.dest for part in fact.slices
    ):
        raise FactRefused(
            f"audit fact {fact.fact_id}: an accepted fact's events must all be of the topic"
            f" its dest {fact.dest!r} names",
            reason=Refusal.INCONSISTENT,
        )
    for part in fact.slices:
        n = len(part.offsets)
        if not (len(part.ids) == len(part.event_times_ms) == len(part.taken_ms) == n):
            raise FactRefused(
                f"audit fact {fact.fact_id}: columns of {part.topic}/{part.partition} differ"
                " in length",
                reason=Refusal.INCONSISTENT,
            )
    return fact


def _checked_breaker(fact: Fact) -> Fact:
    """A `BREAKER` fact names a change in a known state and no events."""
    change = fact.breaker
    if change is None or change.state not in BREAKER_STATES or fact.slices:
        raise FactRefused(
            f"audit fact {fact.fact_id}: a breaker fact needs a change in one of"
            f" {', '.join(BREAKER_STATES)} and no events",
            reason=Refusal.INCONSISTENT,
        )
    return fact


def encode_fact(fact: Fact) -> bytes:
    return _encoder.encode(fact)


@dataclass(frozen=True, slots=True)
class SentBatch:
    """The batch sent to the destination whose outcome a fact records: its id (one per batch,
    the same for every fact its events get) and the bisection requests spent on it so far."""

    batch: str
    bisection_requests: int = 0


def build_facts(
    dest: str,
    node: str,
    outcome: Outcome,
    events: Sequence[Observed],
    *,
    reason: Reason | None,
    status: int | None,
    outcome_ms: int,
    sent: SentBatch | None = None,
) -> list[Fact]:
    """The facts of one outcome: one per origin partition (`hifi/audit/keys.py`) and
    `MAX_EVENTS_PER_FACT` events, each with a fresh id; `sent`: the batch they were sent in."""
    batch, bisection_requests = (None, 0) if sent is None else (sent.batch, sent.bisection_requests)
    return [
        Fact(
            FORMAT_MAJOR,
            FORMAT_MINOR,
            os.urandom(16).hex(),  # 128 random bits, as uuid4().hex at a fifth of its cost
            dest,
            node,
            str(outcome),
            None if reason is None else str(reason),
            status,
            outcome_ms,
            [chunk],
            batch,
            bisection_requests,
        )
        for part in slices_of(events)
        for chunk in chunks_of(part, MAX_EVENTS_PER_FACT)
    ]


def fact_records(topic: str, facts: Sequence[Fact]) -> list[Record]:
    """The audit records of facts about events, each keyed by its origin partition."""
    return [
        (topic, origin_key(f.slices[0].topic, f.slices[0].partition), encode_fact(f), FACT_HEADERS)
        for f in facts
    ]


def grouped_records(records: list[Record]) -> list[Record]:
    """Fact records written together, as one record per key (origin partition) holding all of
    its facts in their order (1.4), a key's only fact as it is; in the order keys first come."""
    by_key: dict[Any, list[Record]] = {}
    for record in records:
        by_key.setdefault((record[0], record[1]), []).append(record)
    if len(by_key) == len(records):
        return records
    grouped: list[Record] = []
    for (topic, key), same_key in by_key.items():
        for group in _up_to(same_key, GROUP_MAX_BYTES):
            if len(group) == 1:
                grouped.append(group[0])
                continue
            value = _array_header(len(group)) + b"".join(record[2] or b"" for record in group)
            headers = [*FACT_HEADERS, (HDR_FACTS, b"%d" % len(group))]
            grouped.append((topic, key, value, headers))
    return grouped


def _up_to(records: list[Record], max_bytes: int) -> list[list[Record]]:
    """The records in runs of at most `max_bytes` of values (a larger one alone)."""
    runs: list[list[Record]] = []
    run: list[Record] = []
    size = 0
    for record in records:
        length = len(record[2] or b"")
        if run and size + length > max_bytes:
            runs.append(run)
            run, size = [], 0
        run.append(record)
        size += length
    if run:
        runs.append(run)
    return runs


def _array_header(length: int) -> bytes:
    """MessagePack's header of an array of `length` items (the items' encodings follow)."""
    if length < 16:
        return bytes((0x90 | length,))
    if length < 1 << 16:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")
