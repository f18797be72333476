"""The connections of one transport: idle ones kept per origin, at most `max_connections` open.

A slot is one connection open, being opened, or lent to a request. A request takes an idle
connection of its origin (the newest), else a free slot to open one, else it waits in line for
the next connection or slot given back (`pool` timeout: `httpx.PoolTimeout`). Idle connections
past `keepalive_expiry` or closed by the server are closed when met, never lent; a timer
closes those past `keepalive_expiry` that no request met, so a pool at rest lets its sockets go.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import deque
from dataclasses import dataclass

import httpx

from connector.http1.connection import Http1Connection, PoolKey

__all__ = ["ConnectionPool"]

_CLOSE_WAIT_S = 5.0  # aclose: how long closing connections may take before they are dropped


@dataclass(slots=True)
class _Waiter:
    key: PoolKey
    #: given a connection of `key`, or None: a slot to open one
    future: asyncio.Future[Http1Connection | None]
    fresh: bool = False  # a slot only, never a connection given back


class ConnectionPool:
    """Slots and idle connections of one transport, shared by every origin it serves."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._max_open = sys.maxsize if limits.max_connections is None else limits.max_connections
        keep = limits.max_keepalive_connections
        self._max_idle = sys.maxsize if keep is None else keep
        self._expiry_s = limits.keepalive_expiry
        self._idle: dict[PoolKey, deque[Http1Connection]] = {}
        self._idle_count = 0
        self._taken = 0  # slots taken: connections open, being opened or lent
        self._connections: set[Http1Connection] = set()  # every open one, for `aclose`
        self._waiters: deque[_Waiter] = deque()
        self._closed = False
        self._reaper: asyncio.TimerHandle | None = None  # the next `_reap`, while any lie idle

    @property
    def open_count(self) -> int:
        """Slots taken now: connections open, being opened, or lent (never over the limit)."""
        return self._taken

    async def acquire(
        self, key: PoolKey, timeout_s: float | None, *, fresh: bool = False
    ) -> Http1Connection | None:
        """An idle connection of `key`, or None: a slot taken, for a new connection that the
        caller opens and `add`s, or gives back with `give_back_slot` if it could not. `fresh`:
        never an idle one (a request that failed on one is sent again on a new connection)."""
        if self._closed:
            raise RuntimeError("the HTTP transport is closed")
        connection = None if fresh else self._take_idle(key)
        if connection is not None:
            return connection
        if not self._waiters and (self._taken < self._max_open or self._evict_idle()):
            self._taken += 1
            return None
        return await self._wait(key, timeout_s, fresh=fresh)

    def add(self, connection: Http1Connection) -> None:
        """Count a connection opened in a slot from `acquire`."""
        self._connections.add(connection)

    def give_back_slot(self) -> None:
        """A slot from `acquire` whose connection could not be opened."""
        self._slot_freed()

    def release(self, connection: Http1Connection, *, reusable: bool) -> None:
        """A lent connection is back: lent again, kept idle, or closed (`reusable` False, the
        pool closed, the idle ones at their bound, or a waiter for another origin needs the
        slot)."""
        if not reusable or self._closed or not connection.usable:
            self.discard(connection)
            return
        for waiter in self._waiters:
            if waiter.key == connection.key and not waiter.fresh and not waiter.future.done():
                self._waiters.remove(waiter)
                waiter.future.set_result(connection)
                return
        if self._waiters or self._idle_count >= self._max_idle:
            self._close(connection)
            return
        connection.idle_since_s = time.monotonic()
        idle = self._idle.get(connection.key)
        if idle is None:
            idle = self._idle[connection.key] = deque()
        idle.append(connection)
        self._idle_count += 1
        if self._reaper is None and self._expiry_s is not None:
            self._reaper = asyncio.get_running_loop().call_later(self._expiry_s, self._reap)

    def discard(self, connection: Http1Connection) -> None:
        """Drop a lent connection at once (an error, a timeout, a cut body) and free its slot."""
        connection.abort()
        self._connections.discard(connection)
        self._slot_freed()

    async def aclose(self) -> None:
        """Close every connection, idle or lent, and refuse further requests."""
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        while self._waiters:
            future = self._waiters.popleft().future
            if not future.done():
                future.set_exception(RuntimeError("the HTTP transport was closed"))
        for idle in self._idle.values():
            self._taken -= len(idle)  # a lent one frees its slot when its request ends
        self._idle.clear()
        self._idle_count = 0
        connections = list(self._connections)
        for connection in connections:
            connection.close()
        if connections:
            waits = [asyncio.ensure_future(connection.wait_lost()) for connection in connections]
            _, pending = await asyncio.wait(waits, timeout=_CLOSE_WAIT_S)
            for wait in pending:
                wait.cancel()
            for connection in connections:
                connection.abort()  # those a TLS shutdown still held
        self._connections.clear()

    # --- internals ----------------------------------------------------------------------------

    def _take_idle(self, key: PoolKey) -> Http1Connection | None:
        """The newest usable idle connection of `key`; expired, closed ones and those whose
        peer spoke while idle (closed, or sent what nobody asked for) are closed when met."""
        idle = self._idle.get(key)
        if not idle:
            return None
        self._close_expired(idle, time.monotonic())
        while idle:
            connection = idle.pop()
            self._idle_count -= 1
            if connection.usable and not connection.peer_spoke():
                return connection
            self._close(connection)
        return None

    def _reap(self) -> None:
        """Close every idle connection past `keepalive_expiry`, and come again when the oldest
        left will be: with no request to meet them, a pool at rest would hold its sockets, and
        those the server closed (close-wait), for good."""
        self._reaper = None
        if self._closed or self._expiry_s is None:
            return
        now_s = time.monotonic()
        next_s: float | None = None
        for idle in self._idle.values():
            self._close_expired(idle, now_s)
            if idle:
                due_s = idle[0].idle_since_s + self._expiry_s - now_s
                next_s = due_s if next_s is None else min(next_s, due_s)
        if next_s is not None:
            self._reaper = asyncio.get_running_loop().call_later(next_s, self._reap)

    def _close_expired(self, idle: deque[Http1Connection], now_s: float) -> None:
        """Close the connections of `idle` (oldest first) idle for `keepalive_expiry` or more."""
        if self._expiry_s is None:
            return
        while idle and idle[0].idle_since_s <= now_s - self._expiry_s:
            self._idle_count -= 1
            self._close(idle.popleft())

    def _evict_idle(self) -> bool:
        """Close the oldest idle connection of any origin to free its slot; False: none idle."""
        oldest: deque[Http1Connection] | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since_s < oldest[0].idle_since_s):
                oldest = idle
        if oldest is None:
            return False
        self._idle_count -= 1
        connection = oldest.popleft()
        connection.close()
        self._connections.discard(connection)
        self._taken -= 1
        return True

    def _close(self, connection: Http1Connection) -> None:
        connection.close()
        self._connections.discard(connection)
        self._slot_freed()

    def _slot_freed(self) -> None:
        """A slot is free: the first waiter gets it, else it is counted free."""
        while self._waiters:
            future = self._waiters.popleft().future
            if not future.done():
                future.set_result(None)
                return
        self._taken -= 1

    async def _wait(
        self, key: PoolKey, timeout_s: float | None, *, fresh: bool
    ) -> Http1Connection | None:
        waiter = _Waiter(key, asyncio.get_running_loop().create_future(), fresh)
        self._waiters.append(waiter)
        future = waiter.future
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except BaseException as exc:
            self._abandon(waiter)
            if isinstance(exc, TimeoutError):
                raise httpx.PoolTimeout(f"no connection free within {timeout_s}s") from exc
            raise

    def _abandon(self, waiter: _Waiter) -> None:
        """A waiter that gave up (timeout, cancelled): what it was given goes to the next."""
        future = waiter.future
        if not future.done():
            future.cancel()
        with_result = not future.cancelled() and future.exception() is None
        if with_result:
            given = future.result()
            if given is None:
                self._slot_freed()
            else:
                self.release(given, reusable=True)
            return
        with contextlib.suppress(ValueError):  # already handed on by `aclose`
            self._waiters.remove(waiter)
