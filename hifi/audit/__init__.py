"""The audit trail: the facts each component writes about what became of events.

- `facts`: a fact's format (`Fact`, its encoding, checks and refusals) and the audit topic;
- `trail`: `AuditTrail`, which writes a component's facts;
- `columns`: the events a fact names, column by column (`Slice`, `Seen`);
- `keys`: the Kafka key of a fact (its origin partition);
- `accepted`: the ingest service's `accepted` facts.

What most callers take is re-exported here (`from hifi.audit import Fact`, `audit.AuditTrail`).
"""

from __future__ import annotations

from hifi.audit.columns import Observed, Seen, Slice, slices_of
from hifi.audit.facts import (
    AUDIT_RETENTION_MS,
    AUDIT_TOPIC_ENV_VAR,
    BREAKER,
    BREAKER_ERROR_MAX_CHARS,
    BREAKER_STATES,
    DEFAULT_AUDIT_TOPIC,
    EVENTS_WRITTEN,
    FACTS_WRITTEN,
    FORMAT_MAJOR,
    FORMAT_MINOR,
    HDR_FORMAT,
    MAX_EVENTS_PER_FACT,
    TOPIC_MARK,
    BreakerChange,
    Fact,
    FactRefused,
    Refusal,
    SentBatch,
    audit_topic,
    build_facts,
    component_of,
    decode_fact,
    decode_facts,
    encode_fact,
    fact_records,
    node_name,
)
from hifi.audit.trail import AuditTrail, OutcomeDetails

__all__ = [
    "AUDIT_RETENTION_MS",
    "AUDIT_TOPIC_ENV_VAR",
    "BREAKER",
    "BREAKER_ERROR_MAX_CHARS",
    "BREAKER_STATES",
    "DEFAULT_AUDIT_TOPIC",
    "EVENTS_WRITTEN",
    "FACTS_WRITTEN",
    "FORMAT_MAJOR",
    "FORMAT_MINOR",
    "HDR_FORMAT",
    "MAX_EVENTS_PER_FACT",
    "TOPIC_MARK",
    "AuditTrail",
    "BreakerChange",
    "Fact",
    "FactRefused",
    "Observed",
    "OutcomeDetails",
    "Refusal",
    "Seen",
    "SentBatch",
    "Slice",
    "audit_topic",
    "build_facts",
    "component_of",
    "decode_fact",
    "decode_facts",
    "encode_fact",
    "fact_records",
    "node_name",
    "slices_of",
]
