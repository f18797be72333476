"""The accepted facts of ingest: counted by the auditor from ingest to the destination; no 2xx without them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path

import httpx
import orjson
import pytest

from auditor.daemon import Auditor
from config.streams import hash_token
from connector import Connector
from devstack.destination import TestDestination
from hifi.audit_accepted import AcceptedTrail, Seen
from hifi.errors import BrokerRefused
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.auditor.support import audited_destination, rows_of, running, settled
from tests.ingest.support import TOKEN, auth, make_topic, serving, streams_dir, url, write_stream

pytestmark = [pytest.mark.integration]


async def test_the_auditor_counts_what_ingest_accepted_and_nothing_missing(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    tmp_path: Path,
    unique: str,
) -> None:
    """Ingest → connector → destination with an auditor: the events ingest answered accepted
    (batched and streamed, with and without a time of their own) are counted accepted and
    entered, all delivered, none missing once the minutes are final; the audit topic is
    created by ingest."""
    topic = await make_topic(kafka_settings, partitions=2)
    audit_topic = f"{unique}.audit"
    directory = streams_dir(tmp_path, topic)
    now_ms = int(time.time() * 1000)
    batch = [{"id": f"b-{n}", "event_time": now_ms} for n in range(20)]
    batch += [{"seq": n} for n in range(5)] + [{"id": ""}]  # 5 ids generated, 1 rejected
    lines = b"".join(orjson.dumps({"id": f"s-{n}", "event_time": now_ms}) + b"\n" for n in range(7))
    async with (
        serving(directory, kafka_settings, audit_topic=audit_topic) as service,
        httpx.AsyncClient(timeout=30) as client,
    ):
        assert audit_topic in await kafka_admin.list_topics(kafka_settings)
        response = await client.post(
            url(service), json=batch, headers={"content-type": "application/json", **auth()}
        )
        assert response.status_code == 207, response.text
        streamed = await client.post(
            url(service, suffix=":stream"),
            content=lines,
            headers={"content-type": "application/x-ndjson", **auth()},
        )
        assert streamed.status_code == 200
        assert orjson.loads(streamed.text.splitlines()[-1])["accepted"] == 7
    accepted = 25 + 7
    dest = audited_destination(catalog_dir, unique, destination.url, topic)
    connector = Connector(dest, kafka_settings, until_idle_s=1.5, audit_topic=audit_topic)
    await asyncio.wait_for(connector.run(), 90)
    assert len(destination.delivered_ids()) == accepted
    auditor = Auditor(
        [dest],
        kafka_settings,
        archive_dir=tmp_path / "archive",
        roll_s=0.5,
        topic=audit_topic,
        group_id=f"{unique}.auditor",
    )
    async with running(auditor):
        await settled(auditor, dest.name, accepted)
        rows = [r for r in rows_of(auditor, dest.name) if r["final"]]
    figures = ("entered", "accepted", "delivered", "missing")
    totals = tuple(sum(r[k] for r in rows) for k in figures)
    assert totals == (accepted, accepted, accepted, 0)


class _RefusingTrail:
    """What the accepted trail does when the broker refuses its facts: raise a hifi error."""

    async def write(
        self, events: Sequence[Seen], *, accepted_ms: int | None = None
    ) -> Awaitable[None]:
        raise BrokerRefused("kafka: the audit topic refused the accepted facts (a fake)")


class _SilentTrail:
    """Facts queued, never acknowledged."""

    async def write(
        self, events: Sequence[Seen], *, accepted_ms: int | None = None
    ) -> Awaitable[None]:
        return asyncio.get_running_loop().create_future()


@pytest.mark.parametrize("trail", [_RefusingTrail, _SilentTrail])
async def test_events_whose_accepted_facts_are_not_acknowledged_are_503(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
    trail: type[_RefusingTrail | _SilentTrail],
) -> None:
    """The events are acknowledged, their accepted facts are not (refused, or not within
    ack_timeout_s): a batch is 503 with Retry-After, never 2xx; a stream ends with an error
    line and no result line."""
    monkeypatch.setattr(AcceptedTrail, "write", trail.write)
    topic = await make_topic(kafka_settings)
    directory = streams_dir(tmp_path, topic)
    async with (
        serving(directory, kafka_settings, audit_topic=f"{unique}.audit", ack_timeout_s=1.0) as s,
        httpx.AsyncClient(timeout=30) as client,
    ):
        started = time.monotonic()
        response = await client.post(url(s), json=[{"id": "a"}, {"id": "b"}], headers={**auth()})
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "2"
        assert time.monotonic() - started < 5
        streamed = await client.post(
            url(s, suffix=":stream"),
            content=b'{"id": "c"}\n',
            headers={"content-type": "application/x-ndjson", **auth()},
        )
    (last,) = [orjson.loads(line) for line in streamed.text.splitlines()]
    assert last["end"] is True
    assert last["accepted"] == 0
    assert "error" in last


async def test_a_stream_with_audit_false_writes_no_accepted_facts(
    kafka_settings: KafkaSettings, tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`audit = false` in every stream file: no trail, no audit topic created, a 2xx as before."""
    monkeypatch.setattr(AcceptedTrail, "write", _RefusingTrail.write)
    topic = await make_topic(kafka_settings)
    directory = tmp_path / "streams"
    directory.mkdir()
    write_stream(directory, "clicks", topic=topic, tokens_sha256=[hash_token(TOKEN)], audit=False)
    audit_topic = f"{unique}.audit"
    async with (
        serving(directory, kafka_settings, audit_topic=audit_topic) as service,
        httpx.AsyncClient(timeout=30) as client,
    ):
        assert service.audit_topic is None
        response = await client.post(url(service), json=[{"id": "a"}], headers=auth())
        assert response.status_code == 200, response.text
    assert audit_topic not in await kafka_admin.list_topics(kafka_settings)
