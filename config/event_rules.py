"""What a destination and an ingest stream both say of the events on their topics: how a topic is
named, how large one event may be, and how its id and time fields are named."""

from __future__ import annotations

import re

from pydantic import ValidationInfo

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# every event must fit in one record of NAME.retry_in and NAME.dlq, whose producer limit is 16 MiB:
# a destination's max_batch_bytes and a stream's max_event_bytes are at most this
MAX_EVENT_BYTES_LIMIT = 15 * 1024 * 1024


def topic_problem(topic: str) -> str | None:
    """What is wrong with a Kafka topic's name; None when nothing is."""
    return None if _TOPIC_RE.match(topic) else f"{topic!r} is not a valid Kafka topic name"


def distinct_time_field(value: str, info: ValidationInfo) -> str:
    """The `event_time_field` validator of a model that also has an `id_field`: the two differ."""
    if value == info.data.get("id_field"):
        raise ValueError("must differ from id_field")
    return value
