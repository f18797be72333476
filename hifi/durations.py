"""Durations for people: `1 d 10 min` rather than `1.00694 days` or `87000s`."""

from __future__ import annotations

import math

_UNITS_S = (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))


def for_people(seconds: float) -> str:
    """`seconds` in days, hours, minutes and seconds, each unit that is not zero (`1 d 10 min`,
    `2 h 30 s`); under a minute with up to three significant digits (`1.5 s`), under a second in
    milliseconds (`250 ms`). Above a minute, whole seconds: a duration this long is set in whole
    seconds, and a fraction of one would only hide the units that matter."""
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"a duration is a number of seconds at least 0, not {seconds!r}")
    if math.isinf(seconds):
        return "forever"
    if seconds == 0:
        return "0 s"
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    left = round(seconds)
    parts: list[str] = []
    for unit, size in _UNITS_S:
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count} {unit}")
    return " ".join(parts)


def for_people_ms(milliseconds: int) -> str:
    """As `for_people`, from milliseconds; a negative number (Kafka's `retention.ms = -1`) is
    `forever`."""
    return "forever" if milliseconds < 0 else for_people(milliseconds / 1000)
