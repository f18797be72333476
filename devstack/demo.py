"""`make demo`: the whole pipeline on embedded defaults, with live progress and a closing account by event id.

Starts a local broker and a flaky destination, produces sample events (some poison, some
malformed), runs the connector, the retrier and the auditor as real processes, prints progress
every second and ends with a summary that accounts for every produced event, then the
auditor's per-minute table beside the demo's own account by id, minute by minute.

`--keep` (`make demo KEEP=1`) leaves everything running after the summary and prints what to
try next; Ctrl-C then stops the daemons (they drain and commit), the destination and the
broker, in that order. `--produce N` adds N sample events to the topic of a running demo.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import msgspec
import orjson
from rich.console import Console
from rich.table import Table

from devstack import kafka_tools
from devstack.broker import LocalBroker
from devstack.destination import Reply, TestDestination
from devstack.ports import free_port
from devstack.processes import start_daemon
from devstack.readiness import until_ready
from hifi.accounting.tables import parse_minute, render
from hifi.errors import HifiError
from hifi.kafka import admin as kafka_admin
from hifi.kafka.producing import open_producer
from hifi.kafka.settings import KafkaSettings

DEST = "demo"
TOPIC = "demo.events"
EVENTS = 20_000
RATE_PER_S = 2_000
POISON_EVERY = 997  # events the destination always answers 400
MALFORMED = 5  # records that are not JSON objects
DEADLINE_S = 180.0
WORK_DIR = Path(".demo")
_LOGS = ("connector.log", "retrier.log", "auditor.log", "tansu.log")
SETTLE_S = 5  # the demo's minutes are final 5 s after they end (300 s by default)
MINUTE_MS = 60_000
_METRIC_RE = re.compile(r"^(hifi_[a-z_]+_total)\{([^}]*)\} ([0-9.e+]+)$", re.M)


@dataclass
class Tally:
    """What the demo has seen so far."""

    produced: set[str] = field(default_factory=set)
    poison: set[str] = field(default_factory=set)
    malformed: int = 0
    minute_of: dict[str, int] = field(default_factory=dict)  # event id -> event-time minute
    malformed_minutes: list[int] = field(default_factory=list)  # by Kafka timestamp


def catalog_text(url: str) -> str:
    return f"""# Written by `make demo`; short retry tiers so the retrier's work shows within a minute.
url = "{url}"
source_topics = ["{TOPIC}"]
max_batch_records = 200
max_in_flight = 8
request_timeout_s = 5.0
local_retry_attempts = 2
local_retry_max_backoff_s = 0.2
retry_after_max_s = 2.0
retry_tiers_s = [2, 4, 8]
max_retry_age_s = 600
internal_topic_partitions = 4

[accounting]
settle_s = {SETTLE_S}
lag_sla_s = 2.0
"""


def sample_event(seq: int, prefix: str = "evt") -> dict[str, object]:
    return {
        "id": f"{prefix}-{seq:06d}",
        "event_time": int(time.time() * 1000),
        "kind": "video.heartbeat",
        "session": f"s-{seq % 97}",
        "position_ms": seq * 250,
        "poison": seq % POISON_EVERY == 0,
    }


async def produce(settings: KafkaSettings, tally: Tally, events: int = EVENTS) -> None:
    """Produce `events` events at RATE_PER_S, plus a few malformed records."""
    async with open_producer(settings) as producer:
        written = await producer.send_all(
            [(TOPIC, None, b"this is not json", []) for _ in range(MALFORMED)]
        )
        tally.malformed = MALFORMED
        tally.malformed_minutes = [m.timestamp - m.timestamp % MINUTE_MS for m in written]
        per_tick = RATE_PER_S // 10
        for start in range(0, events, per_tick):
            batch = [sample_event(seq) for seq in range(start, min(start + per_tick, events))]
            await producer.send_all(
                [(TOPIC, str(e["id"]).encode(), orjson.dumps(e), []) for e in batch]
            )
            for event in batch:
                tally.produced.add(str(event["id"]))
                event_time = int(str(event["event_time"]))
                tally.minute_of[str(event["id"])] = event_time - event_time % MINUTE_MS
                if event["poison"]:
                    tally.poison.add(str(event["id"]))
            await asyncio.sleep(0.1)


async def scrape(client: httpx.AsyncClient, port: int) -> dict[str, float]:
    """Counters from a daemon's /metrics, summed by metric name."""
    try:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    except httpx.HTTPError:
        return {}
    totals: dict[str, float] = {}
    for name, _labels, value in _METRIC_RE.findall(text):
        totals[name] = totals.get(name, 0.0) + float(value)
    return totals


def p95_lag_ms(destination: TestDestination) -> float:
    lags = sorted(
        d.received_ms - d.event_time
        for d in destination.deliveries()[-5000:]
        if isinstance(d.event_time, int)
    )
    return float(lags[int(len(lags) * 0.95)]) if lags else 0.0


@contextlib.contextmanager
def shielded_from_ctrl_c(shield: bool) -> Iterator[None]:
    """Children started inside (with `shield`) never receive SIGINT; SIGTERM still stops them.

    Ctrl-C sends SIGINT to the terminal's whole foreground process group: the demo, make and
    every child. Tansu exits at once on SIGINT, so the daemons could no longer commit while
    they drain. A signal mask is inherited through fork and exec, so children started while
    this thread blocks SIGINT keep it blocked (their own SIGINT handlers never run), and the
    demo stops them itself in order. The demo's own SIGINT stays pending here, then arrives.
    """
    if not shield:
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def dashboard_token_file() -> Path:
    """A fresh token for the retrier's dashboard, in a file only its owner reads (never printed:
    the demo's hints point at the file)."""
    path = WORK_DIR / "dashboard-token"
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(secrets.token_hex(24) + "\n")
    return path


@contextlib.asynccontextmanager
async def daemons(
    catalog: Path, bootstrap: str, ports: tuple[int, int, int], *, keep: bool = False
) -> AsyncIterator[None]:
    """The connector, the retrier and the auditor as real processes; SIGTERM and wait on exit."""
    common = ["--catalog", str(catalog)]
    names = ["connector", "retrier", "auditor"]
    with shielded_from_ctrl_c(keep):
        processes = [
            start_daemon(
                "connector",
                ["--dest", DEST, *common, "--metrics-port", str(ports[0])],
                bootstrap=bootstrap,
                log_path=WORK_DIR / "connector.log",
            ),
            start_daemon(
                "retrier",
                [
                    *("--dest", DEST, *common, "--metrics-port", str(ports[1])),
                    *("--auditor-url", f"http://127.0.0.1:{ports[2]}"),
                    *("--dashboard-token-file", str(dashboard_token_file())),
                ],
                bootstrap=bootstrap,
                log_path=WORK_DIR / "retrier.log",
            ),
            start_daemon(
                "auditor",
                [
                    "--dest",
                    DEST,
                    *common,
                    "--metrics-port",
                    str(ports[2]),
                    "--archive",
                    str(WORK_DIR / "archive"),
                    "--archive-roll-s",
                    "2",
                ],
                bootstrap=bootstrap,
                log_path=WORK_DIR / "auditor.log",
            ),
        ]
    try:
        yield
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for name, process in zip(names, processes, strict=True):
            code = await asyncio.to_thread(process.wait)
            print(f"  {name} exited with {code}")


async def wait_ready(ports: tuple[int, int, int]) -> None:
    """Wait until every daemon answers /readyz (joined its consumer group)."""
    started = time.monotonic()
    if not await until_ready(ports, DEADLINE_S):
        raise RuntimeError(f"a daemon did not become ready; see {WORK_DIR}/*.log")
    print(
        f"connector, retrier and auditor ready after {time.monotonic() - started:.1f}s; producing"
    )


async def follow(
    tally: Tally,
    destination: TestDestination,
    client: httpx.AsyncClient,
    connector_port: int,
    producing: asyncio.Task[None],
) -> None:
    """Print progress every second until every good event is delivered (or the deadline)."""
    started = time.monotonic()
    while time.monotonic() - started < DEADLINE_S:
        await asyncio.sleep(1.0)
        delivered = set(destination.delivered_ids())
        metrics = await scrape(client, connector_port)
        dlq = metrics.get("hifi_connector_dead_letters_total", 0)
        print(
            f"[{time.monotonic() - started:5.1f}s] produced={len(tally.produced):6d} "
            f"delivered={len(delivered):6d} "
            f"local_retries={metrics.get('hifi_connector_local_retries_total', 0):5.0f} "
            f"to_retrier={metrics.get('hifi_connector_handoffs_total', 0):4.0f} "
            f"dlq={dlq:3.0f} lag_p95_ms={p95_lag_ms(destination):6.0f}",
            flush=True,
        )
        expected = len(tally.produced) - len(tally.poison)
        if producing.done() and len(delivered & tally.produced) >= expected:
            break
    await producing


@dataclass(frozen=True)
class Running:
    """Where the parts of a kept demo can be reached."""

    bootstrap: str
    destination_url: str
    connector_port: int
    retrier_port: int
    auditor_port: int
    work_dir: Path
    bin_dir: Path


def shown(path: Path) -> str:
    """`path` relative to the current directory when it is inside it, else absolute."""
    absolute = path.absolute()
    with contextlib.suppress(ValueError):
        return str(absolute.relative_to(Path.cwd()))
    return str(absolute)


def keep_hints(running: Running) -> str:
    """What to try on a demo left running, with its real addresses; the commands can be pasted
    into a shell in the current directory."""
    connector = f"http://127.0.0.1:{running.connector_port}"
    retrier = f"http://127.0.0.1:{running.retrier_port}"
    auditor = f"http://127.0.0.1:{running.auditor_port}"
    auditor_bin = shown(running.bin_dir / "auditor")
    env = f"HIFI_KAFKA_BOOTSTRAP={running.bootstrap}"
    catalog_env = f"{env} HIFI_CATALOG_DIR={shown(running.work_dir / 'catalog')}"
    retrier_bin = shown(running.bin_dir / "retrier")
    python = shown(running.bin_dir / "python")
    logs = " ".join(shown(running.work_dir / name) for name in _LOGS)
    return "\n".join(
        [
            "",
            "still running (KEEP=1): broker, destination, connector, retrier and auditor.",
            f"Try, from {Path.cwd()}:",
            f"  connector     curl -s {connector}/metrics | grep ^hifi_connector_records_total",
            f"                curl -s {connector}/status",
            f"  dashboard     {retrier}/  (to replay from it: the token in"
            f" {shown(running.work_dir / 'dashboard-token')})",
            f"  retrier       curl -s {retrier}/status",
            f"                curl -s {retrier}/readyz",
            f"                curl -s {retrier}/metrics | grep ^hifi_retrier_",
            f"  accounts      {auditor_bin} report --dest {DEST} --url {auditor}",
            f"                {auditor_bin} report --dest {DEST} --availability --url {auditor}",
            f"                {auditor_bin} report --dest {DEST} --archive"
            f" {shown(running.work_dir / 'archive')} --format json",
            f"  dead letters  {catalog_env} {retrier_bin} dlq list --dest {DEST}",
            f"  replay        {catalog_env} {retrier_bin} dlq replay --dest {DEST} --dry-run",
            f"  more events   {env} {python} -m devstack.demo --produce 1000",
            f"                (to {TOPIC}; every {POISON_EVERY}th event is poison)",
            f"  destination   {running.destination_url} (8% faults, 400 for poison events)",
            f"  logs          tail -f {logs}",
            "  stop          Ctrl-C: the daemons drain and commit, then the",
            "                destination and the broker stop (the broker keeps nothing)",
        ]
    )


async def until_stopped() -> None:
    """Wait for Ctrl-C (SIGINT) or SIGTERM."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    print("\nstopping: the daemons drain and commit, then the destination and broker")


async def run(bootstrap: str, *, keep: bool = False, events: int = EVENTS) -> int:
    settings = KafkaSettings(bootstrap=bootstrap)
    tally = Tally()
    WORK_DIR.mkdir(exist_ok=True)
    catalog = WORK_DIR / "catalog"
    catalog.mkdir(exist_ok=True)
    async with TestDestination(record_bodies=False) as destination:
        destination.reject_poison("poison")
        destination.set_faults(
            0.08,
            [Reply(503), Reply(500), Reply(429, retry_after="1"), Reply(200, delay_s=0.3)],
            seed=42,
        )
        (catalog / f"{DEST}.toml").write_text(catalog_text(destination.url))
        await kafka_admin.ensure_topics(settings, [TOPIC], partitions=4)
        ports = (free_port(), free_port(), free_port())
        print(f"broker {bootstrap}; destination {destination.url} (8% faults: 5xx, 429, slow);")
        print(
            f"connector metrics http://127.0.0.1:{ports[0]}/metrics, retrier dashboard "
            f"http://127.0.0.1:{ports[1]}/, auditor http://127.0.0.1:{ports[2]}/tables;"
            f" logs in {WORK_DIR}/"
        )
        async with (
            daemons(catalog, bootstrap, ports, keep=keep),
            httpx.AsyncClient(timeout=2) as client,
        ):
            await wait_ready(ports)
            since_ms = await a_minute_of_our_own(client, ports[2])
            producing = asyncio.create_task(produce(settings, tally, events))
            await follow(tally, destination, client, ports[0], producing)
            if keep:
                code = await summarize(settings, tally, destination)
                code = max(
                    code, await compare_accounts(client, ports[2], tally, destination, since_ms)
                )
                running = Running(
                    bootstrap, destination.url, *ports, WORK_DIR, Path(sys.executable).parent
                )
                print(keep_hints(running), flush=True)
                await until_stopped()
                return code
            code = await summarize(settings, tally, destination)
            return max(code, await compare_accounts(client, ports[2], tally, destination, since_ms))


async def summarize(settings: KafkaSettings, tally: Tally, destination: TestDestination) -> int:
    delivered_list = destination.delivered_ids()
    delivered = set(delivered_list)
    dead = await kafka_tools.dead_letters(settings, DEST)
    lost = tally.produced - delivered - set(dead)
    wrong_dlq = {i for i, reason in dead.items() if i in tally.produced and i not in tally.poison}
    malformed = sum(1 for reason in dead.values() if reason == "malformed")
    lags = sorted(
        d.received_ms - d.event_time
        for d in destination.deliveries()
        if isinstance(d.event_time, int)
    )

    def pct(q: float) -> int:
        return int(lags[min(len(lags) - 1, int(len(lags) * q))]) if lags else 0

    print("\nsummary")
    print(f"  produced      {len(tally.produced)} events + {tally.malformed} malformed records")
    print(
        f"  delivered     {len(delivered & tally.produced)} "
        f"(duplicates {len(delivered_list) - len(delivered)})"
    )
    print(
        f"  dead-lettered {len(set(dead) & tally.produced)} poison (expected "
        f"{len(tally.poison)}), {malformed} malformed (expected {tally.malformed})"
    )
    print(f"  lost          {len(lost)}")
    print(f"  lag ms        p50={pct(0.5)} p95={pct(0.95)} p99={pct(0.99)}")
    ok = not lost and not wrong_dlq and malformed == tally.malformed
    print("demo: OK, every event accounted for" if ok else f"demo: FAILED lost={sorted(lost)[:10]}")
    return 0 if ok else 1


async def a_minute_of_our_own(client: httpx.AsyncClient, port: int) -> int:
    """The start of the first minute this run's events can have, after any minute the auditor
    already holds (an earlier demo's, from the archive they share): a minute of ours is ours
    alone, so the auditor's table and the demo's account compare minute by minute."""
    held: list[int] = []
    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
        reply = await client.get(f"http://127.0.0.1:{port}/tables", params={"dest": DEST})
        held = [
            parse_minute(str(row["minute"])) for row in msgspec.json.decode(reply.content)[DEST]
        ]
    now_ms = int(time.time() * 1000)
    if held and max(held) >= now_ms - now_ms % MINUTE_MS:
        wait_s = (MINUTE_MS - now_ms % MINUTE_MS) / 1000
        print(f"an earlier demo's events are in this minute: starting in {wait_s:.0f} s")
        await asyncio.sleep(wait_s)
    now_ms = int(time.time() * 1000)
    return now_ms - now_ms % MINUTE_MS


async def compare_accounts(
    client: httpx.AsyncClient,
    port: int,
    tally: Tally,
    destination: TestDestination,
    since_ms: int,
) -> int:
    """The auditor's per-minute table from `since_ms` (this run's minutes; an earlier demo's
    stay in the auditor's archive), once final, beside the demo's own account by id; 1 when
    they disagree on any minute."""
    rows = [
        row
        for row in await final_rows(client, port, since_ms)
        if parse_minute(str(row["minute"])) >= since_ms
    ]
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print()
    console.print(render(rows, title=f"the auditor's table ({DEST}, settle_s = {SETTLE_S})"))
    delivered = set(destination.delivered_ids()) & tally.produced
    mine: dict[int, list[int]] = {}  # minute -> [entered, delivered, dead-lettered]
    for event_id, minute in tally.minute_of.items():
        counts = mine.setdefault(minute, [0, 0, 0])
        counts[0] += 1
        counts[1 if event_id in delivered else 2] += 1
    for minute in tally.malformed_minutes:
        counts = mine.setdefault(minute, [0, 0, 0])
        counts[0] += 1
        counts[2] += 1
    theirs = {parse_minute(str(row["minute"])): row for row in rows}
    table = Table(title="the demo's account by id, beside the auditor's", title_justify="left")
    for name in ("minute (UTC)", "entered", "delivered", "dead", "missing", "agree"):
        table.add_column(name, justify="left" if name.startswith("minute") else "right")
    agree = True
    for minute in sorted(set(mine) | set(theirs)):
        entered, ok_count, dead = mine.get(minute, [0, 0, 0])
        row = theirs.get(minute)
        got = (
            (row["entered"], row["delivered"], row["dead_lettered"], row["missing"])
            if row
            else (0, 0, 0, 0)
        )
        same = got == (entered, ok_count, dead, 0)
        agree = agree and same
        table.add_row(
            time.strftime("%H:%M", time.gmtime(minute / 1000)),
            f"{entered} / {got[0]}",
            f"{ok_count} / {got[1]}",
            f"{dead} / {got[2]}",
            f"0 / {got[3]}",
            "yes" if same else "[bold red]NO[/]",
        )
    console.print(table)
    print("(each cell: the demo's count by id / the auditor's)")
    print("auditor: OK, it agrees with the demo's account" if agree else "auditor: DISAGREES")
    return 0 if agree else 1


async def final_rows(
    client: httpx.AsyncClient, port: int, since_ms: int
) -> list[dict[str, object]]:
    """The auditor's rows from `since_ms` once every one is final (or at the deadline)."""
    print(f"\nwaiting for the auditor's minutes to settle ({SETTLE_S}s after each minute ends)")
    started = time.monotonic()
    rows: list[dict[str, object]] = []
    while time.monotonic() - started < MINUTE_MS / 1000 + SETTLE_S + 30:
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            params = {"dest": DEST, "from": str(since_ms)}
            reply = await client.get(f"http://127.0.0.1:{port}/tables", params=params)
            rows = msgspec.json.decode(reply.content)[DEST]
            if rows and all(row["final"] for row in rows):
                break
        await asyncio.sleep(1.0)
    return rows


async def produce_more(settings: KafkaSettings, count: int) -> int:
    """Produce `count` more sample events (ids `moreHHMMSS-NNNNNN`) to the demo's topic."""
    prefix = "more" + time.strftime("%H%M%S")
    batch = [sample_event(seq, prefix) for seq in range(1, count + 1)]
    async with open_producer(settings) as producer:
        for start in range(0, count, 1000):
            await producer.send_all(
                [
                    (TOPIC, str(e["id"]).encode(), orjson.dumps(e), [])
                    for e in batch[start : start + 1000]
                ]
            )
    poison = sum(1 for e in batch if e["poison"])
    print(f"produced {count} events to {TOPIC} on {settings.bootstrap} ({poison} poison)")
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devstack.demo", description=__doc__)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave everything running after the summary and print what to try; Ctrl-C stops it",
    )
    parser.add_argument(
        "--events",
        type=int,
        default=EVENTS,
        metavar="N",
        help=f"how many sample events the demo produces (default {EVENTS:,})",
    )
    parser.add_argument(
        "--produce",
        type=int,
        metavar="N",
        help="only produce N more sample events to a running demo ($HIFI_KAFKA_BOOTSTRAP)",
    )
    options = parser.parse_args(argv)
    if options.produce is not None and (options.produce < 1 or options.keep):
        parser.error("--produce takes a positive count and no --keep")
    if options.events < 1:
        parser.error("--events takes a positive count")
    return options


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(argv)
    if options.produce is not None:
        try:
            sys.exit(asyncio.run(produce_more(KafkaSettings.from_env(), options.produce)))
        except HifiError as exc:
            sys.exit(f"demo: {exc}")
    WORK_DIR.mkdir(exist_ok=True)
    with shielded_from_ctrl_c(options.keep):
        broker = LocalBroker(log_path=WORK_DIR / "tansu.log").start()
    try:
        code = asyncio.run(run(broker.bootstrap, keep=options.keep, events=options.events))
    finally:
        broker.stop()
    if options.keep:
        print("  destination and broker stopped")
    sys.exit(code)


if __name__ == "__main__":
    main()
