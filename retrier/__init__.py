"""The global retrier: delay tiers between NAME.retry_in and NAME.retry_out, expiry to NAME.dlq."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from retrier.daemon import GROUP_ID, Retrier

__all__ = ["GROUP_ID", "Retrier"]


def __getattr__(name: str) -> Any:
    """The daemon's names, imported on first use: `retrier --help` must not load the daemon."""
    if name in __all__:
        from retrier import daemon

        return getattr(daemon, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
