"""How group members join: the assignor setting, static membership (`--instance-id`), on the broker."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click
import pytest
from aiokafka import TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from click.testing import CliRunner

import auditor.cli
import connector.cli
import retrier.cli
from hifi.environment import INSTANCE_ID_ENV
from hifi.errors import ConfigError
from hifi.kafka import admin as kafka_admin
from hifi.kafka import consuming
from hifi.kafka.consuming import Consumer, open_consumer
from hifi.kafka.settings import KafkaSettings
from tests.helpers import write_destination


class _Built(Exception):
    """Raised by the stand-in for aiokafka's consumer once it has the consumer's options."""


def _consumer_kwargs(
    monkeypatch: pytest.MonkeyPatch, settings: KafkaSettings, **kwargs: Any
) -> dict[str, Any]:
    """The keyword arguments `consumer` gives aiokafka's consumer (which never starts)."""
    seen: dict[str, Any] = {}

    def build(**options: Any) -> None:
        seen.update(options)
        raise _Built

    monkeypatch.setattr(consuming, "AIOKafkaConsumer", build)

    async def open_it() -> None:
        async with open_consumer(settings, **kwargs):
            pass

    with pytest.raises(_Built):
        asyncio.run(open_it())
    return seen


def test_a_group_consumer_joins_with_the_settings_assignor_and_instance_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A group member offers the chosen assignor, then roundrobin (what it used before), and
    joins as the static member the settings name; a caller's override still wins."""
    settings = KafkaSettings(assignor="range").as_static_member("connector-0", where="test")
    kwargs = _consumer_kwargs(monkeypatch, settings, group_id="g")
    assert kwargs["partition_assignment_strategy"] == (
        RangePartitionAssignor,
        RoundRobinPartitionAssignor,
    )
    assert kwargs["group_instance_id"] == "connector-0"
    overridden = _consumer_kwargs(
        monkeypatch, settings, group_id="g", partition_assignment_strategy=(RangePartitionAssignor,)
    )
    assert overridden["partition_assignment_strategy"] == (RangePartitionAssignor,)


def test_defaults_keep_roundrobin_and_dynamic_membership(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default a member is dynamic with roundrobin alone; a consumer outside any group gets
    neither option."""
    kwargs = _consumer_kwargs(monkeypatch, KafkaSettings(), group_id="g")
    assert kwargs["partition_assignment_strategy"] == (RoundRobinPartitionAssignor,)
    assert "group_instance_id" not in kwargs
    static = KafkaSettings().as_static_member("c-1", where="test")
    reader = _consumer_kwargs(monkeypatch, static, group_id=None)
    assert "group_instance_id" not in reader
    assert "partition_assignment_strategy" not in reader


def test_the_operators_session_timeout_wins_over_the_daemons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HIFI_KAFKA_SESSION_TIMEOUT_S replaces a daemon's own session timeout (the retrier's 6 s),
    with at least three heartbeats per session; without it the daemon's stays."""
    settings = KafkaSettings.from_env({"HIFI_KAFKA_SESSION_TIMEOUT_S": "60"})
    retrier_like = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}
    kwargs = _consumer_kwargs(monkeypatch, settings, group_id="g", **retrier_like)
    assert (kwargs["session_timeout_ms"], kwargs["heartbeat_interval_ms"]) == (60_000, 1000)
    short = KafkaSettings(session_timeout_s=6)
    kwargs = _consumer_kwargs(monkeypatch, short, group_id="g")
    assert (kwargs["session_timeout_ms"], kwargs["heartbeat_interval_ms"]) == (6000, 2000)
    kept = _consumer_kwargs(monkeypatch, KafkaSettings(), group_id="g", **retrier_like)
    assert kept["session_timeout_ms"] == 6000
    reader = _consumer_kwargs(monkeypatch, settings, group_id=None)
    assert "session_timeout_ms" not in reader
    assert settings.describe()["session_timeout_s"] == "60"
    with pytest.raises(ConfigError, match="HIFI_KAFKA_SESSION_TIMEOUT_S"):
        KafkaSettings.from_env({"HIFI_KAFKA_SESSION_TIMEOUT_S": "5"})


def test_each_sticky_member_keeps_its_own_previous_assignment() -> None:
    """aiokafka's sticky assignor remembers the last assignment on its class: every consumer
    gets a class of its own, so members in one process do not report each other's."""
    settings = KafkaSettings(assignor="sticky")
    first = consuming.membership_options(settings)["partition_assignment_strategy"]
    second = consuming.membership_options(settings)["partition_assignment_strategy"]
    assert issubclass(first[0], StickyPartitionAssignor)
    assert first[0].name == "sticky"
    assert first[1] is RoundRobinPartitionAssignor
    assert first[0] is not second[0]
    first[0].on_assignment(_Assignment([TopicPartition("t", 1)]))
    assert second[0].member_assignment is None


class _Assignment:
    def __init__(self, partitions: list[TopicPartition]) -> None:
        self._partitions = partitions

    def partitions(self) -> list[TopicPartition]:
        return self._partitions


def test_the_assignor_comes_from_the_environment() -> None:
    """HIFI_KAFKA_ASSIGNOR picks the assignor; another name is one ConfigError naming it."""
    assert KafkaSettings.from_env({"HIFI_KAFKA_ASSIGNOR": "sticky"}).assignor == "sticky"
    assert KafkaSettings.from_env({}).assignor == "roundrobin"
    with pytest.raises(ConfigError, match=r"HIFI_KAFKA_ASSIGNOR.*'cooperative-sticky'"):
        KafkaSettings.from_env({"HIFI_KAFKA_ASSIGNOR": "cooperative-sticky"})
    assert KafkaSettings.from_env({INSTANCE_ID_ENV: "x"}).instance_id is None  # flags only


@pytest.mark.parametrize("bad", ["", "pod 0", "pod/0", ".", "..", "x" * 250, "p\u00f6d", "a\n"])
def test_an_instance_id_kafka_would_refuse_is_one_config_error(bad: str) -> None:
    """Empty, too long (over 249) or with characters other than letters, digits, '.', '_'
    and '-' (Kafka's rule): one line naming where it came from."""
    with pytest.raises(ConfigError) as raised:
        KafkaSettings().as_static_member(bad, where="--instance-id")
    message = str(raised.value)
    assert message.startswith("--instance-id: instance id ")
    assert "\n" not in message


def test_the_start_log_line_says_how_the_member_joins() -> None:
    """`describe()`, logged at every daemon's start, names the assignor and the static id."""
    static = KafkaSettings(assignor="sticky").as_static_member("hifi-connector-2", where="t")
    wanted = {"assignor": "sticky", "membership": "static", "instance_id": "hifi-connector-2"}
    assert wanted.items() <= static.describe().items()
    assert KafkaSettings().describe()["membership"] == "dynamic"
    assert "instance_id" not in KafkaSettings().describe()


@pytest.mark.parametrize(
    ("command", "args"),
    [
        (connector.cli.cli, ["--dest", "shop"]),
        (retrier.cli.cli, []),
        (auditor.cli.cli, []),
    ],
)
def test_each_daemon_checks_its_instance_id_from_flag_and_environment(
    command: click.Command, args: list[str], tmp_path: Path
) -> None:
    """`--instance-id` and $HIFI_INSTANCE_ID reach the daemon's Kafka settings (a bad id is the
    settings' one-line error, exit 2) before anything runs; a good one passes --check."""
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    write_destination(catalog, "shop", url="https://x.test/", source_topics=["src"])
    base = ["--catalog", str(catalog), "--check", *args]
    archive = ["--archive", str(tmp_path / "archive")] if command is auditor.cli.cli else []
    runner = CliRunner()
    by_flag = runner.invoke(command, [*base, *archive, "--instance-id", "pod 0"])
    assert by_flag.exit_code == 2
    assert by_flag.output.count("\n") == 1
    assert ": --instance-id (or $HIFI_INSTANCE_ID): instance id 'pod 0' is not" in by_flag.output
    by_env = runner.invoke(command, [*base, *archive], env={INSTANCE_ID_ENV: "a/b"})
    assert by_env.exit_code == 2
    assert "instance id 'a/b'" in by_env.output
    good = runner.invoke(command, [*base, *archive, "--instance-id", "hifi-0"])
    assert good.exit_code == 0, good.output


# --- on the broker ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _member(settings: KafkaSettings, group: str, topic: str) -> AsyncIterator[Consumer]:
    async with open_consumer(
        settings, group_id=group, session_timeout_ms=6000, heartbeat_interval_ms=500
    ) as member:
        member.subscribe([topic])
        yield member


async def _settled(members: list[Consumer], partitions: int) -> list[set[int]]:
    """Poll every member until each owns some partitions and together they own each once."""
    async with asyncio.timeout(60):
        while True:
            await asyncio.gather(*(m.getmany(timeout_ms=100) for m in members))
            owned = [{tp.partition for tp in m.assignment()} for m in members]
            if all(owned) and sum(map(len, owned)) == partitions == len(set().union(*owned)):
                return owned


async def test_sticky_members_split_the_partitions_and_a_newcomer_moves_only_its_share(
    kafka_settings: KafkaSettings, unique: str
) -> None:
    """Two members with the sticky assignor own disjoint halves of every partition; when a
    third joins, only the partitions it now owns changed hands (roundrobin moves 4 of 6)."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=6)
    settings = kafka_settings.model_copy(update={"assignor": "sticky"})
    group = f"{unique}.g"
    async with (
        _member(settings, group, unique) as a,
        _member(settings, group, unique) as b,
    ):
        before = await _settled([a, b], 6)
        assert before[0].isdisjoint(before[1])
        async with _member(settings, group, unique) as c:
            after = await _settled([a, b, c], 6)
    assert [len(owned) for owned in after] == [2, 2, 2]
    assert after[0] <= before[0]
    assert after[1] <= before[1]
