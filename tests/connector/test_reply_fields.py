"""The reply header readers (`connector.http1.fields`): any bytes or text a destination sends give a
value in its documented range or None, never an exception; what the RFC grammar allows is read."""

from __future__ import annotations

import codecs
import math
import os
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from connector.http1 import fields
from connector.http1.fields import MAX_RETRY_AFTER_S

_SETTINGS = settings(database=None, max_examples=300, deadline=None)  # no .hypothesis/ here

# superscript two, Arabic-Indic three, NKo three, fullwidth one, double-struck zero, Tamil five
_OTHER_DIGITS = ["²", "٣", "\u07c3", "\uff11", "\U0001d7d8", "\u0beb", "¹²", "3²"]
# any text: every code point but surrogates (which `str.encode` refuses), plus lone surrogates
_TEXT = st.one_of(
    st.text(),
    st.text(st.characters(exclude_categories=())),
    st.sampled_from(_OTHER_DIGITS),
    st.text(st.sampled_from("0123456789 \t,;=\"'-+.:GMTSunNovDec²٣\r\n\x00\x7f")),
)
_BYTES = st.one_of(
    st.binary(),
    st.binary(max_size=9000),
    st.sampled_from([d.encode("utf-8") for d in _OTHER_DIGITS]),
    _TEXT.map(lambda text: text.encode("utf-8", "surrogatepass")),
)
VALUES = st.one_of(st.none(), _BYTES, _TEXT)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")
_NOW_S = st.one_of(st.none(), st.floats(-1e11, 1e11, allow_nan=False))


@_SETTINGS
@given(VALUES, _NOW_S)
@example("²", None)
@example(b"\xc2\xb2", None)
@example("9" * 8193, None)
def test_retry_after_is_none_or_a_bounded_wait(
    value: bytes | str | None, now_s: float | None
) -> None:
    """Retry-After: None, or a finite wait in [0, MAX_RETRY_AFTER_S] seconds."""
    wait_s = fields.retry_after_s(value, now_s=now_s)
    assert wait_s is None or (math.isfinite(wait_s) and 0 <= wait_s <= MAX_RETRY_AFTER_S)


@_SETTINGS
@given(VALUES)
@example("²")
@example("٣")
@example(b"18446744073709551616")
def test_content_length_is_none_or_a_count(value: bytes | str | None) -> None:
    """Content-Length: None, or a whole number of bytes, never negative."""
    length = fields.content_length(value)
    assert length is None or (type(length) is int and length >= 0)


@_SETTINGS
@given(VALUES)
@example("/é")
@example(b"/a\x00b")
def test_location_is_none_or_plain_ascii(value: bytes | str | None) -> None:
    """Location: None, or non-empty ASCII text of at most 4 KiB with no space or control."""
    where = fields.location(value)
    if where is not None:
        assert 0 < len(where) <= 4096
        assert where.isascii()
        assert not any(c <= " " or c == "\x7f" for c in where)


@_SETTINGS
@given(VALUES)
@example("text/plain; charset=utf-7")
@example("text/plain; charset=\x00")
def test_charset_is_none_or_a_codec_python_knows(value: bytes | str | None) -> None:
    """Content-Type's charset: None, or the name of a codec Python has."""
    name = fields.charset(value)
    assert name is None or codecs.lookup(name) is not None


@_SETTINGS
@given(VALUES)
@example("GZIP, Identity, x-Custom")
@example("gzip;q=1")
def test_content_encodings_are_none_or_lowercase_tokens(value: bytes | str | None) -> None:
    """Content-Encoding: None, or a list of lowercase tokens without `identity`."""
    codings = fields.content_encodings(value)
    if codings is not None:
        assert all(_TOKEN.fullmatch(coding) for coding in codings)
        assert "identity" not in codings


@_SETTINGS
@given(st.binary(), VALUES)
@example(b"\xff\xfeab\xd8", "text/plain; charset=utf-16")
@example(b"abc", "text/plain; charset=utf-16")
@example(b"\xff", "text/plain; charset=us-ascii")
def test_text_of_any_body_is_text(body: bytes, content_type: bytes | str | None) -> None:
    """A body as text, whatever its bytes and charset: a `str`, never an exception."""
    assert isinstance(fields.text_of(body, content_type), str)


# --- the grammar -----------------------------------------------------------------------------

_NOW = datetime(2015, 10, 21, 7, 28, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("value", "wait_s"),
    [
        ("120", 120.0),
        (b"0", 0.0),
        (" 7\t", 7.0),
        ("00042", 42.0),
        ("9" * 20, MAX_RETRY_AFTER_S),  # capped at a year
        ("9" * 40, MAX_RETRY_AFTER_S),  # however many digits (RFC 9111 1.2.2: the greatest)
        ("Wed, 21 Oct 2015 07:29:00 GMT", 60.0),  # IMF-fixdate
        ("Wednesday, 21-Oct-15 07:29:00 GMT", 60.0),  # obsolete RFC 850
        ("Wed Oct 21 07:29:00 2015", 60.0),  # obsolete asctime, in GMT
        ("Tue, 20 Oct 2015 07:28:00 GMT", 0.0),  # past: no wait
        ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_AFTER_S),
        ("Mon, 01 Jan 0001 00:00:00 GMT", 0.0),  # before the epoch: past all the same
    ],
)
def test_retry_after_reads_seconds_and_dates(value: str | bytes, wait_s: float) -> None:
    """delta-seconds and the three HTTP date formats, capped at a year, a past date 0."""
    assert fields.retry_after_s(value, now_s=_NOW) == pytest.approx(wait_s)


@pytest.mark.parametrize(
    "value",
    [None, "", " ", "²", "٣", "\uff11\uff12", "-1", "+5", "1.5", "5s", "1e3", "0x10", "5 5", "\x005",
     "Wed, 21 Oct 2015 07:29:00", "Mon, 32 Jan 2015 00:00:00 GMT", "a" * 9000],
)  # fmt: skip
def test_retry_after_refuses_what_is_not_its_grammar(value: str | None) -> None:
    """Other digits than ASCII, signs, fractions, units, a date without its zone or out of
    range, a value over 8 KiB: None."""
    assert fields.retry_after_s(value, now_s=_NOW) is None


@pytest.fixture
def new_york() -> Iterator[None]:
    """The process's local time zone is not GMT while the test runs."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_an_asctime_date_is_gmt_whatever_the_local_zone(new_york: None) -> None:
    """An asctime date carries no zone; HTTP dates are all GMT, not the machine's time."""
    assert fields.retry_after_s("Wed Oct 21 07:29:00 2015", now_s=_NOW) == pytest.approx(60.0)
    imf = format_datetime(datetime.fromtimestamp(_NOW + 60, UTC), usegmt=True)
    assert fields.retry_after_s(imf, now_s=_NOW) == pytest.approx(60.0)


@pytest.mark.parametrize(
    ("value", "length"),
    [("0", 0), ("123", 123), (b" 42\t", 42), ("18446744073709551615", 18446744073709551615)],
)
def test_content_length_reads_one_decimal_number(value: str | bytes, length: int) -> None:
    """One run of ASCII digits, white space around it allowed."""
    assert fields.content_length(value) == length


@pytest.mark.parametrize(
    "value", [None, "", "²", "٣", "-1", "+5", "1.0", "0x10", "1 2", "5,5", "1" * 21, "\x0b5"]
)
def test_content_length_refuses_anything_else(value: str | None) -> None:
    """Signs, fractions, lists, other digits, more than 20 digits, controls: None."""
    assert fields.content_length(value) is None


def test_location_keeps_a_uri_reference_and_refuses_the_rest() -> None:
    """Absolute or relative references as sent; spaces, controls, non-ASCII, 4 KiB+: None."""
    assert fields.location(" https://example.com/a?b=c#d ") == "https://example.com/a?b=c#d"
    assert fields.location(b"/v2/events") == "/v2/events"
    for refused in (None, "", "/a b", "/a\tb", "/\x00", "/é", b"/\xc3\xa9", "/" + "a" * 4096):
        assert fields.location(refused) is None


@pytest.mark.parametrize(
    ("value", "codec"),
    [
        ("application/json; charset=utf-8", "utf-8"),
        ('text/plain; charset="ISO-8859-1"', "latin-1"),
        ("text/plain;charset=UTF8", "utf-8"),
        ("text/plain; charset=us-ascii", "ascii"),
        ("text/plain; charset=utf-7", None),  # not in the well-known set
        ("text/plain; charset=x-unknown", None),
        ("text/plain", None),
        ("text/plain; charset=", None),
        (None, None),
    ],
)
def test_charset_reads_well_known_names_only(value: str | None, codec: str | None) -> None:
    """A charset of the well-known set, as Python's codec name; anything else None."""
    assert fields.charset(value) == codec


@pytest.mark.parametrize(
    ("value", "codings"),
    [
        (None, []),
        ("", []),
        ("gzip", ["gzip"]),
        ("GZIP, Deflate", ["gzip", "deflate"]),
        ("identity", []),
        ("gzip, identity, br", ["gzip", "br"]),
        ("gzip,,gzip", ["gzip", "gzip"]),
        ("gzip;q=1", None),
        ("gz ip", None),
        ("gzíp", None),
    ],
)
def test_content_encodings_in_the_order_applied(
    value: str | None, codings: list[str] | None
) -> None:
    """Codings in order, lowercased, `identity` dropped; a value not a token list is None."""
    assert fields.content_encodings(value) == codings


def test_text_of_uses_a_known_charset_else_utf8_replacing() -> None:
    """latin-1 when declared; UTF-8 otherwise; undecodable bytes replaced, never raised."""
    assert fields.text_of(b"\xe9chec", "text/plain; charset=iso-8859-1") == "échec"
    assert fields.text_of(b"\xe9chec", "text/plain; charset=x-unknown") == "\ufffdchec"
    assert fields.text_of("é".encode(), None) == "é"
