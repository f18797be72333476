"""Single-event webhooks through a real connector process and the retrier, to a receiver that
checks every signature with `standardwebhooks` and keeps each event once by its `webhook-id`:
a reply lost on the way back (the retrier's path) and a rejection replayed from the DLQ still
give every event once, under the same id."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest

from config.catalog import Catalog
from devstack.kafka_tools import produce_events, read_topic
from hifi.headers import header_map
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from retrier.daemon import Retrier
from tests.connector.webhook_receiver import receiving
from tests.helpers import running, start_daemon, until
from tests.retrier.support import create_topics, run_retrier_command

pytestmark = [pytest.mark.integration]

SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"


async def test_every_event_once_by_webhook_id_through_retrier_and_replay(
    kafka_settings: KafkaSettings,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    sent: list[dict[str, object]] = [
        {"id": f"w-{i}", "event_time": 1_700_000_000_000 + i, "n": i} for i in range(30)
    ]
    for event in sent[:4]:
        event["lose"] = True
    for event in sent[4:7]:
        event["reject"] = True
    anonymous: list[dict[str, object]] = [
        {"n": 100},
        {"n": 101, "lose": True},
        {"n": 102, "reject": True},
    ]
    async with receiving(SECRET) as receiver:
        (catalog_dir / f"{unique}.toml").write_text(
            f'url = "{receiver.url}"\nsource_topics = ["{unique}"]\nformat = "single"\n'
            "local_retry_attempts = 1\nretry_tiers_s = [1]\ninternal_topic_partitions = 2\n"
            'commit_interval_s = 0.2\n[signing]\nkind = "standard_webhooks"\n'
            'secrets = ["${HOOK_SECRET}"]\n'
        )
        dest = Catalog(catalog_dir).load(unique)
        await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=2)
        await create_topics(kafka_settings, dest)
        await produce_events(kafka_settings, unique, [*sent, *anonymous])
        origins = {
            orjson.loads(record.value)["n"]: f"{unique}/{record.partition}/{record.offset}"
            for record in await read_topic(kafka_settings, unique)
            if "id" not in orjson.loads(record.value)
        }
        expected = {e["id"] for e in sent} | set(origins.values())
        log = tmp_path / "connector.log"
        args = ["--dest", unique, "--catalog", str(catalog_dir), "--metrics-port", "0"]
        processes.append(
            start_daemon("connector", args, bootstrap=kafka_settings.bootstrap, log_path=log)
        )
        retrier = Retrier([dest], kafka_settings, group_id=f"hifi.retrier.{unique}")
        async with running(retrier):
            rejected = 4  # 3 with ids, 1 without
            assert await until(lambda: len(receiver.rejected) == rejected, 60), receiver
            assert await until(lambda: len(receiver.kept) == len(expected) - rejected, 60)
            dead = await read_topic(kafka_settings, dest.dlq_topic)
            assert sorted(header_map(r.headers)["hifi-reason"] for r in dead) == [b"http_4xx"] * 4
            receiver.rejecting = False
            code, out, err = await run_retrier_command(
                "dlq", "replay", "--dest", unique, "--catalog", str(catalog_dir),
                bootstrap=kafka_settings.bootstrap,
            )  # fmt: skip
            assert (code, out.split()[:2]) == (0, ["replayed", "4"]), err
            assert await until(lambda: set(receiver.kept) == expected, 60), receiver.kept.keys()

    assert receiver.refused == []  # every request verified by the receiver's library
    lost: set[str] = {str(e["id"]) for e in sent[:4]} | {origins[101]}
    handed_off = {orjson.loads(r.value).get("id") or header_map(r.headers)["hifi-origin"].decode()
                  for r in await read_topic(kafka_settings, dest.retry_in_topic)}  # fmt: skip
    assert handed_off == lost  # each went to the retrier once and came back under its id
    for msg_id in lost | set(receiver.rejected):
        assert receiver.requests[msg_id] == 2, msg_id  # sent again, kept once
    assert set(receiver.rejected) == {e["id"] for e in sent[4:7]} | {origins[102]}
    for msg_id, event in receiver.kept.items():
        assert event.get("id", origins.get(event["n"])) == msg_id
    text = log.read_text()
    assert SECRET not in text
    assert SECRET.removeprefix("whsec_") not in text
