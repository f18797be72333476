"""Kafka for every hifi component: settings, clients that raise only hifi errors, topic admin.

- `settings`: where the brokers are and how to reach them (`KafkaSettings`, from the environment);
- `clients`: the one place aiokafka errors are translated (`kafka_errors`), shared client options;
- `producing`, `consuming`: the producer and the group consumer;
- `reading`: a topic read to its end, records at given offsets, committed offsets;
- `admin`: topics created, described and configured.

The clients are re-exported here (`kafka.producer(...)`, `kafka.Consumer`) and imported when
first used, so `hifi.kafka.settings` is read without loading aiokafka (the CLIs' `--help`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hifi.kafka.clients import (
        MAX_REQUEST_BYTES,
        Headers,
        Record,
        client_options,
        kafka_errors,
        start_client,
    )
    from hifi.kafka.consuming import Consumer, consumer
    from hifi.kafka.producing import Producer, RecordWriter, producer
    from hifi.kafka.reading import committed_offsets, read_at, read_topic

__all__ = [
    "MAX_REQUEST_BYTES",
    "Consumer",
    "Headers",
    "Producer",
    "Record",
    "RecordWriter",
    "client_options",
    "committed_offsets",
    "consumer",
    "kafka_errors",
    "producer",
    "read_at",
    "read_topic",
    "start_client",
]

_HOMES = {
    "MAX_REQUEST_BYTES": "clients",
    "Headers": "clients",
    "Record": "clients",
    "client_options": "clients",
    "kafka_errors": "clients",
    "start_client": "clients",
    "Consumer": "consuming",
    "consumer": "consuming",
    "Producer": "producing",
    "RecordWriter": "producing",
    "producer": "producing",
    "committed_offsets": "reading",
    "read_at": "reading",
    "read_topic": "reading",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'hifi.kafka' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"hifi.kafka.{home}"), name)
    globals()[name] = value
    return value
