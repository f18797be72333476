"""Hostile replies that are failures: retried (5xx, 429, no status line, stalls, dropped
connections, odd headers) or dead-lettered (a 4xx), never a crash or a hang."""

from __future__ import annotations

import asyncio

from devstack.hostile.behaviour import TRICKLE_S, Exchange, Expect, behaviour
from hifi.vocabulary import Reason

_ERROR = b'{"error":"hostile"}'
_4XX = Reason.HTTP_4XX


@behaviour(Expect.RETRIED)
async def s500(x: Exchange) -> None:
    """500 Internal Server Error, kept alive."""
    await x.reply(500, "Internal Server Error", body=_ERROR)


@behaviour(Expect.RETRIED)
async def s503(x: Exchange) -> None:
    """503 with `Retry-After: 1`."""
    await x.reply(503, "Service Unavailable", [("Retry-After", "1")], _ERROR)


@behaviour(Expect.RETRIED)
async def s429(x: Exchange) -> None:
    """429 Too Many Requests without Retry-After."""
    await x.reply(429, "Too Many Requests", body=_ERROR)


@behaviour(Expect.RETRIED)
async def status_999(x: Exchange) -> None:
    """`HTTP/1.1 999 Weird`: a status past 5xx."""
    await x.reply(999, "Weird", body=_ERROR)


@behaviour(Expect.RETRIED)
async def big_error_body_502(x: Exchange) -> None:
    """502 with an 8 MiB HTML body."""
    await x.reply(502, "Bad Gateway", [("Content-Type", "text/html")], b"<p>" * (8 << 18))


@behaviour(Expect.RETRIED)
async def gzip_bomb_500(x: Exchange) -> None:
    """500 with a gzip body that inflates to about 1 GiB: at most ~1 MiB of it may be decoded."""
    headers = [("Content-Encoding", "gzip"), ("Content-Type", "text/plain")]
    await x.reply(500, "Internal Server Error", headers, x.bomb())


@behaviour(Expect.RETRIED)
async def stacked_encoding_500(x: Exchange) -> None:
    """500 with `Content-Encoding: gzip, x-zork, br` over plain text."""
    await x.reply(500, "Oops", [("Content-Encoding", "gzip, x-zork, br")], b"plain text")


@behaviour(Expect.RETRIED)
async def charset_unknown_500(x: Exchange) -> None:
    """500 with `Content-Type: text/plain; charset=x-klingon` and bytes that are not UTF-8."""
    await x.reply(500, "Oops", [("Content-Type", "text/plain; charset=x-klingon")], b"\xff\xfe\x81")


@behaviour(Expect.RETRIED)
async def lying_length_500(x: Exchange) -> None:
    """500 announcing 99,999,999,999 body bytes, sending 10, then a FIN."""
    await x.body()
    await x.send(b"HTTP/1.1 500 Oops\r\nContent-Length: 99999999999\r\n\r\n0123456789")


@behaviour(Expect.RETRIED)
async def ra_superscript_503(x: Exchange) -> None:
    """503 with `Retry-After: ²` (a digit to str.isdigit, not to int)."""
    await x.reply(503, "Service Unavailable", [("Retry-After", "²")], _ERROR)


@behaviour(Expect.RETRIED)
async def ra_huge_429(x: Exchange) -> None:
    """429 with a 40-digit Retry-After."""
    await x.reply(429, "Too Many Requests", [("Retry-After", "9" * 40)], _ERROR)


@behaviour(Expect.RETRIED)
async def ra_garbage_date_503(x: Exchange) -> None:
    """503 with `Retry-After: Wed, 99 Foo 99999 99:99:99 GMT`."""
    value = "Wed, 99 Foo 99999 99:99:99 GMT"
    await x.reply(503, "Service Unavailable", [("Retry-After", value)], _ERROR)


@behaviour(Expect.RETRIED)
async def ra_negative_429(x: Exchange) -> None:
    """429 with `Retry-After: -5` and a second, contradicting `Retry-After: 1e309`."""
    await x.reply(429, "Slow Down", [("Retry-After", "-5"), ("Retry-After", "1e309")], _ERROR)


@behaviour(Expect.RETRIED)
async def drop_after_request(x: Exchange) -> None:
    """The request read whole, then the connection closed (FIN) with no reply."""
    await x.body()


@behaviour(Expect.RETRIED)
async def reset_before_reply(x: Exchange) -> None:
    """The request read whole, then a TCP RST with no reply."""
    await x.body()
    await x.reset()


@behaviour(Expect.RETRIED)
async def reset_mid_request(x: Exchange) -> None:
    """A TCP RST once the request's head is read, its body unread."""
    await x.reset()


@behaviour(Expect.RETRIED)
async def garbage_status(x: Exchange) -> None:
    """`SPAM SPAM SPAM` in place of a status line, then a FIN."""
    await x.body()
    await x.send(b"SPAM SPAM SPAM\r\nContent-Length: 2\r\n\r\n{}")


@behaviour(Expect.RETRIED)
async def binary_status(x: Exchange) -> None:
    """1 KiB of every byte value in place of a reply, then a FIN."""
    await x.body()
    await x.send(bytes(range(256)) * 4)


@behaviour(Expect.RETRIED)
async def partial_status(x: Exchange) -> None:
    """`HTTP/1.1 2` and a FIN: a status line cut before its code is whole."""
    await x.body()
    await x.send(b"HTTP/1.1 2")


@behaviour(Expect.RETRIED, stalls=True)
async def stall(x: Exchange) -> None:
    """The request read whole, then silence until the client gives up."""
    await x.body()
    await x.hold_silent()


@behaviour(Expect.RETRIED, stalls=True)
async def slow_status(x: Exchange) -> None:
    """The status line `HTTP/1.1 200 OK` sent one byte every 0.2 s, then nothing more."""
    await x.body()
    try:
        for byte in b"HTTP/1.1 200 OK\r\n":
            await x.send(bytes([byte]))
            await asyncio.sleep(TRICKLE_S)
    except (ConnectionError, OSError):
        pass
    await x.hold_silent()


@behaviour(Expect.RETRIED, stalls=True)
async def continue_forever(x: Exchange) -> None:
    """`100 Continue` every 0.2 s, never a final reply."""
    await x.body()
    await x.hold_writing(b"HTTP/1.1 100 Continue\r\n\r\n", TRICKLE_S)


@behaviour(Expect.RETRIED, stalls=True)
async def switching_101(x: Exchange) -> None:
    """101 Switching Protocols to websocket, unasked, then silence."""
    await x.body()
    await x.send(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    )
    await x.hold_silent()


@behaviour(Expect.RETRIED, listener="tls")
async def tls_client_cert(x: Exchange) -> None:
    """A TLS listener that requires a client certificate (none is configured); 200 if reached."""
    await x.reply(200, "OK", body=b"{}")


@behaviour(Expect.DEAD_LETTERED, reason=_4XX)
async def s400(x: Exchange) -> None:
    """400 Bad Request for every request (bisected down to single events)."""
    await x.reply(400, "Bad Request", body=_ERROR)


@behaviour(Expect.DEAD_LETTERED, reason=_4XX)
async def s401(x: Exchange) -> None:
    """401 with `WWW-Authenticate: Bearer` (a destination fault: dead-lettered whole)."""
    await x.reply(401, "Unauthorized", [("WWW-Authenticate", 'Bearer error="invalid_token"')])


@behaviour(Expect.DEAD_LETTERED, reason=_4XX)
async def s404(x: Exchange) -> None:
    """404 Not Found (a destination fault: dead-lettered whole)."""
    await x.reply(404, "Not Found", body=_ERROR)


@behaviour(Expect.DEAD_LETTERED, reason=_4XX)
async def s413(x: Exchange) -> None:
    """413 Content Too Large for every request, even of one event."""
    await x.reply(413, "Content Too Large", body=_ERROR)


@behaviour(Expect.DEAD_LETTERED, reason=_4XX)
async def charset_unknown_400(x: Exchange) -> None:
    """400 with `charset=x-klingon` and bytes that are not UTF-8."""
    await x.reply(400, "Bad", [("Content-Type", "text/plain; charset=x-klingon")], b"\xff\xfe\x81")


@behaviour(Expect.DEAD_LETTERED, reason=_4XX)
async def unknown_encoding_400(x: Exchange) -> None:
    """400 with `Content-Encoding: x-zork, gzip` over plain text."""
    await x.reply(400, "Bad", [("Content-Encoding", "x-zork, gzip")], b"plain text")
