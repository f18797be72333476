"""Every hifi component over one-way TLS (stunnel in front of Tansu, which advertises the TLS
port): the connector delivers, hands a failing batch to the retrier and dead-letters a poison
event; the retrier takes the hand-off back; `retrier dlq list` reads the dead letter; the auditor
counts the events. All run as real processes given only the `HIFI_KAFKA_*` TLS variables."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from devstack.destination import Reply, TestDestination
from devstack.kafka_tools import ids_in, produce_events
from devstack.ports import free_port
from devstack.tls import TlsKafka
from hifi.kafka import admin as kafka_admin
from tests.auditor.support import audited_destination, tables
from tests.helpers import events, start_daemon, until, wait_exit
from tests.kafka_security.support import run_cli, started_tls

pytestmark = [pytest.mark.integration]
POISON = "e-25"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsKafka]:
    yield from started_tls(tmp_path_factory)


async def test_connector_retrier_dlq_and_auditor_work_over_tls(
    tls: TlsKafka,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """Over TLS: every event is delivered but the poison one, which is dead-lettered; the first
    batch, answered 503 until its local attempts run out, goes to NAME.retry_in, the retrier
    re-offers it and the connector delivers it; `dlq list` shows the poison event and the
    auditor counts all 30 events of the minute."""
    settings = tls.settings()
    await kafka_admin.ensure_topics(settings, [unique], partitions=1)
    sent = events(30)
    await produce_events(settings, unique, sent)
    destination.reject_ids({POISON})
    destination.script(Reply(503), Reply(503))  # the first batch's two local attempts
    dest = audited_destination(
        catalog_dir,
        unique,
        destination.url,
        unique,
        max_batch_records=10,
        max_in_flight=1,
        retry_tiers_s=[1.0],
    )
    catalog = ["--dest", unique, "--catalog", str(catalog_dir), "--metrics-port"]
    auditor_port = free_port()
    started = {
        "connector": [*catalog, "0"],
        "retrier": [*catalog, "0"],
        "auditor": [
            *catalog,
            str(auditor_port),
            "--archive",
            str(tmp_path / "archive"),
            "--archive-roll-s",
            "0.5",
        ],
    }
    for module, args in started.items():
        log = tmp_path / f"{module}.log"
        processes.append(start_daemon(module, args, kafka=settings, log_path=log))
        if module == "connector":  # it creates the topics the others read
            assert await until(lambda: destination.request_count >= 3, 60), log.read_text()

    wanted = {e["id"] for e in sent} - {POISON}
    assert await destination.wait_for_ids(wanted, 90), (tmp_path / "retrier.log").read_text()
    handed_off = await ids_in(settings, dest.retry_in_topic)
    assert handed_off == {f"e-{i}" for i in range(10)}
    assert await ids_in(settings, dest.retry_out_topic) == handed_off  # the retrier took them
    assert await ids_in(settings, dest.dlq_topic) == {POISON}

    code, out, err = await run_cli(
        "retrier", "dlq", "list", "--dest", unique, "--catalog", str(catalog_dir),
        settings=settings,
    )  # fmt: skip
    assert code == 0, err
    [letter] = out.splitlines()
    assert letter.startswith("http_4xx ")
    assert f'body={{"id":"{POISON}"' in letter

    async def counted() -> bool:
        rows = await tables(f"http://127.0.0.1:{auditor_port}", unique) or []
        totals = [sum(row[k] for row in rows) for k in ("entered", "delivered", "dead_lettered")]
        return totals == [30, 29, 1]

    assert await _eventually(counted, 60), await tables(f"http://127.0.0.1:{auditor_port}", unique)
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for module, process in zip(started, processes, strict=True):
        assert await wait_exit(process, 60) == 0, (tmp_path / f"{module}.log").read_text()[-2000:]


async def _eventually(condition: Callable[[], Awaitable[bool]], timeout_s: float) -> bool:
    """Poll an async `condition` (state of another process) every 0.5 s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.5)
    return True
