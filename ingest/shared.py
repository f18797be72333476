"""What every request of one ingest process shares: the streams, their readers and tokens, Kafka, Redis, the bounds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from config.streams import Stream
from ingest.accepted import Accepted
from ingest.acks import Acks
from ingest.admission import Admission
from ingest.auth import Tokens
from ingest.events import EventReader
from ingest.idempotency import Idempotency


@dataclass
class Shared:
    """One process's streams and the parts its handlers use."""

    streams: Mapping[str, Stream]
    acks: Acks
    accepted: Accepted  # the accepted facts, acknowledged before a 2xx
    admission: Admission
    idempotency: Idempotency | None = None  # None: no Redis configured, the header is ignored
    body_timeout_s: float = 30.0  # a request's whole body must arrive within this (else 408)
    tokens: Tokens = field(init=False)
    readers: dict[str, EventReader] = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = Tokens(self.streams)
        self.readers = {name: EventReader(stream) for name, stream in self.streams.items()}
