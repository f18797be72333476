"""`Idempotency-Key`: a repeat within the stream's window gets the first answer and produces nothing.

The key of a stream is claimed in Redis (`HIFI_REDIS_URL`, shared by every replica) before the
request's events are produced: a pending record for `PENDING_TTL_MS`, replaced by the answer
(status and body) for `idempotency_window_s` once it is sent, or dropped when the answer was a
503 (nothing was promised: the sender resends, and may). A repeat meanwhile:

- while the first is still pending: 409, `Retry-After: 1` (the first may still fail);
- after it: the first answer, byte for byte, with `Idempotency-Status: replayed`;
- with another body than the first (its SHA-256 differs): 422, nothing produced.

While Redis cannot be reached the key is ignored (`Idempotency-Status: unavailable`): the
request is served as one without a key, and a duplicate is removed downstream by event id.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import msgspec
import orjson
import structlog

from config.streams import Stream
from hifi.errors import RequestRefused, StoreUnavailable
from ingest.answers import Answer

log = structlog.get_logger(__name__)

HEADER = b"idempotency-key"
STATUS_HEADER = b"idempotency-status"
KEY_PREFIX = "hifi:ingest:idempotency:"
#: how long a claim waits for its answer before a repeat may claim the key again: a process
#: killed mid-request leaves its claim behind no longer than this
PENDING_TTL_MS = 60_000
_KEY_RE = re.compile(rb"^[\x21-\x7e]{1,255}$")  # printable ASCII, no spaces


class KeyStatus(StrEnum):
    """What became of a request's `Idempotency-Key`: its `Idempotency-Status` header."""

    #: claimed by this request; its answer is kept for the stream's idempotency_window_s
    NEW = "new"
    #: a repeat: this is the first request's answer, nothing was produced
    REPLAYED = "replayed"
    #: Redis could not be reached: the key was ignored, the request served as one without it
    UNAVAILABLE = "unavailable"


class _Record(msgspec.Struct, frozen=True):
    body_sha256: str
    status: int = 0  # 0 while the first request is pending
    answer: str = ""


_decode = msgspec.json.Decoder(_Record).decode


def _encode(body_sha256: str, status: int = 0, answer: str = "") -> bytes:
    """A `_Record` as Redis keeps it (orjson writes, msgspec reads and checks)."""
    return orjson.dumps({"body_sha256": body_sha256, "status": status, "answer": answer})


@dataclass(slots=True)
class Claim:
    """One request's key: what became of it, and the first answer when it is a repeat."""

    key: str
    body_sha256: str
    status: KeyStatus
    replay: Answer | None = None


class Keys(Protocol):
    """Where the records live: `hifi.redis_keys.RedisKeys`, or a fake in tests."""

    async def claim(self, key: str, value: bytes, *, ttl_ms: int) -> bytes | None: ...
    async def replace(self, key: str, value: bytes, *, ttl_ms: int) -> None: ...
    async def drop(self, key: str) -> None: ...


class Idempotency:
    """The idempotency records of every stream, in Redis."""

    def __init__(self, keys: Keys) -> None:
        self._keys = keys

    async def claim(self, stream: Stream, raw_key: bytes, body: bytes) -> Claim:
        """Claim `raw_key` for this request; a `Claim` with the first answer for a repeat, or a
        `RequestRefused` (400 bad key, 409 pending, 422 another body)."""
        if not _KEY_RE.match(raw_key):
            raise RequestRefused(
                "Idempotency-Key must be 1 to 255 printable ASCII characters without spaces",
                status=400,
            )
        key = f"{stream.name}:{raw_key.decode()}"
        digest = hashlib.sha256(body).hexdigest()
        pending = _encode(digest)
        try:
            held = await self._keys.claim(key, pending, ttl_ms=PENDING_TTL_MS)
        except StoreUnavailable as exc:
            log.warning("idempotency_unavailable", error=str(exc))
            return Claim(key, digest, KeyStatus.UNAVAILABLE)
        if held is None:
            return Claim(key, digest, KeyStatus.NEW)
        try:
            record = _decode(held)
        except msgspec.DecodeError:
            log.warning("idempotency_record_unreadable", key=key)
            return Claim(key, digest, KeyStatus.UNAVAILABLE)
        if record.body_sha256 != digest:
            raise RequestRefused(
                "Idempotency-Key was used with another body; use a new key for a new request",
                status=422,
            )
        if not record.status:
            raise RequestRefused(
                "a request with this Idempotency-Key is in progress; try again to get its answer",
                status=409,
                headers=((b"retry-after", b"1"),),
            )
        replay = Answer(record.status, record.answer.encode())
        return Claim(key, digest, KeyStatus.REPLAYED, replay)

    async def settle(self, claim: Claim, answer: Answer, stream: Stream) -> KeyStatus:
        """Keep the answer of a claimed key for the stream's window, or drop the claim when the
        answer promised nothing (a 503); what the key's status is now."""
        if claim.status is not KeyStatus.NEW:
            return claim.status
        try:
            if answer.status >= 500:
                await self._keys.drop(claim.key)
            else:
                record = _encode(claim.body_sha256, answer.status, answer.body.decode())
                window_ms = round(stream.idempotency_window_s * 1000)
                await self._keys.replace(claim.key, record, ttl_ms=window_ms)
        except StoreUnavailable as exc:
            log.warning("idempotency_unavailable", error=str(exc))
            return KeyStatus.UNAVAILABLE
        return KeyStatus.NEW
