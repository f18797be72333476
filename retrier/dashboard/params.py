"""The dashboard's query parameters, read and checked: bad input is a `BadInput` naming what and where."""

from __future__ import annotations

import time
from collections.abc import Mapping

from hifi.cli import parse_time
from hifi.errors import ConfigError
from hifi.redaction import mask
from retrier.dlq.letter import REASONS
from retrier.dlq.query import Cursor, LetterFilter


class BadInput(ValueError):
    """A request parameter that does not parse: the 400's one line."""


def letter_filter(params: Mapping[str, str | None]) -> LetterFilter:
    reason = params.get("reason") or None
    if reason is not None and reason not in REASONS:
        raise BadInput(f"reason {mask(reason)!r}: not a dead-letter reason")
    now_ms = int(time.time() * 1000)
    replayed_text = params.get("replayed") or None
    if replayed_text not in (None, "yes", "no"):
        raise BadInput("replayed: yes or no")
    return LetterFilter(
        reason=reason,
        from_ms=time_param(params.get("from"), "from", now_ms),
        to_ms=time_param(params.get("to"), "to", now_ms),
        text=(params.get("q") or "").strip() or None,
        replayed=None if replayed_text is None else replayed_text == "yes",
    )


def time_param(text: str | None, name: str, now_ms: int) -> int | None:
    if not text:
        return None
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        return parse_time(text, now_ms=now_ms)
    except ConfigError as exc:
        raise BadInput(f"{name}: {exc}") from None


def int_param(
    text: str | None,
    name: str,
    *,
    default: int | None = None,
    low: int = 0,
    high: int | None = None,
) -> int:
    if text is None or text == "":
        if default is None:
            raise BadInput(f"{name}: a number is needed")
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadInput(f"{name} {mask(text)[:40]!r}: not a whole number") from None
    if value < low or (high is not None and value > high):
        bounds = f"from {low}" + (f" to {high}" if high is not None else "")
        raise BadInput(f"{name} {value}: use a number {bounds}")
    return value


def text_param(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise BadInput(f"{value!r}: give text or a number")
    return str(value)


def cursor_param(text: str | None) -> Cursor | None:
    if not text:
        return None
    try:
        return Cursor.from_token(text)
    except ValueError:
        raise BadInput("cursor: not one this dashboard gave") from None
