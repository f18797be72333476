"""Hostile replies whose status line reads 2xx: each is a delivery, however broken what follows."""

from __future__ import annotations

import asyncio

from devstack.hostile.behaviour import TRICKLE_S, Exchange, Expect, behaviour

OK_LINE = b"HTTP/1.1 200 OK\r\n"


async def _status_then(x: Exchange, rest: bytes, *, line: bytes = OK_LINE) -> None:
    """The body read, a 2xx status line and `rest` in one write; the connection then closes."""
    await x.body()
    await x.send(line + rest)
    x.delivered()


@behaviour(Expect.DELIVERED)
async def ok_200(x: Exchange) -> None:
    """A plain, well-formed 200 with a small JSON body, kept alive."""
    await x.reply(200, "OK", [("Content-Type", "application/json")], b'{"ok":true}')


@behaviour(Expect.DELIVERED)
async def no_content_204(x: Exchange) -> None:
    """204 No Content, no body, kept alive."""
    await x.body()
    await x.send(b"HTTP/1.1 204 No Content\r\n\r\n")
    x.delivered()
    x.keep_alive = True


@behaviour(Expect.DELIVERED)
async def no_reason_phrase_200(x: Exchange) -> None:
    """`HTTP/1.1 200` with no reason phrase (RFC 9112 allows it)."""
    await _status_then(x, b"Content-Length: 2\r\n\r\n{}", line=b"HTTP/1.1 200\r\n")


@behaviour(Expect.DELIVERED)
async def obs_fold_200(x: Exchange) -> None:
    """200 with an obs-fold continuation line in its headers."""
    await _status_then(x, b"X-Folded: first\r\n  second\r\n\tthird\r\nContent-Length: 2\r\n\r\n{}")


@behaviour(Expect.DELIVERED)
async def bare_lf_200(x: Exchange) -> None:
    """200 whose lines end with a bare LF, not CRLF."""
    await _status_then(x, b"Content-Length: 2\nX-Lf: yes\n\n{}", line=b"HTTP/1.1 200 OK\n")


@behaviour(Expect.DELIVERED)
async def cl_list_200(x: Exchange) -> None:
    """200 with `Content-Length: 2, 2`."""
    await _status_then(x, b"Content-Length: 2, 2\r\n\r\n{}")


@behaviour(Expect.DELIVERED)
async def cl_and_te_200(x: Exchange) -> None:
    """200 with both Content-Length and Transfer-Encoding: chunked (a smuggling shape)."""
    await _status_then(
        x, b"Content-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    )


@behaviour(Expect.DELIVERED)
async def huge_headers_200(x: Exchange) -> None:
    """200 whose header block is about 100 KiB (over the common 64 KiB bound)."""
    pad = b"".join(b"X-Pad-%d: " % i + b"p" * 1000 + b"\r\n" for i in range(100))
    await _status_then(x, pad + b"Content-Length: 2\r\n\r\n{}")


@behaviour(Expect.DELIVERED)
async def truncated_body_200(x: Exchange) -> None:
    """200 announcing 10,000 body bytes, sending 10, then a FIN."""
    await _status_then(x, b"Content-Length: 10000\r\n\r\n0123456789")


@behaviour(Expect.DELIVERED)
async def reset_mid_body_200(x: Exchange) -> None:
    """200 announcing 10,000 body bytes, sending 100, then a TCP RST."""
    await _status_then(x, b"Content-Length: 10000\r\n\r\n" + b"x" * 100)
    await asyncio.sleep(0.05)
    await x.reset()


@behaviour(Expect.DELIVERED, stalls=True)
async def endless_body_200(x: Exchange) -> None:
    """200 with a chunked body that never ends (64 KiB chunks as fast as they are read)."""
    await _status_then(x, b"Transfer-Encoding: chunked\r\n\r\n")
    await x.hold_writing(b"10000\r\n" + b"e" * 0x10000 + b"\r\n")


@behaviour(Expect.DELIVERED, stalls=True)
async def trickle_body_200(x: Exchange) -> None:
    """200 announcing 1,000 body bytes, sent one every 0.2 s (past any timeout)."""
    await _status_then(x, b"Content-Length: 1000\r\n\r\n")
    await x.hold_writing(b"t", TRICKLE_S)


@behaviour(Expect.DELIVERED, stalls=True)
async def slow_headers_200(x: Exchange) -> None:
    """A 200 status line at once, then header bytes one every 0.2 s, the block never ending."""
    await _status_then(x, b"X-Slow: ")
    await x.hold_writing(b"s", TRICKLE_S)


@behaviour(Expect.DELIVERED)
async def gzip_bomb_200(x: Exchange) -> None:
    """200 with a gzip body that inflates to about 1 GiB of zeros (about 1 MiB sent)."""
    bomb = x.bomb()
    rest = b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb)
    await _status_then(x, rest + bomb)
    x.keep_alive = True


@behaviour(Expect.DELIVERED)
async def early_200(x: Exchange) -> None:
    """200 sent before the request's body is read; the body is read afterwards."""
    await x.send(OK_LINE + b"Content-Length: 2\r\n\r\n{}")
    await x.body()
    x.delivered()
    x.keep_alive = True


@behaviour(Expect.DELIVERED)
async def http10_200(x: Exchange) -> None:
    """An HTTP/1.0 200 without Content-Length: the body ends at the close."""
    await _status_then(x, b"Content-Type: application/json\r\n\r\n{}", line=b"HTTP/1.0 200 OK\r\n")


@behaviour(Expect.DELIVERED)
async def continue_storm_200(x: Exchange) -> None:
    """200 after 50 interim replies (100 Continue, 102 Processing, 103 Early Hints)."""
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n" * 20
    interim += b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n" * 10
    await x.body()
    await x.send(interim)
    await asyncio.sleep(0.1)
    await x.send(OK_LINE + b"Content-Length: 2\r\n\r\n{}")
    x.delivered()
    x.keep_alive = True


@behaviour(Expect.DELIVERED)
async def close_each_reply(x: Exchange) -> None:
    """200 without `Connection: close`, and the connection closed right after it."""
    await x.reply(200, "OK", body=b"{}", keep=False)


@behaviour(Expect.DELIVERED)
async def close_late(x: Exchange) -> None:
    """200 without `Connection: close`, the connection closed 0.2 s later (a race with reuse)."""
    await x.reply(200, "OK", body=b"{}", keep=False)
    await asyncio.sleep(0.2)


@behaviour(Expect.DELIVERED)
async def unknown_encoding_200(x: Exchange) -> None:
    """200 with `Content-Encoding: x-zork` and a body in no known coding."""
    await x.reply(200, "OK", [("Content-Encoding", "x-zork")], b"\x00zork\xff")


@behaviour(Expect.DELIVERED)
async def stacked_encoding_200(x: Exchange) -> None:
    """200 with `Content-Encoding: gzip, br, gzip` over a body that is none of them."""
    await x.reply(200, "OK", [("Content-Encoding", "gzip, br, gzip")], b"not compressed at all")


@behaviour(Expect.DELIVERED)
async def header_non_ascii_200(x: Exchange) -> None:
    """200 whose header values hold invalid UTF-8 and a NUL-free control byte."""
    await x.reply(200, "OK", [("X-Weird", b"\xff\xfe\xc3("), ("X-Ctl", b"a\x7fb")], b"{}")


@behaviour(Expect.DELIVERED)
async def negative_length_200(x: Exchange) -> None:
    """200 with `Content-Length: -1`."""
    await _status_then(x, b"Content-Length: -1\r\n\r\n{}")


@behaviour(Expect.DELIVERED)
async def chunked_garbage_200(x: Exchange) -> None:
    """200, chunked, whose first chunk size is `zz`."""
    await _status_then(x, b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
