"""The daemons' event loop: uvloop where it is installed, asyncio's own on request.

uvloop runs the same asyncio code on libuv, with less CPU per socket operation, callback and
timer: the connector's CPU per request, measured in `docs/performance.md`. `HIFI_EVENT_LOOP=asyncio`
picks the standard library's loop (to rule uvloop out while chasing a bug); `uvloop` insists on it.
Unset, a daemon runs on uvloop when it is installed (it is a dependency on Linux and macOS) and
on asyncio's loop otherwise. Tests run in-process on asyncio's loop (the HTTP/1.1 transport's
again on uvloop: `tests/connector/test_http1_on_uvloop.py`); the daemons they start as
processes run on the default, as in production.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import Literal

from hifi.environment import EVENT_LOOP_ENV
from hifi.errors import ConfigError

LoopKind = Literal["uvloop", "asyncio"]
LOOP_KINDS: tuple[LoopKind, ...] = ("uvloop", "asyncio")


def loop_kind(environ: Mapping[str, str] = os.environ) -> LoopKind:
    """The event loop a daemon runs on: `HIFI_EVENT_LOOP`, else uvloop if it imports."""
    asked = environ.get(EVENT_LOOP_ENV, "").strip()
    if asked == "":
        return "uvloop" if _uvloop_installed() else "asyncio"
    if asked == "asyncio":
        return "asyncio"
    if asked == "uvloop":
        if not _uvloop_installed():
            raise ConfigError(
                f"{EVENT_LOOP_ENV}=uvloop: uvloop is not installed (pip install uvloop)"
            )
        return "uvloop"
    raise ConfigError(f"{EVENT_LOOP_ENV}={asked!r}: use one of {', '.join(LOOP_KINDS)}")


def loop_factory(kind: LoopKind) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What `asyncio.Runner(loop_factory=...)` takes for `kind`; None is asyncio's default."""
    if kind == "asyncio":
        return None
    import uvloop

    return uvloop.new_event_loop


def _uvloop_installed() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


__all__ = ["EVENT_LOOP_ENV", "LOOP_KINDS", "LoopKind", "loop_factory", "loop_kind"]
