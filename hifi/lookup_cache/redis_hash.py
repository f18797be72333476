"""The Redis boundary: where Redis is (`HIFI_REDIS_URL`), and one hash read and written with redis' asyncio client.

redis exceptions become `StoreUnavailable` here, once; code above never catches a redis type.
Each command makes one attempt, bounded as a whole by `command_timeout_s`: whoever calls it
(the lookup cache's background refreshes, `hifi-tenants`) decides whether and when to try again.
The URL's password is registered as a secret, and `describe()` leaves it out.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from hifi import redaction
from hifi.environment import REDIS_URL_ENV_VAR
from hifi.errors import ConfigError, StoreUnavailable

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
_SCHEMES = ("redis", "rediss", "unix")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """How to reach Redis: a URL (`redis://`, `rediss://` or `unix://`) and per-command bounds."""

    url: str = DEFAULT_REDIS_URL
    connect_timeout_s: float = 1.0
    command_timeout_s: float = 2.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RedisSettings:
        """`HIFI_REDIS_URL`, else the default; a URL hifi cannot use is a one-line `ConfigError`."""
        env = os.environ if environ is None else environ
        url = env.get(REDIS_URL_ENV_VAR) or DEFAULT_REDIS_URL
        parts = urlsplit(url)
        if parts.password:
            redaction.register([parts.password])
        if parts.scheme not in _SCHEMES:
            raise ConfigError(
                f"{REDIS_URL_ENV_VAR}: scheme {parts.scheme!r} is not one of"
                f" {', '.join(_SCHEMES)}; write e.g. {DEFAULT_REDIS_URL}"
            )
        try:
            redis.asyncio.Redis.from_url(url)  # parses the URL (host, port, db); connects later
        except ValueError as exc:
            raise ConfigError(f"{REDIS_URL_ENV_VAR}: {redaction.mask(str(exc))}") from None
        return cls(url)

    def describe(self) -> str:
        """The URL without its password, for logs, readiness and `/status`."""
        parts = urlsplit(self.url)
        if parts.password is None:
            return self.url
        user = parts.username or ""
        netloc = f"{user}:{redaction.MASK}@{parts.hostname}" + (
            f":{parts.port}" if parts.port else ""
        )
        return parts._replace(netloc=netloc).geturl()


class RedisStore:
    """What hifi keeps in Redis on one client (`what`: `hash KEY`, `keys PREFIX*`), its commands
    sent through `redis_command`."""

    def __init__(self, client: redis.asyncio.Redis, settings: RedisSettings, what: str) -> None:
        self._client = client
        self._settings = settings
        self._what = what

    def describe(self) -> str:
        """`WHAT at URL` (no password)."""
        return f"{self._what} at {self._settings.describe()}"

    async def _command(self, doing: str, call: Awaitable[T]) -> T:
        return await redis_command(self._settings, doing, call)


class RedisHash(RedisStore):
    """One Redis hash of entries: field name to value bytes."""

    def __init__(self, client: redis.asyncio.Redis, key: str, settings: RedisSettings) -> None:
        super().__init__(client, settings, f"hash {key}")
        self.key = key

    async def read_all(self) -> dict[str, bytes]:
        """Every field and its value (one HGETALL: a consistent view of the whole hash)."""
        found = await self._call("HGETALL", self._client.hgetall(self.key))
        return {_text(name): _bytes(value) for name, value in found.items()}

    async def read(self, fields: Sequence[str]) -> dict[str, bytes | None]:
        """The values of `fields` (one HMGET); None for a field the hash does not hold."""
        if not fields:
            return {}
        values = await self._call("HMGET", self._client.hmget(self.key, list(fields)))
        return {
            field: None if value is None else _bytes(value)
            for field, value in zip(fields, values, strict=True)
        }

    async def write(self, entries: Mapping[str, bytes]) -> None:
        """Set these fields (one HSET); the others are left as they are."""
        if entries:
            mapping: dict[Any, Any] = dict(entries)  # redis' stubs want a mapping of any encodable
            await self._call("HSET", self._client.hset(self.key, mapping=mapping))

    async def delete(self, fields: Sequence[str]) -> None:
        """Remove these fields (one HDEL)."""
        if fields:
            await self._call("HDEL", self._client.hdel(self.key, *fields))

    async def _call(self, command: str, call: Awaitable[T]) -> T:
        return await self._command(f"{command} {self.key}", call)


async def redis_command(settings: RedisSettings, doing: str, call: Awaitable[T]) -> T:
    """Await one Redis command (`doing`: its name and key, for the message) within
    `command_timeout_s`; any redis failure becomes `StoreUnavailable`, here and nowhere else."""
    try:
        async with asyncio.timeout(settings.command_timeout_s):
            return await call
    except TimeoutError:
        raise StoreUnavailable(
            f"redis {doing}: no reply within {settings.command_timeout_s:g}"
            f" s from {settings.describe()}"
        ) from None
    except (redis.exceptions.RedisError, OSError) as exc:
        raise StoreUnavailable(
            redaction.short_error(
                f"redis {doing} at {settings.describe()}: {type(exc).__name__}: {exc}"
            )
        ) from exc


@contextlib.asynccontextmanager
async def connected(settings: RedisSettings, key: str) -> AsyncIterator[RedisHash]:
    """The hash `key` on a client that is closed when the block exits (connections are made on
    first use, so this never fails for an unreachable Redis: the commands do)."""
    async with redis_client(settings) as client:
        yield RedisHash(client, key, settings)


@contextlib.asynccontextmanager
async def redis_client(settings: RedisSettings) -> AsyncIterator[redis.asyncio.Redis]:
    """A client of `settings` (one attempt per command, no retry of its own), closed on exit;
    its commands go through `redis_command`."""
    client = redis.asyncio.Redis.from_url(
        settings.url,
        socket_connect_timeout=settings.connect_timeout_s,
        socket_timeout=settings.command_timeout_s,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=30,
    )
    try:
        yield client
    finally:
        await client.aclose()


def _text(name: bytes | str) -> str:
    return name if isinstance(name, str) else name.decode("utf-8", errors="replace")


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value
