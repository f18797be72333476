"""The retrier as a real process: command line, `dlq list`, and kill -9 in the middle of a run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from devstack.kafka_tools import committed_offsets, read_topic
from hifi.kafka.settings import KafkaSettings
from tests.helpers import make_destination, start_daemon, wait_exit, write_destination
from tests.retrier.support import (
    RETRIER,
    collect,
    create_topics,
    dead_letter,
    due_ms,
    handoff,
    id_of,
    produce_all,
    run_retrier_command,
)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RETRIER, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HIFI_KAFKA_BOOTSTRAP": "127.0.0.1:1"},
        check=False,
    )


@pytest.mark.integration
def test_help_documents_flags_subcommands_and_ordering() -> None:
    """--help lists the flags and the dlq commands and says retried events are not ordered."""
    result = _run("--help")
    assert result.returncode == 0
    for flag in ("--dest", "--catalog", "--metrics-port", "--until-idle", "--log-format", "dlq"):
        assert flag in result.stdout
    assert "not guaranteed" in " ".join(result.stdout.split())
    dlq_help = _run("dlq", "--help").stdout
    assert "list" in dlq_help
    assert "replay" in dlq_help


@pytest.mark.integration
def test_bad_invocations_exit_2_with_one_line(catalog_dir: Path) -> None:
    """Unknown destinations, bad flags and bad --since values are one line on stderr, exit 2."""
    write_destination(catalog_dir, "ok", url="https://x.test/", source_topics=["e"])
    catalog = ["--catalog", str(catalog_dir)]
    cases = {
        ("--dest", "missing", *catalog): "retrier: destination 'missing'",
        ("--metrics-port", "70000"): "retrier: Invalid value for '--metrics-port'",
        ("--until-idle", "-1"): "retrier: Invalid value for '--until-idle'",
        ("--log-format", "xml"): "retrier: Invalid value for '--log-format'",
        ("--bogus",): "retrier: No such option '--bogus'",
        ("--dest",): "retrier: Option '--dest' requires an argument",
        ("dlq", "list", *catalog): "retrier dlq list: Missing option '--dest'",
        ("dlq", "replay", *catalog): "retrier dlq replay: Missing option '--dest'",
        ("dlq", "list", "--dest", "ok", "--limit", "0"): "retrier dlq list: Invalid value",
        ("dlq", "list", "--dest", "ok", "--reason", "nope"): "retrier dlq list: Invalid value",
        ("dlq", "purge"): "retrier dlq: No such command 'purge'",
        ("dlq", "replay", "--dest", "ok", "--since", "yesterday", *catalog): (
            "retrier dlq replay: --since 'yesterday'"
        ),
    }
    for args, expected in cases.items():
        result = _run(*args)
        assert result.returncode == 2, args
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(expected), result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.integration
def test_empty_catalog_exits_2(catalog_dir: Path) -> None:
    """Serving every destination of a catalog that has none is a one-line error."""
    result = _run("--catalog", str(catalog_dir))
    assert result.returncode == 2
    assert result.stderr == f"retrier: catalog {catalog_dir} has no destinations; add NAME.toml\n"


@pytest.mark.integration
async def test_dlq_list_prints_one_line_per_dead_letter(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """`dlq list` prints reason, status, error, origin, age and body per dead letter, filtered and limited."""
    dest = make_destination(catalog_dir, unique, "https://x.test/", "src")
    await create_topics(kafka_settings, dest)
    now_ms = int(time.time() * 1000)
    letters = [
        dead_letter(dest, event_id, reason, dead_ms=now_ms)
        for event_id, reason in (("a", "expired"), ("b", "http_4xx"), ("c", "expired"))
    ]
    await produce_all(kafka_settings, letters)
    base = ["dlq", "list", "--dest", unique, "--catalog", str(catalog_dir)]
    bootstrap = kafka_settings.bootstrap

    code, out, err = await run_retrier_command(*base, bootstrap=bootstrap)
    assert code == 0, err
    lines = out.splitlines()
    assert sorted(line.split()[0] for line in lines) == ["expired", "expired", "http_4xx"]
    first = next(line for line in lines if "origin=src/0/a " in line)
    assert 'status=503 error="HTTP 503 Service Unavailable"' in first
    assert 'body={"id":"a","payload":"xxx' in first
    assert " age=" in first
    code, out, _ = await run_retrier_command(*base, "--reason", "expired", bootstrap=bootstrap)
    assert (code, len(out.splitlines())) == (0, 2)
    code, out, _ = await run_retrier_command(*base, "--limit", "1", bootstrap=bootstrap)
    assert (code, len(out.splitlines())) == (0, 1)


@pytest.mark.integration
@pytest.mark.slow
async def test_kill_9_mid_run_reoffers_every_event(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str, tmp_path: Path
) -> None:
    """SIGKILL while events are being re-offered, then a restart in the same `--group`: every
    event is re-offered, none before it was due, and the group's offsets cover every record."""
    dest = make_destination(catalog_dir, unique, "https://x.test/", "src", retry_tiers_s=[1, 2])
    await create_topics(kafka_settings, dest)
    start_ms = int(time.time() * 1000) + 4000  # about when the first run owns its partitions
    count = 2000
    await produce_all(
        kafka_settings,
        (
            handoff(dest, f"e-{i}", attempt=1 + i % 2, handoff_ms=start_ms + (i % 60) * 100)
            for i in range(count)
        ),
    )
    group = f"{unique}.retrier"
    args = ["--dest", unique, "--catalog", str(catalog_dir), "--metrics-port", "0"]
    args += ["--group", group]
    bootstrap = kafka_settings.bootstrap
    first = start_daemon("retrier", args, bootstrap=bootstrap, log_path=tmp_path / "first.log")
    try:
        before_kill = await collect(kafka_settings, dest.retry_out_topic, count // 4)
    finally:
        first.send_signal(signal.SIGKILL)
        await wait_exit(first, 30)
    assert count // 4 <= len(before_kill) < count, "the kill did not land mid-run"
    second = start_daemon(
        "retrier",
        [*args, "--until-idle", "3"],
        bootstrap=bootstrap,
        log_path=tmp_path / "second.log",
    )
    assert await wait_exit(second, 120) == 0, (tmp_path / "second.log").read_text()[-2000:]

    reoffered = await read_topic(kafka_settings, dest.retry_out_topic)
    assert {f"e-{i}" for i in range(count)} - {id_of(r) for r in reoffered} == set()
    assert all(r.timestamp >= due_ms(r, dest) for r in reoffered)
    assert await read_topic(kafka_settings, dest.dlq_topic) == []
    twice = sum(1 for n in Counter(id_of(r) for r in reoffered).values() if n > 1)
    print(f"re-offered {len(reoffered)} records for {count} events ({twice} twice)")
    committed = await committed_offsets(kafka_settings, group, dest.retry_in_topic)
    assert sum(offset or 0 for offset in committed.values()) == count
    for tier in (0, 1):
        topic = f"{unique}.retry_tier{tier}"
        tier_committed = await committed_offsets(kafka_settings, group, topic)
        assert sum(o or 0 for o in tier_committed.values()) == len(
            await read_topic(kafka_settings, topic)
        )
