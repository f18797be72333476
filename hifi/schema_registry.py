"""Records written through a Schema Registry, decoded to JSON: the Confluent wire format (magic byte
0, a 4-byte schema id) with Avro or JSON Schema payloads, by confluent-kafka's deserializers (Avro
through fastavro), the schemas fetched by id without blocking the event loop and kept in the
client's bounded cache.

Avro becomes JSON as `docs/schema-registry.md` defines: bytes and fixed as base64, decimals as
strings, timestamps as epoch milliseconds, dates and times in ISO 8601, unions as their value,
enums as their symbol. A record the registry cannot explain (an unknown schema id, a payload that
does not match its schema, no wire header) is `undecodable`: the caller dead-letters it with the
reason. A registry that does not answer (refused, a timeout, 5xx, a refused credential) is a
source fault, `RegistryUnavailable`: nothing is dead-lettered, intake waits. The original bytes
travel on (`DecodedRecord.raw_value`), so a hand-off, a dead letter and a replay carry what the
producer wrote, and are decoded again when they come back.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import decimal
import math
import time
import warnings
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import structlog

from hifi.errors import RegistryUnavailable

with warnings.catch_warnings():
    # The registry client imports authlib's httpx integration (for OAuth, which hifi does not
    # use), and authlib 1.9.10 warns on that import that it moves to httpx2: a line on the
    # stderr of every daemon that decodes, outside its log. authlib's own import puts an
    # "always" filter for its warnings first: the "ignore" goes in after it (an authlib
    # without that module has no such filter, and the decoder does not need it).
    with contextlib.suppress(ImportError):
        import authlib.deprecate  # noqa: F401

    warnings.filterwarnings("ignore", message="The httpx module is deprecated")
    from confluent_kafka.schema_registry import (
        AsyncSchemaRegistryClient,
        SchemaRegistryError,
        prefix_schema_id_deserializer,
    )
    from confluent_kafka.schema_registry.avro import AsyncAvroDeserializer
    from confluent_kafka.schema_registry.common.serde import SchemaId
    from confluent_kafka.schema_registry.json_schema import AsyncJSONDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

__all__ = ["DecodedRecord", "Decoding", "RecordDecoder", "RegistrySettings", "to_json"]

log = structlog.get_logger(__name__)
_WAIT_FIRST_S = 1.0  # after the registry failed to answer: the first wait, doubling...
_WAIT_MAX_S = 30.0  # ...up to this

_NOT_FOUND = 404
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True, slots=True)
class RegistrySettings:
    """Where the registry is and how to reach it (the catalog's `[decode]`)."""

    url: str
    username: str | None = None
    password: str | None = None
    timeout_s: float = 10.0
    cache_schemas: int = 1000
    ca_file: str | None = None  # a PEM bundle to trust instead of the system's
    client_cert: str | None = None  # mutual TLS: a PEM certificate (and its key, unless...)
    client_key: str | None = None  # ...here)
    proxy: str | None = None  # else HTTPS_PROXY, HTTP_PROXY and NO_PROXY from the environment

    def client_conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "url": self.url,
            "timeout": self.timeout_s,
            "cache.capacity": self.cache_schemas,
            "max.retries": 0,  # the caller waits and tries again, pausing intake meanwhile
        }
        if self.username is not None:
            conf["basic.auth.user.info"] = f"{self.username}:{self.password or ''}"
        if self.ca_file is not None:
            conf["ssl.ca.location"] = self.ca_file
        if self.client_cert is not None:
            conf["ssl.certificate.location"] = self.client_cert
        if self.client_key is not None:
            conf["ssl.key.location"] = self.client_key
        if self.proxy is not None:
            conf["proxy"] = self.proxy
        return conf


@dataclass(slots=True)
class DecodedRecord:
    """A record as `hifi.envelope.parse_records` reads it, its value decoded to JSON text; or,
    with `error`, the record the registry could not explain (`value` then its bytes as written)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Any
    raw_value: bytes | None  # what the producer wrote
    error: str | None = None  # why it is undecodable


class RecordDecoder:
    """Decodes the records of a poll (`decode`); an async context manager owning its client."""

    def __init__(self, settings: RegistrySettings) -> None:
        self._settings = settings
        self._client: AsyncSchemaRegistryClient | None = None
        self._avro: Any = None
        self._json: Any = None

    async def __aenter__(self) -> RecordDecoder:
        self._client = AsyncSchemaRegistryClient(self._settings.client_conf())
        # the deserializers are awaitable constructors (they check their configuration)
        self._avro = await AsyncAvroDeserializer(self._client)
        self._json = await AsyncJSONDeserializer(None, schema_registry_client=self._client)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def decode(self, records: Sequence[Any]) -> list[DecodedRecord]:
        """Each record decoded, one for one and in order; `RegistryUnavailable` when a schema
        it needs cannot be fetched now (nothing of the poll is decoded then)."""
        return [await self._one(record) for record in records]

    async def _one(self, record: Any) -> DecodedRecord:
        raw = record.value
        decoded = DecodedRecord(
            record.topic,
            record.partition,
            record.offset,
            record.timestamp,
            record.key,
            raw,
            record.headers,
            raw,
        )
        if raw is None:  # a tombstone: malformed, as without a registry
            return decoded
        context = SerializationContext(record.topic, MessageField.VALUE, record.headers)
        try:
            schema_id = SchemaId("AVRO")
            prefix_schema_id_deserializer(raw, context, schema_id)
            schema = await self._schema(schema_id.id)
            deserializer = self._json if schema.schema_type == "JSON" else self._avro
            value = await deserializer(raw, context)  # it may ask the registry too
            decoded.value = to_json(value)
        except SchemaRegistryError as exc:
            if exc.http_status_code != _NOT_FOUND:
                raise RegistryUnavailable(
                    f"schema registry answered {exc.http_status_code}: {exc.error_message}"
                ) from None
            decoded.error = f"schema registry: {exc.error_message} (HTTP {exc.http_status_code})"
        except (httpx.TransportError, TimeoutError, ConnectionError) as exc:
            raise RegistryUnavailable(
                f"schema registry unreachable: {type(exc).__name__}: {exc}"
            ) from None
        except Exception as exc:  # every failure to read one record is that record's outcome
            decoded.error = f"{type(exc).__name__}: {exc}"[:300]
        return decoded

    async def _schema(self, schema_id: int | None) -> Any:
        """The schema of `schema_id`, cached by the client (the decoder's type follows it)."""
        if self._client is None or schema_id is None:
            raise RuntimeError("the decoder is not open, or the record names no schema id")
        return await self._client.get_schema(schema_id)


class Decoding:
    """A decoder in front of a daemon's intake (`PartitionHandler.prepare`): the records of
    `topics` decoded; while the registry does not answer, None (the worker reads them again) and
    `waiting` is true, so the daemon pauses those partitions until the next try, 1 s after the
    failure and doubling to 30 s. Nothing is dead-lettered for an outage."""

    def __init__(self, decoder: RecordDecoder, topics: Collection[str]) -> None:
        self._decoder = decoder
        self.topics = frozenset(topics)
        self._retry_at = 0.0  # time.monotonic() of the next try while the registry is down
        self._wait_s = 0.0  # the last wait; 0 while the registry answers
        self.last_error: str | None = None

    def waiting(self) -> bool:
        return time.monotonic() < self._retry_at

    async def prepare(self, topic: str, records: list[Any]) -> list[Any] | None:
        if topic not in self.topics:
            return records
        if self.waiting():
            return None
        try:
            decoded: list[Any] = await self._decoder.decode(records)
        except RegistryUnavailable as exc:
            self._wait_s = min(_WAIT_MAX_S, 2 * self._wait_s or _WAIT_FIRST_S)
            self._retry_at = time.monotonic() + self._wait_s
            if self.last_error is None:
                log.warning("schema_registry_unavailable", error=str(exc), intake="paused")
            self.last_error = str(exc)
            return None
        if self.last_error is not None:
            log.info("schema_registry_recovered", waited_up_to_s=self._wait_s)
            self.last_error, self._wait_s = None, 0.0
        return decoded


def to_json(value: Any) -> bytes:
    """A deserialized value as JSON text (the mapping in the module docstring)."""
    return orjson.dumps(value, default=_json_default, option=orjson.OPT_PASSTHROUGH_DATETIME)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
        delta = moment - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"{type(value).__name__} has no JSON form")


@contextlib.asynccontextmanager
async def opened(settings: RegistrySettings | None) -> AsyncIterator[RecordDecoder | None]:
    """A decoder for `settings` while the block runs; None without settings."""
    if settings is None:
        yield None
        return
    async with RecordDecoder(settings) as decoder:
        yield decoder
