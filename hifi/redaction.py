"""Secrets out of every text hifi writes: one process-wide set of secret values, masking, and short one-line errors.

Whatever writes text (log lines, `/status`, DLQ and retry headers, CLI output, exception
messages) passes it through `mask()` or `short_error()`. Secrets are registered once, where
they are read: the catalog registers every value it substitutes from the environment and every
word of 8 characters or more of a header value; the Kafka settings register the password.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, MutableMapping
from typing import Any

MASK = "***"
MIN_SECRET_CHARS = 4  # shorter values are not secrets, and masking them would garble text
MIN_HEADER_WORD_CHARS = 8  # a header value's words this long are masked (e.g. the token of "Bearer t")
ERROR_MAX_CHARS = 200

_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None


def register(values: Iterable[str]) -> None:
    """Mask these values (those of at least `MIN_SECRET_CHARS`) in all text written from now on."""
    global _pattern
    added = {value for value in values if len(value) >= MIN_SECRET_CHARS} - _secrets
    if not added:
        return
    _secrets.update(added)
    ordered = sorted(_secrets, key=len, reverse=True)  # a secret inside a longer one: longest first
    _pattern = re.compile("|".join(map(re.escape, ordered)))


def header_secrets(value: str) -> list[str]:
    """The parts of a header value to mask: the whole value and each word of 8 or more characters."""
    return [value, *(word for word in value.split() if len(word) >= MIN_HEADER_WORD_CHARS)]


def mask(text: str) -> str:
    """`text` with every registered secret replaced by `***`."""
    pattern = _pattern
    return text if pattern is None else pattern.sub(MASK, text)


def short_error(text: str) -> str:
    """A masked, one-line error of at most 200 characters."""
    line = " ".join(mask(text).split())
    return line if len(line) <= ERROR_MAX_CHARS else line[: ERROR_MAX_CHARS - 3] + "..."


def mask_event(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: mask secrets in every string value of a log line."""
    if _pattern is None:
        return event_dict
    for key, value in event_dict.items():
        if isinstance(value, str):
            event_dict[key] = mask(value)
        elif isinstance(value, list | tuple | dict):
            event_dict[key] = _mask_nested(value)
    return event_dict


def _mask_nested(value: Any) -> Any:
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, list | tuple):
        return [_mask_nested(item) for item in value]
    if isinstance(value, dict):
        return {key: _mask_nested(item) for key, item in value.items()}
    return value
