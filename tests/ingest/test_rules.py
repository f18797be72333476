"""The ingest service's rules without services: tokens, in-flight bounds, idempotency records, answers."""

from __future__ import annotations

import socket

import pytest

from config.streams import Stream, hash_token
from hifi.errors import RequestRefused, StoreUnavailable
from ingest.admission import Admission
from ingest.answers import Answer, batch_answer
from ingest.auth import Tokens
from ingest.idempotency import Idempotency, KeyStatus
from ingest.service import _listen

STREAMS = {
    "a": Stream(name="a", topic="ta", tokens_sha256=[hash_token("tok-a"), hash_token("tok-a2")]),
    "b": Stream(name="b", topic="tb", tokens_sha256=[hash_token("tok-b")]),
}


@pytest.mark.parametrize(
    ("header", "stream", "status"),
    [
        (b"Bearer tok-a", "a", None),
        (b"bearer  tok-a2 ", "a", None),
        (None, "a", 401),
        (b"Bearer", "a", 401),
        (b"Bearer tok-x", "a", 401),
        (b"Token tok-a", "a", 401),
        (b"Bearer tok-b", "a", 403),
        (b"Bearer tok-b", "zz", 404),
        (b"Bearer tok-x", "zz", 401),
    ],
)
def test_tokens_authorize_by_stream(header: bytes | None, stream: str, status: int | None) -> None:
    """A token of the stream passes; none or unknown 401, another stream's 403, unknown stream 404."""
    tokens = Tokens(STREAMS)
    if status is None:
        tokens.authorize(header, stream)
        return
    with pytest.raises(RequestRefused) as info:
        tokens.authorize(header, stream)
    assert info.value.status == status
    assert "tok-" not in str(info.value)


def test_admission_bounds_requests_and_bytes_and_sheds_with_503() -> None:
    """Beyond the requests or the bytes in flight, or while draining: 503 with Retry-After."""
    admission = Admission(max_requests=2, max_bytes=100)
    with admission.admitted(60):
        with pytest.raises(RequestRefused) as info, admission.admitted(60):
            pass
        assert info.value.status == 503
        assert dict(info.value.headers)[b"retry-after"] == b"1"
        with admission.admitted(40), pytest.raises(RequestRefused), admission.admitted(1):
            pass
    assert (admission.requests, admission.bytes) == (0, 0)
    with admission.admitted(1000):  # one request alone may hold more than the bound
        pass
    admission.drain.set()
    with pytest.raises(RequestRefused, match="draining"), admission.admitted(1):
        pass


def test_the_status_follows_the_results() -> None:
    """All accepted 200, some 207, none 400."""
    ok = {"status": "accepted"}
    bad = {"status": "rejected"}
    assert batch_answer([ok, ok]).status == 200
    assert batch_answer([ok, bad]).status == 207
    assert batch_answer([bad]).status == 400


class FakeKeys:
    """`hifi.redis_keys.RedisKeys` in a dict; `down` makes every command fail."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("redis down")

    async def claim(self, key: str, value: bytes, *, ttl_ms: int) -> bytes | None:
        self._check()
        if key in self.values:
            return self.values[key]
        self.values[key] = value
        return None

    async def replace(self, key: str, value: bytes, *, ttl_ms: int) -> None:
        self._check()
        self.values[key] = value

    async def drop(self, key: str) -> None:
        self._check()
        self.values.pop(key, None)


async def test_idempotency_keeps_answers_and_releases_503s() -> None:
    """New, then replayed byte for byte; pending 409; another body 422; a 503 releases the key."""
    keys = FakeKeys()
    store = Idempotency(keys)
    stream = STREAMS["a"]
    claim = await store.claim(stream, b"k1", b"body")
    assert claim.status is KeyStatus.NEW
    with pytest.raises(RequestRefused) as pending:
        await store.claim(stream, b"k1", b"body")
    assert pending.value.status == 409
    assert await store.settle(claim, Answer(207, b'{"x":1}'), stream) is KeyStatus.NEW
    again = await store.claim(stream, b"k1", b"body")
    assert again.status is KeyStatus.REPLAYED
    assert again.replay == Answer(207, b'{"x":1}')
    with pytest.raises(RequestRefused) as other:
        await store.claim(stream, b"k1", b"another body")
    assert other.value.status == 422
    shed = await store.claim(stream, b"k2", b"body")
    await store.settle(shed, Answer(503, b"{}"), stream)
    assert (await store.claim(stream, b"k2", b"body")).status is KeyStatus.NEW
    keys.down = True
    assert (await store.claim(stream, b"k3", b"body")).status is KeyStatus.UNAVAILABLE


def test_the_listening_socket_lets_asyncio_turn_nagle_off() -> None:
    """asyncio sets TCP_NODELAY only on sockets whose protocol is TCP: without it, a response's
    two writes wait for the client's delayed ACK."""
    sock = _listen("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
