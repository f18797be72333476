"""What a daemon over several destinations serves, keyed by name: none at all is a bad configuration."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from hifi.errors import ConfigError


class Named(Protocol):
    """Anything with a name (a destination)."""

    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=Named)


def by_name(items: Iterable[N], *, none: str) -> dict[str, N]:
    """`items` keyed by name; a `ConfigError` saying `none` when there is not one."""
    named = {item.name: item for item in items}
    if not named:
        raise ConfigError(none)
    return named
