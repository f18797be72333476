"""The connector's HTTP client against hostile replies on loopback (`reply_fuzz`, the short run of
`python -m chaos --only reply_fuzz`): nothing escapes, only a 2xx status line is a delivery, each
case ends in time, and bodies and memory stay bounded."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from chaos.reply_fuzz import FuzzRun
from connector.sender import HttpxSender
from tests.connector.reply_fuzz import MAX_BODY_BYTES, Case, bodies, final_status, replies

# ~1,300 cases, ~20 s of CPU: in `make test`, kept out of the quick tier (its budget is 60 s)
pytestmark = [pytest.mark.slow, pytest.mark.integration]

_BOMB, _, _DOUBLE_BOMB = (body for body, _ in bodies()[-3:])


def _reply(status: bytes, *headers: bytes, body: bytes = b"") -> bytes:
    lines = [b"HTTP/1.1 " + status, *headers, b"Content-Length: %d" % len(body)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


_NASTY = [
    Case((_reply(b"200 OK", b"Content-Encoding: gzip", body=_BOMB),), "close"),
    Case((_reply(b"500 Oops", b"Content-Encoding: gzip", body=_BOMB),), "reset"),
    Case((_reply(b"503 Busy", b"Content-Encoding: gzip, gzip", body=_DOUBLE_BOMB),), "hold"),
    Case((_reply(b"503 Busy", b"Retry-After: \xc2\xb2"),), "close"),  # '²'.isdigit()
    Case((_reply(b"429 Slow", b"Retry-After: 99999999999999999999999999"),), "close"),
    Case((_reply(b"429 Slow", b"Retry-After: Mon, 01 Jan 0001 00:00:00 GMT"),), "close"),
    Case((_reply(b"400 No", b"Content-Type: text/plain; charset=utf-16", body=b"abc"),), "hold"),
    Case((_reply(b"301 Moved", b"Location: http://198.51.100.1/\xff"),), "close"),
    Case((b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 500 Late\r\n",), "hold"),
    Case((b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 500 Oops\r\n\r\n"), "close"),
    Case((b"",), "reset"),
]


@pytest.fixture(scope="module")
def fuzz() -> Iterator[FuzzRun]:
    run = FuzzRun(request_timeout_s=0.5, max_in_flight=16)
    try:
        yield run
    finally:
        run.close()


@settings(
    max_examples=40,
    deadline=None,
    database=None,  # no .hypothesis/ in the checkout; a failure prints its reduced case
    phases=[Phase.explicit, Phase.generate],  # reduced by `reply_fuzz.minimize`, in bounded time
    suppress_health_check=list(HealthCheck),
)
@given(cases=st.lists(replies(), min_size=25, max_size=40))
@example(cases=_NASTY)
def test_no_reply_breaks_the_connector(fuzz: FuzzRun, cases: list[Case]) -> None:
    """Whatever a destination sends back, the connector counts the POST as delivered (only for a
    2xx status line), retried or rejected, in time, keeping at most ~1 MiB of body and memory."""
    fuzz.forget()
    for case in cases:
        fuzz.feed(case)
    fuzz.drain()
    failures = fuzz.report(budget_s=3.0) if fuzz.found or fuzz.suspects else []
    assert not failures, "\n".join(str(failure) for failure in failures)


_BIG_HEADER = b"X-Big: " + b"v" * 70_000


@pytest.mark.parametrize(
    "reply",
    [
        _reply(b"200 OK", _BIG_HEADER),
        _reply(b"204 No Content", *[b"X-Many-%d: %s" % (i, b"v" * 60) for i in range(1200)]),
        _reply(b"200 OK", b"Transfer-Encoding: chunked") + b"2\r\nok\r\n0\r\n\r\n",
        _reply(b"200 OK", b"Content-Length: 7"),
        _reply(b"201 Created", b"X-Folded: a\r\n  b"),
        b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n",
        _reply(b"200 OK", b"Content-Encoding: gzip", body=b"not gzip"),
        _reply(b"200 OK", b"Content-Encoding: gzip, gzip", body=_DOUBLE_BOMB),
    ],
    ids=[
        "header-over-64KiB",
        "headers-over-64KiB",
        "length-and-chunked",
        "two-lengths",
        "obs-fold",
        "bare-LF",
        "after-100",
        "bad-gzip",
        "gzip-bomb",
    ],
)
def test_a_2xx_status_line_is_a_delivery(fuzz: FuzzRun, reply: bytes) -> None:
    """A reply whose status line reads 2xx is a delivery, however lenient reading the rest
    takes (headers over the cap, ambiguous framing, obs-fold, bare LF, a body not decoded)."""
    outcome = fuzz.run_one(Case((reply,), "close"))
    assert outcome.kind == "delivered"
    assert not outcome.failures, outcome.failures


def test_an_error_bomb_costs_little(fuzz: FuzzRun) -> None:
    """A 5xx body of 128 MiB of zeros gzipped is retried, its decoding cut at a small cap: the
    case alone grows the peak RSS by at most a few MiB and ends in time."""
    bomb = Case((_reply(b"500 Oops", b"Content-Encoding: gzip", body=_BOMB),), "close")
    assert fuzz.replay(bomb) == []
    assert fuzz.run_one(bomb).kind == "retried"


@pytest.mark.parametrize(
    "next_reply", [b"\n", b"HTTP/1.1 500 Oops\r\n\r\n"], ids=["one-LF", "a-500"]
)
def test_a_reply_is_never_read_for_the_next_request(fuzz: FuzzRun, next_reply: bytes) -> None:
    """Bytes after a complete reply (a second reply begun) never answer the next request sent
    on that connection: it is not reused, or its leftovers are dropped."""
    first = Case((b"HTTP/1.1 204 No\r\n\r\nHTTP/1.1 201 OK\r\nContent-Length: 0\r\n",), "hold")
    assert fuzz.replay(first, Case((next_reply,), "close")) == []


def test_the_oracle_reads_status_lines_only() -> None:
    """`final_status` skips interim replies and reads the first final status line, or none."""
    assert final_status(b"HTTP/1.1 204 No Content\r\n\r\n") == 204
    assert final_status(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\n") == 200
    assert final_status(b"HTTP/1.1 103 Hints\nLink: </a>\n\nHTTP/1.1 500 X\n\n") == 500
    assert final_status(b"HTTP/1.1 100 Continue\r\n") is None
    assert final_status(b"xHTTP/1.1 200 OK\r\n\r\n") is None
    assert final_status(b"HTTP/1.1 2000 OK\r\n\r\n") is None
    assert final_status(b"") is None


def test_the_rig_sees_a_client_that_delivers_anything(fuzz: FuzzRun) -> None:
    """The harness itself: a client that reads 200 whatever came back is caught delivering a
    500, and one keeping 2 MiB of body is caught too."""
    liar = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda _: httpx.Response(200, content=bytes(2 << 20)))
    )
    case = Case((_reply(b"500 Oops"),), "close")
    outcome = fuzz.run_one(case, HttpxSender(liar, timeout_s=0.5))
    assert {f.prop for f in outcome.failures} == {"delivered-not-2xx", "body"}
    assert MAX_BODY_BYTES < 2 << 20
