"""Redis keys that expire: claimed once, read, replaced and dropped (the ingest service's idempotency records).

Every command goes through `hifi.lookup_cache.redis_hash.redis_command`, the one place redis
exceptions become `StoreUnavailable`; each makes one attempt, bounded by `command_timeout_s`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import redis.asyncio

from hifi.lookup_cache.redis_hash import RedisSettings, RedisStore, redis_client

_CLAIM_ATTEMPTS = 3  # a key that expires between SET NX and GET is claimed again


class RedisKeys(RedisStore):
    """String keys under one prefix, each with its own expiry."""

    def __init__(self, client: redis.asyncio.Redis, settings: RedisSettings, prefix: str) -> None:
        super().__init__(client, settings, f"keys {prefix}*")
        self.prefix = prefix

    async def claim(self, key: str, value: bytes, *, ttl_ms: int) -> bytes | None:
        """Set `key` to `value` for `ttl_ms` unless it is set: None when this call set it, else
        the value it holds (SET NX, then GET: Redis before 7 has no SET NX GET)."""
        name = self.prefix + key
        for _ in range(_CLAIM_ATTEMPTS):
            claimed = await self._command(
                f"SET NX {name}", self._client.set(name, value, nx=True, px=ttl_ms)
            )
            if claimed:
                return None
            held = await self._command(f"GET {name}", self._client.get(name))
            if held is not None:
                return held if isinstance(held, bytes) else str(held).encode()
        return None  # set and expired again each time: take it as claimed

    async def replace(self, key: str, value: bytes, *, ttl_ms: int) -> None:
        """Set `key` to `value` for `ttl_ms`, whatever it held."""
        name = self.prefix + key
        await self._command(f"SET {name}", self._client.set(name, value, px=ttl_ms))

    async def drop(self, key: str) -> None:
        """Remove `key` (nothing when it is not set)."""
        name = self.prefix + key
        await self._command(f"DEL {name}", self._client.delete(name))


@contextlib.asynccontextmanager
async def connected_keys(settings: RedisSettings, prefix: str) -> AsyncIterator[RedisKeys]:
    """`RedisKeys` on a client closed when the block exits; connecting happens on first use, so
    an unreachable Redis fails the commands, never this."""
    async with redis_client(settings) as client:
        yield RedisKeys(client, settings, prefix)
