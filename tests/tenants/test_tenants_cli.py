"""`hifi-tenants push|get|diff` against a private Redis: validation in one line, exit codes, secrets never printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import redis

from devstack.redis import RedisServer
from tests.tenants.support import write_tenant_destination

pytestmark = [pytest.mark.integration]

SECRET = "acme-s3cr3t-0f1e2d3c4b5a"
URL = "https://{region}.collector.test/v1/{tenant}/events"
ENTRIES = """
[tenants.acme]
values = { api_key = "${ACME_KEY}", region = "eu" }

[tenants.globex]
values = { api_key = "gx-key", region = "us" }
filter = { field = "type", in = ["play"] }
"""
REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, server: RedisServer, catalog: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HIFI_REDIS_URL": server.url, "ACME_KEY": SECRET}
    return subprocess.run(
        [sys.executable, "-m", "tenants", *args, "--catalog", str(catalog)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def _held(server: RedisServer, dest: str) -> dict[bytes, bytes]:
    client = redis.Redis.from_url(server.url)
    try:
        return client.hgetall(f"hifi:tenants:{dest}")  # type: ignore[return-value]
    finally:
        client.close()


@pytest.fixture
def entries(tmp_path: Path, catalog_dir: Path) -> Path:
    write_tenant_destination(catalog_dir, "tv", URL, "events")
    path = tmp_path / "entries.toml"
    path.write_text(ENTRIES)
    return path


def test_push_get_diff_round(redis_server: RedisServer, catalog_dir: Path, entries: Path) -> None:
    """A dry run writes nothing; a push writes every entry once; get shows them with header
    values masked; diff names the keys that differ, never their values, and exits 1."""
    run = _cli(
        "push", "--dest", "tv", str(entries), "--dry-run", server=redis_server, catalog=catalog_dir
    )
    assert run.returncode == 0, run.stderr
    assert "would push 2 entries" in run.stdout
    assert _held(redis_server, "tv") == {}
    run = _cli("push", "--dest", "tv", str(entries), server=redis_server, catalog=catalog_dir)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[:2] == ["added      acme", "added      globex"]
    held = _held(redis_server, "tv")
    assert orjson.loads(held[b"acme"]) == {"values": {"api_key": SECRET, "region": "eu"}}
    again = _cli("push", "--dest", "tv", str(entries), server=redis_server, catalog=catalog_dir)
    assert "0 added, 0 changed, 2 unchanged, 0 removed" in again.stdout
    shown = _cli("get", "--dest", "tv", server=redis_server, catalog=catalog_dir)
    assert shown.returncode == 0, shown.stderr
    assert orjson.loads(shown.stdout)["tenants"]["acme"] == {
        "values": {"api_key": "***", "region": "eu"}
    }
    assert SECRET not in shown.stdout + shown.stderr
    same = _cli("diff", "--dest", "tv", str(entries), server=redis_server, catalog=catalog_dir)
    assert (same.returncode, same.stdout.strip()) == (0, "no differences: 2 entries alike")
    entries.write_text(
        ENTRIES.replace('"${ACME_KEY}"', '"other-key-123456"')
        + '[tenants.new]\nvalues = { api_key = "n", region = "eu" }\n'
    )
    client = redis.Redis.from_url(redis_server.url)
    client.hset("hifi:tenants:tv", "stale", b"{}")
    client.close()
    differs = _cli("diff", "--dest", "tv", str(entries), server=redis_server, catalog=catalog_dir)
    assert differs.returncode == 1
    assert differs.stdout.splitlines() == [
        f"only in {entries}: new",
        "only in Redis: stale",
        "differs: acme (values.api_key)",
    ]
    assert SECRET not in differs.stdout
    assert "other-key" not in differs.stdout
    pruned = _cli(
        "push", "--dest", "tv", str(entries), "--prune", server=redis_server, catalog=catalog_dir
    )
    assert "1 added, 1 changed, 1 unchanged, 1 removed" in pruned.stdout
    assert set(_held(redis_server, "tv")) == {b"acme", b"globex", b"new"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[tenants.a]\nenabled = "yes"\n',
            "tenant 'a': key 'enabled': Input should be a valid boolean",
        ),
        ('[tenants.a]\nvalues = { api_key = "k" }\n', "tenant 'a': key 'values': region missing"),
        (
            '[tenants.a]\nvalues = { api_key = "k", region = "eu" }\nfiltre = {}\n',
            "unknown key 'filtre'",
        ),
        (
            '[tenants.a]\nvalues = { api_key = "${NOT_SET_ANYWHERE}", region = "eu" }\n',
            "key 'tenants.a.values.api_key': refers to ${NOT_SET_ANYWHERE}",
        ),
        ("[tenant.a]\n", "the file holds one table, tenants"),
        ("[tenants.a\n", "not valid TOML"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    redis_server: RedisServer, catalog_dir: Path, entries: Path, text: str, expected: str
) -> None:
    """Every problem of an entries file names the file, the tenant and the key; exit 2; nothing
    is written."""
    entries.write_text(text + f'[tenants.z]\nvalues = {{ api_key = "{SECRET}", region = "eu" }}\n')
    run = _cli("push", "--dest", "tv", str(entries), server=redis_server, catalog=catalog_dir)
    assert run.returncode == 2
    (line,) = run.stderr.splitlines()
    assert line.startswith("hifi-tenants push: ")
    assert expected in line
    assert SECRET not in line
    assert _held(redis_server, "tv") == {}


def test_other_failures(
    redis_server: RedisServer, catalog_dir: Path, entries: Path, tmp_path: Path
) -> None:
    """A destination without [lookups] and a file that is neither TOML nor JSON exit 2; a JSON
    file works like TOML; a bad entry in Redis is reported by get (exit 1) without its text;
    an unreachable Redis is one line and exit 1."""
    (catalog_dir / "plain.toml").write_text('url = "https://c.test/"\nsource_topics = ["e"]\n')
    run = _cli("get", "--dest", "plain", server=redis_server, catalog=catalog_dir)
    assert (run.returncode, run.stderr.strip()) == (
        2,
        "hifi-tenants get: destination 'plain' has no [lookups] table; tenant entries serve only one",
    )
    other = tmp_path / "entries.yaml"
    other.write_text("x")
    assert (
        _cli(
            "diff", "--dest", "tv", str(other), server=redis_server, catalog=catalog_dir
        ).returncode
        == 2
    )
    as_json = tmp_path / "entries.json"
    as_json.write_text('{"tenants": {"j": {"values": {"api_key": "k", "region": "eu"}}}}')
    assert (
        _cli(
            "push", "--dest", "tv", str(as_json), server=redis_server, catalog=catalog_dir
        ).returncode
        == 0
    )
    client = redis.Redis.from_url(redis_server.url)
    client.hset("hifi:tenants:tv", "broken", b'{"values": {"api_key": "' + SECRET.encode() + b'"')
    client.close()
    shown = _cli("get", "--dest", "tv", server=redis_server, catalog=catalog_dir)
    assert shown.returncode == 1
    assert "tenant 'broken': the entry is not JSON" in shown.stderr
    assert SECRET not in shown.stdout + shown.stderr
    assert list(orjson.loads(shown.stdout)["tenants"]) == ["j"]
    redis_server.stop()
    down = _cli("get", "--dest", "tv", server=redis_server, catalog=catalog_dir)
    assert down.returncode == 1
    assert down.stderr.startswith(
        "hifi-tenants get: redis HGETALL hifi:tenants:tv at redis://127.0.0.1:"
    )
    assert len(down.stderr.splitlines()) == 1


def test_the_example_entries_file_is_valid(
    catalog_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """config/tenants.example.toml fits the destination its header describes."""
    from tenants.files import read_entries

    dest = write_tenant_destination(
        catalog_dir,
        "tv",
        "https://{region}.collector.example.com/v1/{tenant}/events",
        "events",
        headers='X-Api-Key = "{api_key}"\n',
    )
    env = {
        f"{name}_API_KEY": f"{name.lower()}-key"
        for name in ("ACME", "GLOBEX", "INITECH", "UMBRELLA")
    }
    found = read_entries(REPO / "config" / "tenants.example.toml", dest, env)
    assert list(found) == ["acme", "globex", "initech", "umbrella"]
