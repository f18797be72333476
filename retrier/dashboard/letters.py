"""One dead letter opened for the page: key, headers, failure history and body, masked and cut."""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
import orjson

from config.destination import Destination
from hifi.headers import HDR_HISTORY
from hifi.kafka.reading import read_at
from hifi.kafka.settings import KafkaSettings
from hifi.redaction import excerpt, mask, short_error

BODY_MAX_CHARS = 64 * 1024  # the page shows this much of a body, pretty-printed
_KEY_MAX_CHARS = 512
_HEADER_MAX_CHARS = 2048


async def open_letter(
    settings: KafkaSettings, dest: Destination, partition: int, offset: int
) -> dict[str, Any] | None:
    """The letter at `partition`/`offset` of NAME.dlq as the page shows it; None when the topic
    no longer holds it."""
    reading = read_at(settings, dest.dlq_topic, {partition: [offset]}, timeout_s=10)
    async with contextlib.aclosing(reading) as chunks:
        async for chunk in chunks:
            return describe(chunk[0])
    return None


def describe(record: Any) -> dict[str, Any]:
    """Everything the detail view shows of one record, every text masked before it is cut."""
    headers = list(record.headers or ())
    history: list[dict[str, Any]] = []
    shown_headers = []
    for name, raw in headers:
        text = _text(raw)
        if name == HDR_HISTORY:
            history = _history(raw)
        shown_headers.append([mask(name), excerpt(text, _HEADER_MAX_CHARS)])
    body, cut = _body(record.value)
    return {
        "partition": record.partition,
        "offset": record.offset,
        "dead_ms": record.timestamp,
        "key": excerpt(_text(record.key), _KEY_MAX_CHARS) if record.key is not None else None,
        "headers": shown_headers,
        "history": history,
        "body": body,
        "body_bytes": len(record.value or b""),
        "body_cut": cut,
    }


_any = msgspec.json.Decoder()
_entries = msgspec.json.Decoder(list[Any])


def _body(value: bytes | None) -> tuple[str, bool]:
    """The body pretty-printed when it is JSON, else as text; masked, then cut."""
    if value is None:
        return "", False
    try:
        text = orjson.dumps(_any.decode(value), option=orjson.OPT_INDENT_2).decode()
    # not JSON, or JSON orjson does not write back (nested too deep, an integer past 64 bits)
    except (msgspec.DecodeError, RecursionError, orjson.JSONEncodeError):
        text = _text(value)
    return excerpt(text, BODY_MAX_CHARS), len(text) > BODY_MAX_CHARS


def _history(raw: bytes | None) -> list[dict[str, Any]]:
    """The failures the letter went through, oldest first; an unreadable header reads as none."""
    try:
        entries = _entries.decode(raw or b"[]")
    except (msgspec.DecodeError, RecursionError):  # not JSON, not a list, nested too deep
        return []
    return [
        {
            "at_ms": entry.get("at_ms") if isinstance(entry.get("at_ms"), int) else None,
            "attempt": entry.get("attempt") if isinstance(entry.get("attempt"), int) else None,
            "status": entry.get("status") if isinstance(entry.get("status"), int) else None,
            "error": short_error(str(entry.get("error", ""))),
        }
        for entry in entries
        if isinstance(entry, dict)
    ]


def _text(raw: bytes | None) -> str:
    return (raw or b"").decode("utf-8", errors="replace")
