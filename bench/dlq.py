"""`make bench-dlq`: the retrier's dashboard with a million dead letters, against the real broker.

1. A fresh broker; `NAME.dlq` filled with N letters as the connector and retrier write them
   (`bench.dlq_index.letters`: 1 KB bodies, `hifi-*` headers, five reasons, a week of times;
   one letter in a thousand echoes the destination's token in a header).
2. `python -m retrier` starts with its dashboard on a loopback port and indexes the DLQ from
   Kafka; the time until the page says it is ready is reported.
3. The page's own requests, over HTTP, each a median of five: the first page of the list, a
   count filtered by reason and time, a count by text (a fresh event id each time), find by id;
   the retrier's peak RSS (VmHWM) once they are done.
4. A replay of the newest 100,000 letters started from the API while the tiers work: hand-offs
   are written to `NAME.retry_in` so that their due times fall during the replay; the delay
   of each re-offer past its due time is read from `NAME.retry_out` (record time minus hand-off
   time plus the tier's delay), and the largest of those due during the replay is reported.

The last line is the summary:

    bench-dlq: letters=N list_ms=L count_ms=C rss_mb=R replay_due_delay_ms=D
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import httpx
import orjson

from bench.dlq_index import TOKEN, event_id, letters
from bench.measure import read_peak_rss_kb
from bench.report import write_results
from config.catalog import Catalog
from config.topics import ensure_destination_topics
from devstack.broker import LocalBroker
from devstack.ports import free_port
from hifi.headers import header_map
from hifi.kafka.producing import open_producer
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings

DEST = "benchdlq"
TIER_DELAY_S = 2.0
RUNS = 5
_TOKEN_ENV = "BENCH_DLQ_TOKEN"  # noqa: S105 (the variable's name): the destination's header
_DASHBOARD_TOKEN = "Bd8-Kq31-Vz6Lm4Xr-Ts9"  # noqa: S105 (a throwaway for this run)
_SEND_CHUNK = 5_000
_READY_TIMEOUT_S = 1800.0
_REPLAY_WINDOW_S = 12.0  # hand-offs come due over this long from the replay's start


def _say(text: str) -> None:
    click.echo(text, err=True)


def _catalog(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{DEST}.toml").write_text(
        'url = "http://127.0.0.1:9/"\n'
        f'source_topics = ["{DEST}.src"]\n'
        f"retry_tiers_s = [{TIER_DELAY_S}, 600]\n"
        "max_retry_age_s = 86400\n"
        "\n[headers]\n"
        f'Authorization = "Bearer ${{{_TOKEN_ENV}}}"\n'
    )
    return directory


async def _fill(settings: KafkaSettings, topic: str, count: int, newest: int, now_ms: int) -> int:
    """Write `count` letters; returns a time after which exactly the last `newest` were written
    (NAME.dlq keeps the broker's append time: the time a letter was dead-lettered)."""
    sent, boundary_ms = 0, 0
    async with open_producer(settings) as producer:
        for chunk in letters(count, now_ms=now_ms):
            for start in range(0, len(chunk), _SEND_CHUNK):
                part = chunk[start : start + _SEND_CHUNK]
                if sent == count - newest:
                    await asyncio.sleep(0.01)
                    boundary_ms = int(time.time() * 1000)
                    await asyncio.sleep(0.01)
                await producer.send_all([(topic, r.key, r.value, list(r.headers)) for r in part])
                sent += len(part)
            if sent % 100_000 == 0:
                _say(f"   {sent:,} letters written")
    return boundary_ms


def _handoff(i: int, handoff_ms: int) -> tuple[str, bytes, bytes, list[tuple[str, bytes]]]:
    """A hand-off as the connector writes it after one failed attempt."""
    ident = f"h-{i:06d}"
    headers = [
        ("hifi-dest", DEST.encode()),
        ("hifi-attempt", b"1"),
        ("hifi-first-failure-ms", str(handoff_ms).encode()),
        ("hifi-handoff-ms", str(handoff_ms).encode()),
        ("hifi-status", b"503"),
        ("hifi-error", b"HTTP 503 Service Unavailable"),
        ("hifi-origin", f"{DEST}.src/0/{i}".encode()),
        ("hifi-event-id", ident.encode()),
    ]
    return f"{DEST}.retry_in", ident.encode(), orjson.dumps({"id": ident}), headers


class Retrier:
    """`python -m retrier` with its dashboard, for this bench."""

    def __init__(self, catalog: Path, bootstrap: str, log_path: Path) -> None:
        self.port = free_port()
        env = {
            **os.environ,
            "HIFI_KAFKA_BOOTSTRAP": bootstrap,
            "HIFI_DASHBOARD_TOKEN": _DASHBOARD_TOKEN,
            _TOKEN_ENV: TOKEN,
        }
        args = [
            sys.executable,
            "-m",
            "retrier",
            "--dest",
            DEST,
            "--catalog",
            str(catalog),
            "--metrics-port",
            str(self.port),
            "--log-format",
            "json",
            "--log-level",
            "WARNING",
        ]
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path

    def peak_rss_mb(self) -> float:
        return (read_peak_rss_kb(self.process.pid) or 0) / 1024

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def _until_indexed(http: httpx.AsyncClient, retrier: Retrier, count: int) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < _READY_TIMEOUT_S:
        if retrier.process.poll() is not None:
            raise click.ClickException(f"the retrier exited; see {retrier.log_path}")
        try:
            answer = await http.get("/api/overview")
        except httpx.HTTPError:
            answer = None
        if answer is None or answer.status_code != 200:  # 503 while the retrier starts
            dlq = {"ready": False, "size": 0}
        else:
            dlq = answer.json()["destinations"][DEST]["dlq"]
        if dlq["ready"] and dlq["size"] >= count:
            return time.perf_counter() - start
        await asyncio.sleep(0.5)
    raise click.ClickException(f"the index was not ready in {_READY_TIMEOUT_S:.0f} s")


async def _median_ms(http: httpx.AsyncClient, requests: list[tuple[str, dict[str, Any]]]) -> float:
    """The median time of GET requests as a browser makes them (urllib, in a thread: httpx on a
    kept-alive loopback connection adds ~40 ms of its own to each answer)."""
    times = []
    for path, params in requests:
        url = f"{str(http.base_url).rstrip('/')}{path}?{urllib.parse.urlencode(params)}"
        start = time.perf_counter()
        status, body = await asyncio.to_thread(_get, url)
        times.append((time.perf_counter() - start) * 1000)
        if status != 200:
            raise click.ClickException(f"{path} {params}: HTTP {status} {body[:200]!r}")
    return statistics.median(times)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:  # noqa: S310 (our loopback URL)
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def _queries(http: httpx.AsyncClient, count: int, now_ms: int) -> dict[str, float]:
    day_ago = now_ms - 86_400_000
    reasons = ["http_4xx", "expired", "malformed", "too_large", "redirect"]
    ids = [event_id((count // 7) * k + 3) for k in range(1, 3 * RUNS + 1)]
    letters_path, count_path = "/api/letters", "/api/letters/count"
    return {
        "list_ms": await _median_ms(http, [(letters_path, {"dest": DEST, "limit": 50})] * RUNS),
        "count_ms": await _median_ms(
            http, [(count_path, {"dest": DEST, "reason": r, "from": day_ago}) for r in reasons]
        ),
        "text_count_ms": await _median_ms(
            http, [(count_path, {"dest": DEST, "q": t}) for t in ids[:RUNS]]
        ),
        "text_list_ms": await _median_ms(
            http,
            [(letters_path, {"dest": DEST, "q": t, "limit": 50}) for t in ids[RUNS : 2 * RUNS]],
        ),
        "find_ms": await _median_ms(
            http, [("/api/find", {"dest": DEST, "key": t}) for t in ids[2 * RUNS :]]
        ),
    }


async def _replay_during_tiers(
    http: httpx.AsyncClient, settings: KafkaSettings, newest_from: int, handoffs: int
) -> dict[str, float]:
    """Replay the letters written since `newest_from` while `handoffs` tier events come due;
    the largest delay past due of those due during the replay."""
    headers = {"X-Hifi-Token": _DASHBOARD_TOKEN, "X-Hifi-Operator": "bench"}
    selection = {"dest": DEST, "filter": {"from": str(newest_from)}}
    dry = (await http.post("/api/replays", json=selection, headers=headers)).json()
    start_ms = int(time.time() * 1000) + 1500
    first_handoff_ms = start_ms - int(TIER_DELAY_S * 1000)
    spread_ms = int(_REPLAY_WINDOW_S * 1000)
    async with open_producer(settings) as producer:
        await producer.send_all(
            [_handoff(i, first_handoff_ms + spread_ms * i // handoffs) for i in range(handoffs)]
        )
    await asyncio.sleep(max(0.0, start_ms / 1000 - time.time()))
    started = await http.post("/api/replays", json={**selection, "dry_run": False}, headers=headers)
    if started.status_code != 202:
        raise click.ClickException(f"replay refused: {started.text}")
    job = started.json()
    replay_started_ms = int(time.time() * 1000)
    while job["state"] == "running":
        await asyncio.sleep(0.2)
        job = (await http.get(f"/api/replays/{job['id']}")).json()
    replay_ended_ms = int(time.time() * 1000)
    if job["state"] != "done":
        raise click.ClickException(f"replay {job['state']}: {job['error']}")
    await asyncio.sleep(_REPLAY_WINDOW_S)  # the hand-offs due after the replay, for the count
    records = await read_topic(settings, f"{DEST}.retry_out", at_least=job["total"] + handoffs)
    delays: list[int] = []
    late: list[tuple[int, int]] = []  # (due after the replay's start, delay), both in ms
    replayed = 0
    for record in records:
        found = header_map(record.headers)
        if record.key is not None and record.key.startswith(b"h-"):
            due_ms = int(found["hifi-handoff-ms"]) + int(TIER_DELAY_S * 1000)
            if replay_started_ms <= due_ms <= replay_ended_ms:
                delays.append(record.timestamp - due_ms)
                late.append((due_ms - replay_started_ms, record.timestamp - due_ms))
        else:
            replayed += 1
    return {
        "dry_run_count": dry["count"],
        "skipped_replayed": dry["skipped_replayed"],
        "replayed": job["replayed"],
        "replayed_in_topic": replayed,
        "replay_s": (replay_ended_ms - replay_started_ms) / 1000,
        "due_during_replay": len(delays),
        "replay_due_delay_ms": max(delays) if delays else float("nan"),
        "replay_due_delay_p50_ms": statistics.median(delays) if delays else float("nan"),
        "replay_due_delay_p99_ms": _rank(delays, 0.99),
        "due_over_1s_late": sum(1 for delay in delays if delay > 1000),
        "latest_reoffers": sorted(late, key=lambda pair: -pair[1])[:10],
        # per second of the replay: the latest re-offer due in it, ms past due
        "max_delay_by_due_second": [
            max((delay for due, delay in late if due // 1000 == second), default=0)
            for second in range(math.ceil((replay_ended_ms - replay_started_ms) / 1000))
        ],
    }


def _rank(values: list[int], share: float) -> float:
    """Nearest-rank percentile; nan without values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(share * len(ordered)) - 1)])


async def _bench(count: int, replay: int, handoffs: int, work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    catalog = _catalog(work / "catalog")
    os.environ.setdefault(_TOKEN_ENV, TOKEN)  # the catalog as the retrier reads it
    now_ms = int(time.time() * 1000)
    with LocalBroker(log_path=work / "broker.log") as broker:
        settings = KafkaSettings(bootstrap=broker.bootstrap)
        dest = Catalog(catalog, for_delivery=False).load_named([DEST])[0]
        await ensure_destination_topics(settings, dest)
        _say(f"1. writing {count:,} dead letters to {dest.dlq_topic}")
        fill_start = time.perf_counter()
        newest_from = await _fill(settings, dest.dlq_topic, count, replay, now_ms)
        fill_s = time.perf_counter() - fill_start
        _say("2. starting the retrier; its dashboard indexes the DLQ")
        retrier = Retrier(catalog, broker.bootstrap, work / "retrier.log")
        try:
            async with httpx.AsyncClient(base_url=retrier.base, timeout=60) as http:
                index_s = await _until_indexed(http, retrier, count)
                _say(f"   ready in {index_s:.1f} s; 3. the page's requests")
                queries = await _queries(http, count, now_ms)
                rss_mb = retrier.peak_rss_mb()
                _say(f"4. a replay of the newest {replay:,} letters while the tiers work")
                replayed = await _replay_during_tiers(http, settings, newest_from, handoffs)
                rss_after_mb = retrier.peak_rss_mb()
        finally:
            retrier.stop()
    return {
        "letters": count,
        "fill_s": fill_s,
        "index_ready_s": index_s,
        **queries,
        "rss_mb": rss_mb,
        "rss_after_replay_mb": rss_after_mb,
        **replayed,
    }


@click.command()
@click.option(
    "--letters", "count", type=click.IntRange(min=1000), default=1_000_000, show_default=True
)
@click.option("--replay", type=click.IntRange(min=1), default=100_000, show_default=True)
@click.option("--handoffs", type=click.IntRange(min=1), default=3_000, show_default=True)
@click.option(
    "--work",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench/results/dlq-work"),
)
@click.option(
    "--results",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench/results"),
    show_default=True,
)
def main(count: int, replay: int, handoffs: int, work: Path, results: Path) -> None:
    """The dashboard's list, counts and RSS with COUNT dead letters, and the tiers during a replay."""
    replay = min(count, max(_SEND_CHUNK, replay // _SEND_CHUNK * _SEND_CHUNK))
    result = asyncio.run(_bench(count, replay, handoffs, work))
    out = write_results(results, "dlq", datetime.now(UTC), result)
    for key, value in result.items():
        if isinstance(value, float):
            _say(f"   {key}: {value:,.1f}")
        elif isinstance(value, int):
            _say(f"   {key}: {value:,}")
        else:
            _say(f"   {key}: {value}")
    _say(f"   written to {out}")
    click.echo(
        f"bench-dlq: letters={count} list_ms={result['list_ms']:.0f}"
        f" count_ms={result['count_ms']:.0f} rss_mb={result['rss_mb']:.0f}"
        f" replay_due_delay_ms={result['replay_due_delay_ms']:.0f}"
    )


if __name__ == "__main__":
    main()
