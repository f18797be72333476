"""`connector --check --probe` of a destination with tenant lookups: where the entries are, how many are usable."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
import redis

from devstack.destination import TestDestination
from devstack.redis import RedisServer
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.tenants.support import entry, write_tenant_destination

pytestmark = [pytest.mark.integration]


async def _check(
    catalog: Path, dest: str, bootstrap: str, redis_url: str, *flags: str
) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "connector",
        "--dest",
        dest,
        "--catalog",
        str(catalog),
        "--check",
        "--probe",
        *flags,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env={**os.environ, "HIFI_KAFKA_BOOTSTRAP": bootstrap, "HIFI_REDIS_URL": redis_url},
    )
    out, err = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_probe_reads_the_entries_once(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    redis_server: RedisServer,
) -> None:
    """The probe names the hash and counts usable and refused entries (a refusal is a warning
    that names the tenant and why, never the entry); Redis down is unreachable (exit 1); a
    HIFI_REDIS_URL hifi cannot use is one line and exit 2."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    template = destination.url.replace("/v1/events", "/v1/{tenant}/events")
    write_tenant_destination(catalog_dir, unique, template, unique)
    client = redis.Redis.from_url(redis_server.url)
    client.hset(
        f"hifi:tenants:{unique}",
        mapping={"good": entry(values={"api_key": "k-good-0000"}), "bad": b'{"enabled": 1}'},
    )
    client.close()
    code, out, err = await _check(catalog_dir, unique, kafka_settings.bootstrap, redis_server.url)
    assert code == 0, out + err
    assert (
        f"tenant lookups: field 'customer', entries in hash hifi:tenants:{unique} at {redis_server.url}"
        in out
    )
    assert "tenant 'bad': key 'enabled': Input should be a valid boolean" in out
    assert f"tenant entries: 1 usable, 1 refused, in hash hifi:tenants:{unique}" in out
    assert "k-good-0000" not in out
    redis_server.stop()
    code, out, _ = await _check(catalog_dir, unique, kafka_settings.bootstrap, redis_server.url)
    assert code == 1
    assert "error   tenant entries: redis HGETALL" in out
    code, out, err = await _check(catalog_dir, unique, kafka_settings.bootstrap, "ftp://x/0")
    assert code == 2
    assert err.strip() == (
        "connector: HIFI_REDIS_URL: scheme 'ftp' is not one of redis, rediss, unix;"
        " write e.g. redis://127.0.0.1:6379/0"
    )


async def test_probe_post_renders_one_tenants_entry(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    redis_server: RedisServer,
) -> None:
    """With {tenant} in url, --probe-post needs --tenant T (else one line, exit 2); with it the
    empty batch goes to T's url with T's headers (its secret never printed); a tenant without
    an entry is refused (exit 2). Without --tenant the HEAD reaches only the host."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    template = destination.url.replace("/v1/events", "/v1/{tenant}/events")
    write_tenant_destination(catalog_dir, unique, template, unique)
    client = redis.Redis.from_url(redis_server.url)
    client.hset(
        f"hifi:tenants:{unique}", mapping={"good": entry(values={"api_key": "k-good-0000"})}
    )
    client.close()
    bootstrap, url = kafka_settings.bootstrap, redis_server.url
    code, out, err = await _check(catalog_dir, unique, bootstrap, url, "--probe-post")
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1, err
    assert "with --tenant T" in err
    code, out, err = await _check(catalog_dir, unique, bootstrap, url)
    assert code == 0, out + err
    assert [(r.method, r.path) for r in destination.requests] == [("HEAD", "/")]
    destination.clear()
    code, out, err = await _check(
        catalog_dir, unique, bootstrap, url, "--probe-post", "--tenant", "good"
    )
    assert code == 0, out + err
    rendered = template.replace("{tenant}", "good")
    assert f"destination {rendered} (tenant 'good'): the empty batch was answered 200" in out
    head, post = destination.requests
    assert (head.method, head.path, post.method, post.path) == (
        "HEAD",
        "/v1/good/events",
        "POST",
        "/v1/good/events",
    )
    assert (post.headers["x-api-key"], post.headers["x-tenant"]) == ("k-good-0000", "good")
    assert "k-good-0000" not in out
    code, out, err = await _check(
        catalog_dir, unique, bootstrap, url, "--probe-post", "--tenant", "nobody"
    )
    assert code == 2, out + err
    assert f"error   --tenant 'nobody': no entry in redis hash hifi:tenants:{unique}" in out
