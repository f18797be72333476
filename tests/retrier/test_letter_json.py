"""The JSON a dead letter carries as the dashboard and the index read it: msgspec reads, orjson writes."""

from __future__ import annotations

from typing import Any

import orjson
from aiokafka import ConsumerRecord

from retrier.dashboard.letters import describe
from retrier.dlq.letter import decode_row, read_letter


def _letter(value: bytes, history: bytes) -> ConsumerRecord[Any, Any]:
    headers = [("hifi-reason", b"http_4xx"), ("hifi-history", history)]
    return ConsumerRecord("d.dlq", 0, 3, 1000, 0, None, value, None, 1, 2, headers)


def test_a_letters_body_is_pretty_printed_or_shown_as_it_came() -> None:
    """A JSON body is shown indented; one orjson cannot write back (an integer past 64 bits,
    nesting past its limit) or not JSON at all is shown as it came, never an error."""
    shown = describe(_letter(b'{"id":"e-1","n":[1,2]}', b"[]"))
    assert (
        shown["body"]
        == orjson.dumps({"id": "e-1", "n": [1, 2]}, option=orjson.OPT_INDENT_2).decode()
    )
    for odd in (b'{"n":18446744073709551616}', b"[" * 300 + b"]" * 300, b"{not json", b"[" * 5000):
        assert describe(_letter(odd, b"[]"))["body"] == odd.decode()


def test_an_unreadable_history_reads_as_no_failures() -> None:
    """A history that is not JSON, not a list, or too deep is no failures on the page and its
    own text in the index's search; a list shows its dict entries only."""
    for odd in (b"nope", b'{"a":1}', b"[" * 5000):
        assert describe(_letter(b"{}", odd))["history"] == []
        searched = f"hifi-history={odd.decode()}"[:1024].encode()
        assert searched in read_letter(_letter(b"{}", odd)).text
    good = orjson.dumps([{"at_ms": 5, "attempt": 1, "status": 503, "error": "HTTP 503"}, 7])
    (entry,) = describe(_letter(b"{}", good))["history"]
    assert (entry["at_ms"], entry["attempt"], entry["status"]) == (5, 1, 503)


def test_an_index_row_reads_back_as_written() -> None:
    """The row the index keeps of a letter decodes to its id, origin, status, error, excerpt."""
    letter = read_letter(_letter(b'{"id":"e-1"}', b"[]"))
    event_id, origin, status, _error, excerpt = decode_row(letter.row)
    assert (event_id, origin, status) == ("", "d.dlq/0/3", letter.status)
    assert excerpt.startswith('{"id"')
