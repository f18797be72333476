"""`--check` and `--probe` as an operator runs them: what is found, line by line, and the exit code."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from devstack.destination import TestDestination
from devstack.destination_script import Reply
from devstack.schema_registry import serving
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.helpers import write_destination

pytestmark = [pytest.mark.integration]
DAY_MS = 86_400_000


async def _run(prog: str, *args: str, bootstrap: str, **env: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        prog,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env={**os.environ, "HIFI_KAFKA_BOOTSTRAP": bootstrap, **env},
    )
    out, err = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def _write(catalog_dir: Path, name: str, url: str, topic: str, **keys: object) -> None:
    write_destination(
        catalog_dir,
        name,
        url=url,
        source_topics=[topic],
        headers={"Authorization": "Bearer ${CHECK_TOKEN}"},
        **keys,
    )


async def test_check_validates_without_reaching_anything(catalog_dir: Path, unique: str) -> None:
    """`--check` alone reads the catalog and environment, reaches nothing, and exits 0."""
    _write(catalog_dir, unique, "https://nowhere.invalid/", unique)
    code, out, _ = await _run(
        "connector",
        "--dest",
        unique,
        "--catalog",
        str(catalog_dir),
        "--check",
        bootstrap="127.0.0.1:1",
        CHECK_TOKEN="s3cr3t-t0ken-value",
    )
    assert code == 0
    assert out.splitlines()[-1] == "connector check: ok"
    assert "s3cr3t" not in out


async def test_check_with_bad_configuration_exits_2_in_one_line(
    catalog_dir: Path, unique: str
) -> None:
    """A variable the catalog needs but the environment lacks is one line and exit 2."""
    _write(catalog_dir, unique, "https://nowhere.invalid/", unique)
    env = {k: v for k, v in os.environ.items() if k != "CHECK_TOKEN"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "connector",
        "--dest",
        unique,
        "--catalog",
        str(catalog_dir),
        "--check",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert err.decode().count("\n") == 1
    assert "CHECK_TOKEN" in err.decode()


async def test_probe_reaches_kafka_and_the_destination_with_a_head_only(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """`--probe` reaches Kafka and the destination (a HEAD, never a POST), warns about the source
    topic that does not exist and about a DLQ that keeps records shorter than wanted; exit 0."""
    _write(catalog_dir, unique, destination.url, unique, dlq_retention_days=30)
    await kafka_admin.ensure_topics(
        kafka_settings, [f"{unique}.dlq"], partitions=1, retention_ms=DAY_MS
    )
    code, out, err = await _run(
        "connector",
        "--dest",
        unique,
        "--catalog",
        str(catalog_dir),
        "--check",
        "--probe",
        bootstrap=kafka_settings.bootstrap,
        CHECK_TOKEN="s3cr3t-t0ken-value",
    )
    assert code == 0, out + err
    assert f"kafka {kafka_settings.bootstrap}: reachable" in out
    assert f"warning source topic {unique}: does not exist" in out
    assert (
        f"warning topic {unique}.dlq: retention.ms={DAY_MS} (1 d) is shorter than the 30 d" in out
    )
    assert f"destination {destination.url}: reachable (HEAD answered" in out
    assert out.splitlines()[-1] == "connector check: ok, 2 warnings"
    assert [r.method for r in destination.requests] == ["HEAD"]
    assert "Traceback" not in err


async def _probe(
    catalog_dir: Path, name: str, bootstrap: str, *flags: str, **env: str
) -> tuple[int, str, str]:
    return await _run(
        "connector",
        "--dest",
        name,
        "--catalog",
        str(catalog_dir),
        "--probe",
        *flags,
        bootstrap=bootstrap,
        CHECK_TOKEN="s3cr3t-t0ken-value",
        **env,
    )


async def test_head_answers_say_what_they_mean(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """A HEAD answered 404 or 405 says the path may be wrong, 401 or 403 that the credentials
    may be refused: warnings (exit 0: many endpoints answer HEAD differently from POST) that
    point to --probe-post. The HEAD carries the delivery's headers, secrets never printed."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    _write(catalog_dir, unique, destination.url, unique)
    for status, meaning in [
        (404, "the path may be wrong"),
        (405, "the path may be wrong"),
        (401, "it may refuse the credentials"),
        (403, "it may refuse the credentials"),
    ]:
        destination.script(Reply(status))
        code, out, err = await _probe(catalog_dir, unique, kafka_settings.bootstrap)
        assert code == 0, out + err
        assert (
            f"warning destination {destination.url}: reachable, but HEAD answered {status}:"
            f" {meaning}; many endpoints answer HEAD differently from POST: --probe-post"
        ) in out
        assert out.splitlines()[-1] == "connector check: ok, 1 warning"
    assert [r.method for r in destination.requests] == ["HEAD"] * 4
    assert destination.requests[0].headers["authorization"] == "Bearer s3cr3t-t0ken-value"
    assert "s3cr3t" not in out


async def test_probe_post_sends_one_empty_batch(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """--probe-post sends, after the HEAD, one empty batch with the delivery's headers: `[]`, or
    an empty NDJSON body. Accepted is ok; 401/403 is refused credentials and 404/405 a wrong
    path, exit 2 either way; nothing else is POSTed."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    _write(catalog_dir, unique, destination.url, unique)
    code, out, err = await _probe(catalog_dir, unique, kafka_settings.bootstrap, "--probe-post")
    assert code == 0, out + err
    assert (
        f"ok      destination {destination.url}: the empty batch was answered 200: accepted" in out
    )
    head, post = destination.requests
    assert (head.method, post.method, post.body) == ("HEAD", "POST", b"[]")
    assert post.headers["content-type"] == "application/json"
    assert post.headers["authorization"] == "Bearer s3cr3t-t0ken-value"
    assert destination.deliveries() == []
    for status, meaning in [
        (401, "the destination refuses the credentials"),
        (403, "the destination refuses the credentials"),
        (404, "wrong path"),
        (405, "wrong path"),
    ]:
        destination.script(Reply(200), Reply(status))
        code, out, _ = await _probe(catalog_dir, unique, kafka_settings.bootstrap, "--probe-post")
        assert code == 2, out
        assert (
            f"error   destination {destination.url}: the empty batch was answered {status}: {meaning}"
            in out
        )
        assert out.splitlines()[-1] == "connector check: refused"
    destination.clear()
    _write(catalog_dir, unique, destination.url, unique, format="ndjson", compression="gzip")
    code, out, err = await _probe(catalog_dir, unique, kafka_settings.bootstrap, "--probe-post")
    assert code == 0, out + err
    post = destination.requests[-1]
    assert (post.method, post.body) == ("POST", b"")
    assert post.headers["content-type"] == "application/x-ndjson"
    assert post.headers["content-encoding"] == "gzip"


async def test_probe_of_an_unreachable_destination_exits_1(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """A destination nothing listens on is an error line and exit 1 (a service manager retries)."""
    _write(catalog_dir, unique, "http://127.0.0.1:9/v1", unique)
    code, out, _ = await _run(
        "connector",
        "--dest",
        unique,
        "--catalog",
        str(catalog_dir),
        "--probe",
        bootstrap=kafka_settings.bootstrap,
        CHECK_TOKEN="s3cr3t-t0ken-value",
    )
    assert code == 1
    assert "error   destination http://127.0.0.1:9/v1: unreachable" in out
    assert out.splitlines()[-1].startswith("connector check: unreachable")


async def test_probe_of_an_unreachable_kafka_exits_1(catalog_dir: Path, unique: str) -> None:
    """Kafka that cannot be reached is an error line naming the cause, and exit 1."""
    _write(catalog_dir, unique, "http://127.0.0.1:9/v1", unique)
    code, out, err = await _run(
        "connector",
        "--dest",
        unique,
        "--catalog",
        str(catalog_dir),
        "--probe",
        bootstrap="127.0.0.1:1",
        CHECK_TOKEN="s3cr3t-t0ken-value",
    )
    assert code == 1
    assert "error   kafka 127.0.0.1:1" in out
    assert "refused: nothing listens there" in out
    assert err == ""  # library log lines are silenced in a check


async def test_retrier_check_probe_reads_its_topics(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """`retrier --check --probe` needs no HTTP secret and reports each topic it will keep."""
    _write(catalog_dir, unique, "https://nowhere.invalid/", unique, retry_tiers_s=[5, 10])
    code, out, err = await _run(
        "retrier",
        "--dest",
        unique,
        "--catalog",
        str(catalog_dir),
        "--check",
        "--probe",
        bootstrap=kafka_settings.bootstrap,
    )
    assert code == 0, out + err
    assert f"ok      topic {unique}.retry_tier1: will be created" in out
    assert f"ok      topic {unique}.dlq_replays: will be created with retention 30" in out
    assert out.splitlines()[-1] == "retrier check: ok"


async def test_probe_reports_the_audit_topic_and_its_retention(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str, tmp_path: Path
) -> None:
    """With the audit trail on, `--check` names the audit topic and `--probe` warns when it
    keeps facts for less than the 7 days hifi creates it with; the auditor's check says the
    same, and that its archive can be written; `audit = false` says so instead."""
    audit_topic = f"{unique}.audit"
    _write(catalog_dir, unique, "https://nowhere.invalid/", unique)
    await kafka_admin.ensure_topics(
        kafka_settings, [audit_topic], partitions=1, retention_ms=DAY_MS
    )
    outs: dict[str, str] = {}
    for prog in ("retrier", "auditor"):
        args = ["--dest", unique, "--catalog", str(catalog_dir), "--check", "--probe"]
        if prog == "auditor":
            args += ["--archive", str(tmp_path / "archive")]
        code, outs[prog], err = await _run(
            prog, *args, bootstrap=kafka_settings.bootstrap, HIFI_AUDIT_TOPIC=audit_topic
        )
        assert code == 0, outs[prog] + err
        assert f"warning topic {audit_topic}: retention.ms={DAY_MS} (1 d)" in outs[prog]
    assert f"destination {unique}: audit trail on, facts to {audit_topic}" in outs["retrier"]
    assert f"destination {unique}: audit on, settle 5 min, lag SLA 1 s" in outs["auditor"]
    assert f"archive {tmp_path / 'archive'}: does not exist yet" in outs["auditor"]
    assert f"ok      source topic {audit_topic}: exists" in outs["auditor"]
    _write(catalog_dir, unique, "https://nowhere.invalid/", unique, accounting={"audit": False})
    code, out, _ = await _run(
        "connector",
        "--dest",
        unique,
        "--catalog",
        str(catalog_dir),
        "--check",
        bootstrap="127.0.0.1:1",
        CHECK_TOKEN="s3cr3t-t0ken-value",
    )
    assert code == 0
    assert f"destination {unique}: audit trail off ([accounting] audit = false)" in out


async def test_probe_post_of_a_single_format_posts_nothing_and_says_so(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """A webhook receiver would take an empty request for an event: `--probe-post` of a
    `format = "single"` destination sends the HEAD alone, and the check says what the requests
    carry; a bad signing secret is one line naming the key, exit 2, the secret not shown."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    signing = '\n[signing]\nkind = "standard_webhooks"\nsecrets = ["${HOOK_SECRET}"]\n'
    (catalog_dir / f"{unique}.toml").write_text(
        f'url = "{destination.url}"\nsource_topics = ["{unique}"]\nformat = "single"\n'
        '[webhook]\nkey_header = "X-Key"' + signing
    )
    good = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
    code, out, err = await _probe(
        catalog_dir, unique, kafka_settings.bootstrap, "--probe-post", HOOK_SECRET=good
    )
    assert code == 0, out + err
    assert (
        "requests: one event a request (application/json), its id in 'webhook-id', the record"
        " key in 'X-Key', signed standard_webhooks with 1 secret" in out
    )
    assert "no empty request posted" in out
    assert [request.method for request in destination.requests] == ["HEAD"]
    assert good not in out + err
    bad = "whsec_not-base64-at-all!!"
    code, out, err = await _probe(
        catalog_dir, unique, kafka_settings.bootstrap, "--probe-post", HOOK_SECRET=bad
    )
    assert code == 2, out + err
    assert "key 'signing.secrets[0]': not a Standard Webhooks secret" in out + err
    assert bad not in out + err
    assert len((out + err).strip().splitlines()) == 1


async def test_probe_reaches_the_schema_registry_of_a_decoding_destination(
    kafka_settings: KafkaSettings, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """With `[decode]` the check names the registry and the probe asks it for its subjects: ok
    when it answers, exit 1 when it does not (its password never shown)."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    async with serving() as registry:
        (catalog_dir / f"{unique}.toml").write_text(
            f'url = "{destination.url}"\nsource_topics = ["{unique}"]\n[decode]\n'
            f'kind = "schema_registry"\nurl = "{registry.url}"\nusername = "svc"\n'
            'password = "${SR_PASSWORD}"\n'
        )
        secret = "sr-pass-77125"
        code, out, err = await _probe(
            catalog_dir, unique, kafka_settings.bootstrap, SR_PASSWORD=secret
        )
        assert code == 0, out + err
        assert (
            f"decode: Schema Registry wire format (Avro, JSON Schema), schemas from {registry.url}"
            in out
        )
        assert f"ok      schema registry {registry.url}: reachable" in out
        assert "GET /subjects" in registry.calls
        registry.down = True
        code, out, err = await _probe(
            catalog_dir, unique, kafka_settings.bootstrap, SR_PASSWORD=secret
        )
        assert code == 1, out + err
        assert f"error   schema registry {registry.url}: answered 503" in out
        assert secret not in out + err
