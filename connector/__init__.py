"""The egest daemon: consume a destination's topics, deliver over HTTP, commit only what has an outcome."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from connector.daemon import Connector

__all__ = ["Connector"]


def __getattr__(name: str) -> Any:
    """`connector.Connector`, imported on first use: `connector --help` must not load the daemon."""
    if name == "Connector":
        from connector.daemon import Connector

        return Connector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
