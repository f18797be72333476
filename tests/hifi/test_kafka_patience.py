"""A daemon's writes wait for Kafka (`hifi.kafka.reach`, `Producer` with a reach), against a fake
aiokafka producer: what it raises is what aiokafka raises when no broker answers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import errors as aiokafka_errors
from aiokafka.structs import RecordMetadata

from hifi.errors import BrokerUnavailable, UnknownTopic
from hifi.kafka import reach as reach_module
from hifi.kafka.clients import Record
from hifi.kafka.producing import Producer
from hifi.kafka.reach import KafkaReach, backoff_s
from hifi.kafka.settings import KafkaSettings
from tests.helpers import until

SETTINGS = KafkaSettings(bootstrap="broker.test:9092")
RECORDS: list[Record] = [("t", None, b"v", [])]


class _Metadata:
    def __init__(self, answers: bool) -> None:
        self.answers = answers

    async def fetch_all_metadata(self) -> object:
        if not self.answers:
            raise aiokafka_errors.KafkaError(
                "Unable to get cluster metadata over all known brokers"
            )
        return object()


class _Client:
    """aiokafka's producer: `send` queues and returns a future of the broker's acknowledgement."""

    def __init__(self, *, unacknowledged: int = 0, no_metadata: int = 0, answers: bool = False):
        self.unacknowledged = unacknowledged  # this many writes time out (the sender gave up)
        self.no_metadata = no_metadata  # this many sends find no topic metadata in time
        self.client = _Metadata(answers)
        self.sends = 0

    async def send(self, topic: str, **_: Any) -> asyncio.Future[RecordMetadata]:
        self.sends += 1
        if self.no_metadata:
            self.no_metadata -= 1
            raise aiokafka_errors.UnknownTopicOrPartitionError()
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        if self.unacknowledged:
            self.unacknowledged -= 1
            future.set_exception(aiokafka_errors.KafkaTimeoutError())
        else:
            future.set_result(RecordMetadata(topic, 0, None, self.sends, 0, 0, 0))
        return future


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reach_module, "backoff_s", lambda attempt: 0.001)


def _producer(client: _Client, reach: KafkaReach | None = None) -> Producer:
    return Producer(client, SETTINGS, reach)


async def test_without_a_reach_a_write_kafka_does_not_answer_is_raised() -> None:
    with pytest.raises(BrokerUnavailable, match=r"^kafka broker.test:9092: produce to t"):
        await _producer(_Client(unacknowledged=1)).send_all(RECORDS)


async def test_with_a_reach_a_write_is_sent_again_until_acknowledged() -> None:
    client, reach = _Client(unacknowledged=3), KafkaReach()
    written = await _producer(client, reach).send_all(RECORDS)
    assert [m.offset for m in written] == [4]  # the fourth send was acknowledged
    assert reach.reachable


async def test_while_a_write_waits_the_daemon_is_not_ready_and_names_it() -> None:
    client, reach = _Client(unacknowledged=10**6), KafkaReach()
    waiting = asyncio.create_task(_producer(client, reach).send_all(RECORDS))
    assert await until(lambda: not reach.reachable, 30, interval_s=0.001)
    state = reach.readiness()
    assert not state.ready
    assert state.detail.startswith("kafka: waiting: produce for 0 s: kafka broker.test:9092")
    client.unacknowledged = 0
    await asyncio.wait_for(waiting, 5)
    assert reach.readiness().ready


async def test_a_topic_without_metadata_because_no_broker_answers_is_unavailability() -> None:
    """aiokafka raises UnknownTopicOrPartitionError when the topic's metadata did not come in
    time, also when the topic exists and only the cluster is unreachable."""
    with pytest.raises(BrokerUnavailable, match="no answer from the cluster"):
        await _producer(_Client(no_metadata=1, answers=False)).send_all(RECORDS)
    client, reach = _Client(no_metadata=2, answers=False), KafkaReach()
    await _producer(client, reach).send_all(RECORDS)  # waited for, then written
    assert client.sends == 3


async def test_a_topic_unknown_to_a_cluster_that_answers_is_unknown() -> None:
    with pytest.raises(UnknownTopic, match="unknown topic or partition"):
        await _producer(_Client(no_metadata=1, answers=True), KafkaReach()).send_all(RECORDS)


async def test_a_stop_request_ends_the_wait_with_the_last_failure() -> None:
    reach, stop = KafkaReach(), asyncio.Event()

    async def unanswered() -> None:
        raise BrokerUnavailable("kafka broker.test:9092: start consumer: refused")

    waiting = asyncio.create_task(reach.serving(unanswered, stop=stop))
    assert await until(lambda: not reach.reachable, 30, interval_s=0.001)
    stop.set()
    await asyncio.wait_for(waiting, 5)  # returns: asked to stop while waiting
    with pytest.raises(BrokerUnavailable):
        await reach.patiently("connect", unanswered, stop=stop)
    assert reach.reachable  # nobody waits on it any more


def test_the_backoff_doubles_to_its_cap() -> None:
    assert [backoff_s(n) for n in (1, 2, 3, 4, 5, 6, 7, 100)] == [
        0.5,
        1.0,
        2.0,
        4.0,
        8.0,
        10.0,
        10.0,
        10.0,
    ]
