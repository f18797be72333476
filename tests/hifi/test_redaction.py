"""Masking of secrets: what is registered, what is masked, and that no cut leaves a piece of one."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from pathlib import Path
from urllib.parse import quote

import orjson
import pytest
import structlog

from hifi import redaction
from hifi.headers import HDR_ERROR, HDR_STATUS
from hifi.logging import LogFormat, configure_logging
from hifi.redaction import (
    ERROR_MAX_CHARS,
    MASK,
    MIN_FRAGMENT_CHARS,
    excerpt,
    header_secrets,
    mask,
    mask_event,
    register,
    short_error,
)
from retrier.dlq import DeadLetter
from retrier.status import RecentFailures
from retrier.tiers import RetryState

# An opaque 40-character token with the characters that escaping changes.
TOKEN = "q8Zr3VtN0xLwK2bYp5Hs/JdE7mGc+4UaFo1iXe=="
assert len(TOKEN) == 40


@pytest.fixture(autouse=True)
def empty_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no secret registered and leaves the process's registry as it was."""
    monkeypatch.setattr(redaction, "_secrets", set())
    monkeypatch.setattr(redaction, "_registry", None)


def pieces_of(secret: str, text: str) -> list[str]:
    """Every run of MIN_FRAGMENT_CHARS characters of `secret` found in `text`."""
    n = MIN_FRAGMENT_CHARS
    return [secret[i : i + n] for i in range(len(secret) - n + 1) if secret[i : i + n] in text]


def test_values_under_four_characters_are_not_registered() -> None:
    register(["abc", "", "   x  "])
    assert mask("abc and x stay") == "abc and x stay"
    register(["abcd"])
    assert mask("abc and abcd") == "abc and ***"


def test_header_secrets_are_the_value_and_its_words_of_eight_or_more() -> None:
    assert header_secrets(f"Bearer {TOKEN}") == [f"Bearer {TOKEN}", TOKEN]
    assert header_secrets("Basic short7") == ["Basic short7"]  # "Bearer", "short7" are words < 8
    register(header_secrets(f"Bearer {TOKEN}"))
    assert mask(f"got {TOKEN} alone") == "got *** alone"
    assert mask(f"got Bearer {TOKEN}!") == "got ***!"
    assert mask("Bearer is a word") == "Bearer is a word"


def test_a_short_header_word_is_masked_only_with_the_whole_value() -> None:
    register(header_secrets("Token short7"))
    assert mask("Token short7") == MASK
    assert mask("short7") == "short7"


def test_longest_secret_is_masked_first() -> None:
    register(["abcd", "abcdWXYZ"])
    assert mask("abcdWXYZ") == MASK  # not "***WXYZ"
    assert mask("abcd-abcdWXYZ") == "***-***"
    register(["pass"])
    assert mask("password passes") == "***word ***es"


def test_pieces_of_eight_or_more_characters_are_masked_anywhere() -> None:
    register([TOKEN])
    assert mask(f"ends with {TOKEN[:20]}") == "ends with ***"
    assert mask(f"{TOKEN[20:]} starts it") == "*** starts it"
    assert mask(f"in{TOKEN[5:13]}side") == "in***side"
    seven = TOKEN[:7]
    assert mask(f"only {seven} of it") == f"only {seven} of it"  # below the threshold


def test_every_piece_of_eight_is_masked_whatever_its_start_in_the_word() -> None:
    """The quick check that skips texts without a piece of a secret misses none: each run of 8
    characters of the token, from every position, is masked in a text of other characters."""
    register([TOKEN])
    for start in range(len(TOKEN) - MIN_FRAGMENT_CHARS + 1):
        piece = TOKEN[start : start + MIN_FRAGMENT_CHARS]
        assert mask(f"{{'note': '_{piece}_'}}") == "{'note': '_***_'}", start


def test_pieces_are_of_words_so_the_scheme_and_the_text_around_stay() -> None:
    """Only pieces of the token word are masked, not a "r T..." piece of "Bearer TOKEN"."""
    register(header_secrets(f"Bearer {TOKEN}"))
    assert mask(f"said: Bearer {TOKEN[:10]}") == "said: Bearer ***"
    assert mask(f"rejected near {TOKEN[:20]}") == "rejected near ***"
    assert mask(f"seven {TOKEN[:7]}!") == f"seven {TOKEN[:7]}!"


@pytest.mark.parametrize(
    ("form", "label"),
    [
        (quote(TOKEN, safe=""), "percent-encoded"),
        (re.sub("%..", lambda m: m[0].lower(), quote(TOKEN, safe="")), "lower-case hex"),
        (quote(quote(TOKEN, safe=""), safe=""), "percent-encoded twice"),
        (TOKEN.replace("/", "\\/"), "JSON with an escaped slash"),
        (json.dumps(TOKEN, ensure_ascii=True)[1:-1].replace("+", "\\u002b"), "JSON \\u escape"),
        (TOKEN.replace("/", "\\\\\\/"), "JSON in JSON"),
        (TOKEN.replace("/", "&#47;").replace("+", "&#x2B;"), "HTML character references"),
    ],
)
def test_escaped_forms_are_masked(form: str, label: str) -> None:
    register([TOKEN])
    assert form != TOKEN
    masked = mask(f'{{"error": "bad token {form}", "n": 1}}')
    assert masked == '{"error": "bad token ***", "n": 1}', label


def test_escaped_pieces_are_masked_and_other_escapes_left_alone() -> None:
    register([TOKEN])
    head = quote(TOKEN[:24], safe="")
    assert mask(f"Location: /login?next=%2Fhome&token={head}") == (
        "Location: /login?next=%2Fhome&token=***"
    )


def test_a_secret_with_a_quote_is_masked_in_json() -> None:
    secret = 'pa"ss\\word-1234'
    register([secret])
    assert mask(json.dumps({"password": secret})) == '{"password": "***"}'
    assert mask(orjson.dumps([{"error": secret}]).decode()) == '[{"error":"***"}]'


def test_white_space_inside_a_secret_is_masked_after_short_error_joins_it() -> None:
    secret = "correct  horse\tbattery"
    register([secret])
    assert short_error(f"rejected:\n{secret}\n") == "rejected: ***"
    assert mask(f"[{secret}]") == "[***]"


@pytest.mark.parametrize("offset", range(ERROR_MAX_CHARS - 50, ERROR_MAX_CHARS - 10))
def test_short_error_never_leaves_eight_characters_at_its_cut(offset: int) -> None:
    """Wherever the 200-character cut falls in the token, no 8 of its characters remain."""
    register(header_secrets(f"Bearer {TOKEN}"))
    text = "x" * offset + TOKEN + " and the rest of a long error body"
    error = short_error(text)
    assert len(error) <= ERROR_MAX_CHARS
    assert pieces_of(TOKEN, error) == []
    assert "x" * 50 in error


def test_short_error_masks_what_follows_a_secret_cut_mid_escape() -> None:
    register([TOKEN])
    for offset in range(180, 200):
        error = short_error("y" * offset + quote(TOKEN, safe=""))
        assert pieces_of(TOKEN, error) == [], offset
        assert pieces_of(quote(TOKEN, safe=""), error) == [], offset


def test_excerpt_masks_before_it_cuts() -> None:
    register([TOKEN])
    body = "z" * 110 + TOKEN + "z" * 5000
    cut = excerpt(body, 120)
    assert cut == "z" * 110 + MASK + "z" * 7
    assert body[:120].endswith(TOKEN[:10])  # what cutting first would have kept


def test_excerpt_of_a_long_text_is_quick() -> None:
    register([TOKEN])
    body = ("%2F" + "a" * 50) * 200_000  # 10 MB
    started = time.perf_counter()
    assert excerpt(body, 120).startswith("%2Faaa")
    assert short_error(body).endswith("...")
    assert time.perf_counter() - started < 1.0


def test_mask_event_masks_nested_values_and_objects() -> None:
    register([TOKEN])
    event = {
        "event": f"failed with {TOKEN}",
        "error": f"HTTP 401: {TOKEN[:12]}",
        "headers": {"authorization": f"Bearer {TOKEN}", "n": 3},
        "history": [{"error": quote(TOKEN, safe="")}, (TOKEN, 1)],
        "cause": ValueError(f"bad {TOKEN}"),
        "count": 2,
        "ok": True,
        "none": None,
    }
    masked = mask_event(None, "warning", event)
    assert masked["event"] == "failed with ***"
    assert masked["error"] == "HTTP 401: ***"
    assert masked["headers"] == {"authorization": "Bearer ***", "n": 3}
    assert masked["history"] == [{"error": MASK}, [MASK, 1]]
    assert masked["cause"] == "ValueError('bad ***')"
    assert (masked["count"], masked["ok"], masked["none"]) == (2, True, None)
    assert pieces_of(TOKEN, repr(masked)) == []


def test_mask_event_leaves_events_alone_with_nothing_registered() -> None:
    event = {"event": "x", "cause": ValueError("y")}
    assert mask_event(None, "info", dict(event)) == event


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_log_lines_are_masked_in_both_formats(
    log_format: LogFormat, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """structlog lines and stdlib library lines, with a traceback, show *** only."""
    register(header_secrets(f"Bearer {TOKEN}"))
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging(log_format, "DEBUG")
    try:
        log = structlog.get_logger("test")
        escaped = TOKEN.replace("/", "\\/")
        log.debug("echoed", body=f'{{"echo": "{escaped}"}}', cause=KeyError(TOKEN))
        try:
            raise RuntimeError(f"destination said {TOKEN[3:30]}")
        except RuntimeError:
            log.exception("failed")
            logging.getLogger("aiokafka").exception("library %s", quote(TOKEN, safe=""))
    finally:
        structlog.reset_defaults()
        root.handlers[:] = handlers
        root.setLevel(level)
    err = capsys.readouterr().err
    assert pieces_of(TOKEN, err) == []
    assert quote(TOKEN, safe="")[:12] not in err
    assert err.count(MASK) >= 5
    assert "Traceback" in err


def test_recent_failures_are_masked_when_stored() -> None:
    register([TOKEN])
    recent = RecentFailures()
    headers = {HDR_STATUS: b"503", HDR_ERROR: f"HTTP 503: token {TOKEN}\nnext line".encode()}
    recent.note("d", headers, RetryState(attempt=1, first_failure_ms=0, handoff_ms=0))
    (entry,) = recent.of("d", now_ms=1000)
    assert entry["error"] == "HTTP 503: token *** next line"
    assert entry["status"] == "503"


def test_dead_letter_describe_masks_each_part_before_cutting_it() -> None:
    register(['tok"en-' + TOKEN])
    secret = 'tok"en-' + TOKEN
    letter = DeadLetter(
        reason="http_4xx",
        status="401",
        error=f"HTTP 401: {secret}",
        origin="src/0/7",
        dead_ms=0,
        key=None,
        value=json.dumps({"id": "a", "pad": "p" * 40, "auth": secret}).encode(),
        headers=[],
        partition=0,
        offset=7,
    )
    line = letter.describe(now_ms=1000)
    assert 'error="HTTP 401: ***"' in line
    assert pieces_of(secret, line) == []
    assert pieces_of(TOKEN, line) == []
    assert "body=" in line


def test_many_secrets_mask_exactly_as_few_do() -> None:
    """With many secrets registered (a thousand tenants' keys) whole secrets and pieces are
    found by look-ups per position instead of one pattern of all; the text masked is the same."""
    keys = [f"tenant{i:04d}-key-{i * 7919:08x}/Zq+{i:03d}" for i in range(300)]
    register([value for key in keys for value in header_secrets(f"Bearer {key}")])
    register(["abcd", "abcdWXYZ", "Token short7"])
    registry = redaction._registry
    assert registry is not None
    assert registry.by_head is not None
    assert registry.anchor_set is not None
    texts = [
        f'HTTP 401: {{"echo":"Bearer {keys[17]}"}}',
        f"got {keys[3][:12]} then {keys[250][5:20]} and {quote(keys[99], safe='')}",
        f"abcd-abcdWXYZ Token short7 {keys[0].replace('/', chr(92) + '/')}",
        f"&#x74;enant0042 {keys[42][:7]} nothing else of it: tenant0042",
        "no secret at all, Bearer is a word",
    ]
    many = [mask(text) for text in texts]
    redaction._registry = dataclasses.replace(registry, by_head=None, anchor_set=None)  # as few
    assert [mask(text) for text in texts] == many
    assert many[0] == 'HTTP 401: {"echo":"***"}'
    assert keys[3][:12] not in many[1]
    assert many[2].startswith("***-*** *** ***")
    assert many[4] == texts[4]
