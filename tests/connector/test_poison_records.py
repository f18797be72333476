"""Odd records on every partition: each is delivered unaltered or dead-lettered with a reason."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest

from devstack.destination import TestDestination
from hifi.headers import header_map
from hifi.kafka import admin as kafka_admin
from hifi.kafka.clients import Record
from hifi.kafka.producing import open_producer
from hifi.kafka.reading import committed_offsets, read_topic
from hifi.kafka.settings import KafkaSettings
from tests.helpers import make_destination, start_daemon, wait_exit

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 3
HUGE_BYTES = 17 * 1024 * 1024  # over the 16 MiB a dead letter may have


def _odd_records(partition: int) -> list[tuple[str, bytes | None, list[tuple[str, bytes]]]]:
    """(name, value, headers) of every kind of odd record, with an id unique to the partition."""
    p = partition
    deep = b'{"id":"deep-%d","x":' % p + b"[" * 1500 + b"]" * 1500 + b"}"
    return [
        ("latin1", b'{"id":"latin1-%d","name":"caf\xe9"}' % p, []),
        ("utf16", '{"id":"utf16"}'.encode("utf-16"), []),
        ("array", b"[1,2,3]", []),
        ("string", b'"just a string"', []),
        ("number", b"42", []),
        ("null", b"null", []),
        ("tombstone", None, []),
        ("empty", b"", []),
        ("truncated", b'{"id":"cut-%d","a":' % p, []),
        ("deep", deep, []),
        ("too_large_for_batch", b'{"id":"big-%d","p":"' % p + b"x" * 40_000 + b'"}', []),
        ("numeric_id", b'{"id":%d,"event_time":1700000000000}' % (9000 + p), []),
        ("huge_int_id", b'{"id":' + b"9" * 400 + b"}", []),
        ("bool_id", b'{"id":true,"event_time":"yesterday"}', []),
        ("far_future", b'{"id":"future-%d","event_time":99999999999999999}' % p, []),
        ("negative_time", b'{"id":"neg-%d","event_time":-5}' % p, []),
        ("pretty", b'{\n  "id": "pretty-%d",\n  "n": 1\n}' % p, []),
        (
            "forged",
            b'{"id":"forged-%d"}' % p,
            [
                ("hifi-attempt", b"99"),
                ("hifi-origin", b"nowhere/0/0"),
                ("hifi-history", b"not json"),
                ("hifi-reason", b"expired"),
            ],
        ),
        ("huge_header", b'{"id":"hh-%d"}' % p, [("trace", b"t" * 500_000)]),
        ("ok", b'{"id":"ok-%d","event_time":1700000000000}' % p, []),
    ]


async def test_odd_records_never_stop_a_partition(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """Every odd record ends delivered byte for byte or in the DLQ with a reason; the connector
    exits 0 only when idle, and every partition's committed offset reaches its end."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=PARTITIONS)
    sent: dict[str, tuple[int, bytes | None]] = {}  # origin -> (partition, value)
    async with open_producer(kafka_settings, max_request_size=HUGE_BYTES + 1024 * 1024) as out:
        for partition in range(PARTITIONS):
            for kind, value, headers in _odd_records(partition):
                records: list[Record] = [(unique, kind.encode(), value, headers)]
                (written,) = await out.send_all(records, partition=partition)
                sent[f"{unique}/{partition}/{written.offset}"] = (partition, value)
        (huge,) = await out.send_all(
            [(unique, b"k", b"h" * HUGE_BYTES, [("h", b"v")])], partition=0
        )
    dest = make_destination(catalog_dir, unique, destination.url, unique, max_batch_bytes=32_768)
    args = ["--dest", unique, "--catalog", str(catalog_dir), "--metrics-port", "0"]
    process = start_daemon(
        "connector",
        [*args, "--until-idle", "3"],
        bootstrap=kafka_settings.bootstrap,
        log_path=tmp_path / "connector.log",
    )
    processes.append(process)
    assert await wait_exit(process, 180) == 0, (tmp_path / "connector.log").read_text()[-3000:]
    log_lines = [
        orjson.loads(line) for line in (tmp_path / "connector.log").read_text().splitlines()
    ]
    assert log_lines
    assert all(line.get("dest") == unique for line in log_lines)  # every line says whose work
    assert any(line["event"] == "malformed_dead_lettered" for line in log_lines)

    bodies = b"\x00".join(r.body for r in destination.requests if r.status < 300)
    dead = await read_topic(kafka_settings, dest.dlq_topic, timeout_s=60)
    dead_by_origin = {header_map(r.headers)["hifi-origin"].decode(): r for r in dead}
    for origin, (_, value) in sent.items():
        if value and value in bodies:  # delivered unaltered
            continue
        assert origin in dead_by_origin, f"{origin} {value[:60] if value else value!r}: lost"
        reason = header_map(dead_by_origin[origin].headers)["hifi-reason"]
        assert reason in {b"malformed", b"too_large"}, (origin, reason)
        kept = dead_by_origin[origin].value
        assert kept == (value if value is not None else kept)  # a letter keeps the record
    letter = dead_by_origin[f"{unique}/0/{huge.offset}"]
    found = header_map(letter.headers)
    assert found["hifi-reason"] == b"too_large"
    assert found["hifi-value-bytes"] == str(HUGE_BYTES).encode()
    assert letter.value == b"h" * 64 * 1024
    assert (letter.key, found["h"]) == (b"k", b"v")

    forged = [r for r in dead if b"forged" in (r.value or b"")]
    assert forged == []  # forged hifi-* headers change nothing: the event is delivered
    assert b'{"id":"forged-0"}' in bodies
    committed = await committed_offsets(kafka_settings, dest.connector_group, unique)
    ends = {
        p: 1 + max(int(o.rsplit("/", 1)[1]) for o in sent if f"/{p}/" in o)
        for p in range(PARTITIONS)
    }
    ends[0] = huge.offset + 1
    assert committed == ends
    assert all(b'{"id":"ok-%d"' % p in bodies for p in range(PARTITIONS))
