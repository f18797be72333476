"""A connector cut from Kafka past its session timeout, by a proxy that holds every byte (as a
firewall dropping packets): it stays up, is not ready, lets its partitions go once a session
passed without an answer from the group (no request after that), and when the network heals
it joins again and delivers every event, none lost."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from chaos.harness import stage
from devstack.ports import free_port
from hifi.kafka import admin as kafka_admin

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSION_S = 6  # HIFI_KAFKA_SESSION_TIMEOUT_S: the least it takes
EVENTS = 2000


async def _readyz(client: httpx.AsyncClient, port: int) -> httpx.Response:
    return await client.get(f"http://127.0.0.1:{port}/readyz")


async def _until(check: object, timeout_s: float, what: str) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def test_a_connector_cut_from_kafka_waits_lets_go_and_resumes_losing_nothing(
    tmp_path: Path,
) -> None:
    async with stage(tmp_path) as scene, httpx.AsyncClient() as client:
        name, topic = "cut", "cut.events"
        scene.write_destination(name, topic, max_batch_records=10)
        await kafka_admin.ensure_topics(scene.settings, [topic], partitions=2)
        scene.destination.set_capacity(1000, service_s=0.3)  # requests in flight at the cut
        port = free_port()
        connector = scene.daemon(
            "connector",
            name,
            env={"HIFI_KAFKA_SESSION_TIMEOUT_S": str(SESSION_S)},
            metrics_port=port,
        )
        await connector.start()
        try:
            assert await connector.ready(60)
            ids = [f"e-{n}" for n in range(EVENTS)]
            await scene.produce(topic, [json.dumps({"id": i}).encode() for i in ids])
            assert await scene.destination.wait_for_requests(3, 30)
            scene.proxy.hold()
            cut_at = time.monotonic()

            async def not_ready() -> bool:
                return (await _readyz(client, port)).status_code == 503

            # not ready once the coordinator was silent half a session since its last answer,
            # seen at the worker's next turn: within a session, and 2 s more for a busy machine
            # (a clean-clone `make test` once took 6.2 s)
            await _until(not_ready, SESSION_S + 2, "the connector to say it is not ready")
            answer = await _readyz(client, port)
            assert "kafka: waiting" in answer.text, answer.text
            metrics = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
            assert 'hifi_kafka_reachable{component="connector"} 0.0' in metrics

            # the behaviour: the session runs out (SESSION_S) while Kafka is cut
            await asyncio.sleep(max(0.0, cut_at + SESSION_S + 1.5 - time.monotonic()))
            sent_once_lost = scene.destination.request_count
            await asyncio.sleep(3)  # the behaviour: nothing is sent during these 3 s
            assert scene.destination.request_count == sent_once_lost  # let go: sends nothing
            log = (tmp_path / f"connector-{name}.log").read_text()
            assert '"partitions_lost"' in log
            assert scene.destination.request_count < EVENTS // 10  # not all of it before the cut

            scene.proxy.release()
            assert await scene.destination.wait_for_ids(ids, 90), "every event, once healed"

            async def ready() -> bool:
                return (await _readyz(client, port)).status_code == 200

            await _until(ready, 60, "the connector to be ready again")
            assert connector.restarts == 0  # it never exited
        finally:
            code = await connector.stop()
        assert code == 0
