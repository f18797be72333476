"""Tests of the scriptable HTTP destination over real loopback sockets, and of its CLI process."""

from __future__ import annotations

import asyncio
import gzip
import json
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest

from devstack.destination import TestDestination
from devstack.destination_cli import parse_fault
from devstack.destination_script import Reply, Script

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 30.0


@pytest.fixture
async def destination() -> AsyncIterator[TestDestination]:
    """A fresh destination per test, since each test scripts it differently."""
    async with TestDestination() as dest:
        yield dest


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """A pooled client like the connector's."""
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
        yield http


def events(*ids: str) -> list[dict[str, object]]:
    """A batch of events with the given ids."""
    return [{"id": event_id, "event_time": 1_000 + n} for n, event_id in enumerate(ids)]


async def post(client: httpx.AsyncClient, url: str, *ids: str) -> httpx.Response:
    """Post a JSON-array batch of events with these ids."""
    return await client.post(url, json=events(*ids))


async def test_json_array_body_is_parsed_and_answered_accepted(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """A JSON array body is recorded with its events, ids, headers and a 200 {"accepted": N}."""
    response = await client.post(destination.url, json=events("a", "b"), headers={"X-Key": "k"})
    assert response.status_code == 200
    assert response.json() == {"accepted": 2}
    [request] = destination.requests
    assert request.method == "POST"
    assert request.path == "/v1/events"
    assert request.headers["x-key"] == "k"
    assert request.events == events("a", "b")
    assert orjson.loads(request.body) == events("a", "b")
    assert request.ids == ("a", "b")
    assert request.status == 200
    assert request.received_ms > 0
    assert destination.delivered_ids() == ["a", "b"]


async def test_ndjson_body_is_parsed(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """An application/x-ndjson body gives one event per non-empty line."""
    body = b"\n".join(orjson.dumps(event) for event in events("a", "b")) + b"\n"
    response = await client.post(
        destination.url, content=body, headers={"Content-Type": "application/x-ndjson"}
    )
    assert response.status_code == 200
    assert destination.requests[0].events == events("a", "b")


async def test_gzip_body_is_decoded(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """A Content-Encoding: gzip body is recorded and parsed after decoding."""
    raw = orjson.dumps(events("a", "b"))
    response = await client.post(
        destination.url,
        content=gzip.compress(raw),
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
    )
    assert response.status_code == 200
    assert destination.requests[0].body == raw
    assert destination.delivered_ids() == ["a", "b"]


async def test_unparseable_body_has_no_events(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """A body that is not JSON, nor a JSON array of objects or one object, records no events
    and delivers nothing."""
    for body in (b"not json", b"[1, 2]", b'"a"'):
        response = await client.post(destination.url, content=body)
        assert response.status_code == 200
    assert [request.events for request in destination.requests] == [[], [], []]
    assert destination.delivered_ids() == []


async def test_an_object_body_is_one_event(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """A single-event request (`format = "single"`): the object is the event."""
    response = await client.post(destination.url, content=b'{"id": "a", "event_time": 5}')
    assert response.status_code == 200
    assert destination.delivered_ids() == ["a"]


async def test_large_body_is_received_whole(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """A body of about 20 MB is read completely and all its events are delivered."""
    batch = [{"id": str(n), "pad": "x" * 10_000} for n in range(2_000)]
    response = await client.post(destination.url, json=batch)
    assert response.status_code == 200
    assert response.json() == {"accepted": 2_000}
    assert destination.delivered_ids() == [str(n) for n in range(2_000)]


async def test_script_replies_in_order_then_default(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """Scripted replies answer the next requests one each, with Retry-After, then 200 resumes."""
    destination.script(Reply(503), Reply(429, retry_after="2"), Reply(500))
    responses = [await post(client, destination.url, str(n)) for n in range(4)]
    assert [response.status_code for response in responses] == [503, 429, 500, 200]
    assert responses[1].headers["retry-after"] == "2"
    assert "retry-after" not in responses[0].headers
    assert "error" in responses[0].json()
    assert [request.status for request in destination.requests] == [503, 429, 500, 200]
    assert destination.delivered_ids() == ["3"]


async def test_drop_closes_connection_without_answer(destination: TestDestination) -> None:
    """A drop makes the client see a disconnect, records status 0, and serving goes on."""
    destination.script(Reply(drop=True))
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            await post(http, destination.url, "a")
        assert (await post(http, destination.url, "b")).status_code == 200
    assert [request.status for request in destination.requests] == [0, 200]
    assert destination.delivered_ids() == ["b"]


async def test_delay_postpones_answer(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """A reply with delay_s is not answered before delay_s has passed."""
    destination.script(Reply(delay_s=0.5))
    started = time.monotonic()
    response = await post(client, destination.url, "a")
    assert response.status_code == 200
    assert time.monotonic() - started >= 0.5


async def test_going_down_cuts_off_a_delayed_answer(destination: TestDestination) -> None:
    """A delayed answer cut off by set_down(True) is recorded as status 0 and not delivered."""
    destination.script(Reply(delay_s=600))
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
        pending = asyncio.create_task(post(http, destination.url, "a"))
        assert await destination.wait_for_requests(1, TIMEOUT_S)
        await destination.set_down(True)
        with pytest.raises(httpx.TransportError):
            await pending
    assert [request.status for request in destination.requests] == [0]
    assert destination.delivered_ids() == []


async def test_reject_ids_rejects_only_requests_with_those_ids(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """Requests containing a rejected id get its status, ahead of the script, which waits."""
    destination.reject_ids(["bad"])
    destination.reject_ids(["gone"], status=410)
    destination.script(Reply(503))
    assert (await post(client, destination.url, "a", "bad")).status_code == 400
    assert (await post(client, destination.url, "gone")).status_code == 410
    assert (await post(client, destination.url, "b")).status_code == 503
    assert (await post(client, destination.url, "c")).status_code == 200
    assert destination.delivered_ids() == ["c"]


async def test_reject_poison_rejects_requests_with_a_poisoned_event(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """A request containing an event whose poison field is true gets 400; others are accepted."""
    destination.reject_poison("poison")
    poisoned = [{"id": "a"}, {"id": "b", "poison": True}]
    assert (await client.post(destination.url, json=poisoned)).status_code == 400
    assert (await client.post(destination.url, json=[{"id": "c", "poison": 1}])).status_code == 200
    assert destination.delivered_ids() == ["c"]


async def test_random_faults_hit_about_the_ratio(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """With set_faults(0.25) roughly a quarter of 200 requests get one of the fault replies."""
    destination.set_faults(0.25, [Reply(503), Reply(429, retry_after="1")], seed=7)
    statuses = [(await post(client, destination.url, str(n))).status_code for n in range(200)]
    faults = [status for status in statuses if status != 200]
    assert 20 <= len(faults) <= 90
    assert set(faults) == {503, 429}


def test_random_faults_repeat_with_the_same_seed() -> None:
    """The same seed draws the same fault sequence."""

    def draw(seed: int) -> list[int]:
        script = Script()
        script.set_faults(0.3, [Reply(503), Reply(500)], seed=seed)
        return [script.choose((), []).reply.status for _ in range(100)]

    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


async def test_set_down_refuses_then_serves_on_same_port(destination: TestDestination) -> None:
    """Down refuses connections; up listens again on the same port and serves."""
    port = destination.port
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
        assert (await post(http, destination.url, "a")).status_code == 200
    await destination.set_down(True)
    assert destination.is_down
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
        with pytest.raises(httpx.ConnectError):
            await post(http, destination.url, "b")
    await destination.set_down(False)
    assert destination.port == port
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
        assert (await post(http, destination.url, "c")).status_code == 200
    assert destination.delivered_ids() == ["a", "c"]


async def test_wait_for_ids(destination: TestDestination, client: httpx.AsyncClient) -> None:
    """wait_for_ids wakes once all ids were delivered, and is False for ids never delivered."""
    destination.reject_ids(["rejected"])
    waiting = asyncio.create_task(destination.wait_for_ids({"a", "b"}, TIMEOUT_S))
    await post(client, destination.url, "a")
    assert not waiting.done()
    await post(client, destination.url, "b", "a")
    assert await waiting
    assert await destination.wait_for_ids(["a"], 0.0)
    await post(client, destination.url, "rejected")
    assert not await destination.wait_for_ids(["rejected"], 0.2)
    assert not await destination.wait_for_ids(["never-sent"], 0.2)


async def test_wait_for_requests_counts_failed_requests(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """wait_for_requests counts every request read, whatever it was answered."""
    destination.script(Reply(500))
    waiting = asyncio.create_task(destination.wait_for_requests(2, TIMEOUT_S))
    await post(client, destination.url, "a")
    await post(client, destination.url, "b")
    assert await waiting
    assert not await destination.wait_for_requests(3, 0.2)


async def test_keep_alive_reuses_one_connection(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """Many sequential requests from a pooled client share one TCP connection."""
    for n in range(50):
        assert (await post(client, destination.url, str(n))).status_code == 200
    assert destination.connections_opened == 1
    assert len(destination.requests) == 50


async def test_deliveries_keep_duplicates_and_clear_forgets(
    destination: TestDestination, client: httpx.AsyncClient
) -> None:
    """Deliveries keep duplicates in order with their event times, and clear() forgets them."""
    await post(client, destination.url, "a", "b")
    await post(client, destination.url, "a")
    assert destination.delivered_ids() == ["a", "b", "a"]
    assert [d.event_time for d in destination.deliveries()] == [1_000, 1_001, 1_000]
    destination.clear()
    assert destination.requests == []
    assert destination.delivered_ids() == []


async def test_record_bodies_off_keeps_ids_only(client: httpx.AsyncClient) -> None:
    """With record_bodies=False requests keep ids but no body or events; deliveries stay."""
    async with TestDestination(record_bodies=False, id_field="key") as dest:
        response = await client.post(dest.url, json=[{"key": 1}, {"key": 2}])
        assert response.status_code == 200
        [request] = dest.requests
        assert (request.body, request.events, request.ids) == (b"", [], ("1", "2"))
        assert dest.delivered_ids() == ["1", "2"]


BODIES: list[tuple[bytes, str]] = [
    (b'[{"id": "a", "event_time": 5, "x": {"y": [1]}}, {"id": 7}]', "application/json"),
    (b'[{"id": "a"}, {"x": 1}, 3, {"id": "b", "event_time": "2026"}]', "application/json"),
    (b'{"id": "a"}', "application/json"),
    (b"not json", "application/json"),
    (b'{"id": "n1", "event_time": 1}\n{"id": "n2"}\n', "application/x-ndjson"),
]


async def test_record_bodies_off_reads_receipts_as_a_whole_parse_would(
    client: httpx.AsyncClient,
) -> None:
    """Without bodies kept, events are read for their ids and times alone; every body gets the
    answer, request ids and receipts it gets when its events are parsed whole (extra fields,
    events without an id or not objects, a body that is not an array, not JSON, NDJSON)."""
    async with (
        TestDestination(record_bodies=False) as fast,
        TestDestination(record_bodies=True) as whole,
    ):
        for body, content_type in BODIES:
            answers = [
                await client.post(dest.url, content=body, headers={"content-type": content_type})
                for dest in (fast, whole)
            ]
            assert answers[0].json() == answers[1].json()
        assert [r.ids for r in fast.requests] == [r.ids for r in whole.requests]
        assert fast.deliveries() != []
        received = [(d.id, d.event_time) for d in fast.deliveries()]
        assert received == [(d.id, d.event_time) for d in whole.deliveries()]
        assert received[:2] == [("a", 5), ("7", None)]
        # the first body was read for its receipts alone; the others fell back to a whole parse
        read = [fast._receipts.read(body, content_type) for body, content_type in BODIES]
        assert [r is not None for r in read] == [True, False, False, False, False]


async def test_on_delivery_hook_sees_each_accepted_request(client: httpx.AsyncClient) -> None:
    """The on_delivery hook gets the deliveries of each 2xx request, even with no history kept."""
    seen: list[str] = []
    async with TestDestination(
        keep_history=False, on_delivery=lambda batch: seen.extend(d.id for d in batch)
    ) as dest:
        dest.script(Reply(503))
        await post(client, dest.url, "a")
        await post(client, dest.url, "b", "c")
        assert dest.requests == []
    assert seen == ["b", "c"]


@pytest.mark.parametrize(
    ("spec", "reply"),
    [
        ("503", Reply(503)),
        ("429:retry_after=1", Reply(429, retry_after="1")),
        ("drop", Reply(drop=True)),
        ("timeout", Reply(delay_s=30.0)),
        ("timeout:delay_s=5", Reply(delay_s=5.0)),
        ("500:delay_s=0.5,retry_after=3", Reply(500, retry_after="3", delay_s=0.5)),
    ],
)
def test_parse_fault(spec: str, reply: Reply) -> None:
    """Each --fault spelling parses to the matching reply."""
    assert parse_fault(spec) == reply


@pytest.mark.parametrize("spec", ["bogus", "99", "503:colour=red", "timeout:delay_s=-1"])
def test_parse_fault_rejects_bad_specs(spec: str) -> None:
    """A malformed --fault is a ValueError naming the spec."""
    with pytest.raises(ValueError, match="fault"):
        parse_fault(spec)


@pytest.mark.integration
@pytest.mark.parametrize(
    "flags",
    [["--fault", "bogus", "--fault-ratio", "0.1"], ["--fault-ratio", "0.1"], ["--nope"]],
)
def test_cli_bad_flags_exit_2_with_one_line(flags: list[str]) -> None:
    """Bad flags make the CLI exit 2 with a one-line error and no traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "devstack.destination_cli", *flags],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "error" in result.stderr


@pytest.mark.integration
async def test_cli_serves_and_records_deliveries_until_sigterm(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    """The CLI prints its URL, appends accepted events to the deliveries file, and exits 0."""
    deliveries = tmp_path / "deliveries.ndjson"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "devstack.destination_cli",
        "--port",
        "0",
        "--reject-id",
        "bad",
        "--poison-field",
        "poison",
        "--deliveries-file",
        str(deliveries),
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), TIMEOUT_S)).decode()
        assert line.startswith("destination listening on http://127.0.0.1:")
        url = line.split()[-1]
        assert (await post(client, url, "a", "b")).status_code == 200
        assert (await post(client, url, "c", "bad")).status_code == 400
        assert (await client.post(url, json=[{"id": "d", "poison": True}])).status_code == 400
        assert (await client.post(url, json=[{"id": "e"}])).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), TIMEOUT_S) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    lines = [json.loads(line) for line in deliveries.read_text().splitlines()]
    assert [(line["id"], line["event_time"]) for line in lines] == [
        ("a", 1_000),
        ("b", 1_001),
        ("e", None),
    ]
    assert all(isinstance(line["received_ms"], int) for line in lines)
