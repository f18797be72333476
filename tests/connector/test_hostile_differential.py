"""Every hostile behaviour sent through httpx's own transport and through the connector's: the
connector's never does worse.

Each behaviour of `devstack.hostile` gets one batch from `httpx.AsyncClient` over
`httpx.AsyncHTTPTransport` (httpx's defaults: no redirect followed) and one by the connector's own
path (`connector.sender.opened_sender(dest)`), side by side against one in-process hostile server.
Each reply is judged the connector's way: the attempt bounded by `request_timeout_s` as
`connector.delivery` bounds it, the reply through `connector.reply_policy.classify`,
`httpx.TransportError` and `TimeoutError` as retried, any other exception as a crash, and an
attempt that outlives its bound by a second (a decoder that never yields) as a crash. A classified
2xx counts as delivered only if the server answered that batch's ids 2xx exactly once; otherwise it
is a loss, the worst outcome.

Ranking: delivered once > retried (a hand-off, a redirect's too) > dead-lettered > crash > lost.
A run that timed out, hung or broke in transport with every behaviour sent at once is sent again
alone, one after another, on fresh clients (under a new tag): on a busy machine the bound is the
machine's, and a 4xx answered before its body is read races the client's write; a behaviour that
does it alone too is judged the same.
The behaviours where the connector does better are printed by `test_where_the_connector_does_better`
(run with `-s`); with the specified transport they are the broken-after-2xx replies (a truncated,
reset, endless or trickled body, odd framing, a bomb or a bad encoding on a 2xx) and the 307/308
it follows.
"""

from __future__ import annotations

import asyncio
import gc
import ssl
import tracemalloc
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import httpx
import orjson
import pytest

from config.destination import Destination
from connector.reply_policy import classify
from connector.sender import HttpxSender, Route, Sender, opened_sender
from devstack.hostile import BEHAVIOURS, HostileServer
from hifi.errors import DestinationRejected, DestinationUnavailable
from tests.helpers import make_destination

# every behaviour twice, a TLS listener in a thread: in `make test`, not the quick tier
pytestmark = [pytest.mark.slow, pytest.mark.integration]

TIMEOUT_S = 2.0
HANG_SLACK_S = 1.0
BOMB_BYTES = 64 << 20  # inflated; the e2e run uses 1 GiB
SEQUENCES = {"close_each_reply": 4, "close_late": 4}  # sent again and again on one client
BOMB_MEMORY_BYTES = 4 << 20  # a bomb may cost about the 1 MiB body cap, not its inflated size


class Rank(IntEnum):
    """How well a client fared, worst first."""

    LOST = 0  # classified 2xx, yet the server did not answer these ids 2xx exactly once
    CRASH = 1  # an exception the connector would not catch, or a hang past the bound
    DEAD_LETTERED = 2
    RETRIED = 3
    DELIVERED = 4


@dataclass(frozen=True, slots=True)
class Judged:
    rank: Rank
    detail: str


@dataclass(frozen=True, slots=True)
class Duel:
    httpx: Judged
    connector: Judged


@pytest.fixture(scope="module")
async def duels(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Duel]]:
    """Every behaviour once through each client, side by side; judged once all are answered."""
    async with HostileServer(bomb_bytes=BOMB_BYTES) as server:
        dest = _destination(tmp_path_factory.mktemp("hostile-diff"), server)
        trust = ssl.create_default_context(cadata=server.ca_pem.decode())

        def client() -> httpx.AsyncClient:
            transport = httpx.AsyncHTTPTransport(verify=trust)
            return httpx.AsyncClient(transport=transport, timeout=TIMEOUT_S)

        async with client() as plain, opened_sender(dest) as ours:
            theirs = HttpxSender(plain, timeout_s=TIMEOUT_S)
            runs = [
                _run(server, sender, tag, name)
                for name in BEHAVIOURS
                for tag, sender in (("httpx", theirs), ("connector", ours))
            ]
            answers = await asyncio.gather(*runs)
        # sent again on fresh clients: no connection the first round's replies closed is reused
        async with client() as plain, opened_sender(dest) as ours:
            senders = {"httpx": HttpxSender(plain, timeout_s=TIMEOUT_S), "connector": ours}
            # one at a time: sent all at once, a busy machine timed the reference out again
            rerun = [
                await _run(server, senders[tag], tag, name, again=True)
                for tag, _, name, sent in answers
                if any(outcome in (TIMED_OUT, BROKEN, Rank.CRASH) for _, outcome in sent)
            ]
        redone = {(tag, name) for tag, _, name, _ in rerun}
        answers = [answer for answer in answers if (answer[0], answer[2]) not in redone] + rerun
        await asyncio.sleep(0.5)  # the server's last records after its final writes
        judged = {
            (tag, name): _judge(server, url_tag, name, sent) for tag, url_tag, name, sent in answers
        }
        yield {
            name: Duel(judged[("httpx", name)], judged[("connector", name)]) for name in BEHAVIOURS
        }


def _destination(directory: Path, server: HostileServer) -> Destination:
    ca_file = directory / "hostile-ca.pem"
    ca_file.write_bytes(server.ca_pem)
    return make_destination(
        directory,
        "hostile",
        server.url("tls_client_cert"),  # https: its CA is trusted; any URL may be posted to
        "hostile",
        request_timeout_s=TIMEOUT_S,
        max_in_flight=128,
        follow_redirects=True,
        redirect_trusted_origins=[server.origins["trusted"]],
        allow_private_destinations=True,
        tls_ca_file=str(ca_file),
    )


Sent = list[tuple[list[str], str | Rank]]  # per request: its ids, and "2xx" or how it failed
TIMED_OUT = "timed out"  # judged as retried
BROKEN = "transport error"  # judged as retried


async def _run(
    server: HostileServer, sender: Sender, tag: str, name: str, *, again: bool = False
) -> tuple[str, str, str, Sent]:
    """The client's tag, the tag its URLs carry (another when sent `again`), the behaviour."""
    url_tag = f"{tag}-again" if again else tag
    sent: Sent = []
    for n in range(SEQUENCES.get(name, 1)):
        ids = [f"{url_tag}-{name}-{n}-{i}" for i in range(3)]
        body = orjson.dumps([{"id": event_id, "payload": "x" * 40} for event_id in ids])
        sent.append((ids, await attempt(sender, server.url(name, url_tag), body)))
        await asyncio.sleep(0.1)  # the behaviour: the next request races close_late's close
    return tag, url_tag, name, sent


async def attempt(sender: Sender, url: str, body: bytes) -> str | Rank:
    """One POST judged the connector's way: "2xx", or the rank of its failure."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        async with asyncio.timeout(TIMEOUT_S):
            answer = await sender.post(
                Route.of(url, {"Content-Type": "application/json"}), body, ()
            )
        classify(answer)
    except DestinationUnavailable:  # 5xx, 429, 1xx, a redirect (Moved)
        outcome: str | Rank = Rank.RETRIED
    except DestinationRejected:
        outcome = Rank.DEAD_LETTERED
    except httpx.TransportError:
        outcome = BROKEN
    except TimeoutError:
        outcome = TIMED_OUT
    except Exception:  # anything else escapes the connector's delivery: a crash
        outcome = Rank.CRASH
    else:
        outcome = "2xx"
    if loop.time() - started > TIMEOUT_S + HANG_SLACK_S:
        return Rank.CRASH
    return outcome


def _judge(server: HostileServer, tag: str, name: str, sent: Sent) -> Judged:
    """The worst outcome over the requests sent to one behaviour by one client."""
    answered = Counter(server.record(name, tag).delivered)
    ranks = []
    for ids, outcome in sent:
        if isinstance(outcome, Rank):
            ranks.append(outcome)
        elif outcome in (TIMED_OUT, BROKEN):
            ranks.append(Rank.RETRIED)
        else:  # "2xx": delivered only if the server answered each id 2xx exactly once
            once = all(answered[event_id] == 1 for event_id in ids)
            ranks.append(Rank.DELIVERED if once else Rank.LOST)
    worst = min(ranks)
    return Judged(worst, ", ".join(r.name.lower() for r in ranks))


@pytest.mark.parametrize("name", list(BEHAVIOURS))
def test_connector_never_does_worse_than_httpx(duels: dict[str, Duel], name: str) -> None:
    """Through the connector's transport a behaviour ends at least as well as through httpx's."""
    duel = duels[name]
    assert duel.connector.rank >= duel.httpx.rank, (
        f"{name}: connector {duel.connector.detail} < httpx {duel.httpx.detail}"
        f" ({BEHAVIOURS[name].doc})"
    )


def test_where_the_connector_does_better(duels: dict[str, Duel]) -> None:
    """The table of both clients' outcomes, the behaviours the connector wins named (`-s`)."""
    better = [name for name, duel in duels.items() if duel.connector.rank > duel.httpx.rank]
    for name, duel in duels.items():
        mark = "+" if name in better else " "
        print(f"{mark} {name:26} httpx={duel.httpx.detail:24} connector={duel.connector.detail}")
    print(f"the connector does better on {len(better)}: {', '.join(better)}")
    assert set(duels) == set(BEHAVIOURS)


@pytest.mark.parametrize("name", ["gzip_bomb_500", "gzip_bomb_200"])
async def test_a_gzip_bomb_costs_the_connector_about_the_body_cap(
    name: str, tmp_path: Path
) -> None:
    """A 64 MiB gzip bomb through the connector's client allocates at most ~4 MiB at its peak."""
    async with HostileServer(bomb_bytes=BOMB_BYTES) as server:
        dest = _destination(tmp_path, server)
        async with opened_sender(dest) as ours:
            body = orjson.dumps([{"id": "bomb-0"}])
            await attempt(ours, server.url(name, "warm"), body)  # imports, pools, caches
            gc.collect()
            tracemalloc.start()
            try:
                outcome = await attempt(ours, server.url(name, "measured"), body)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
    assert peak < BOMB_MEMORY_BYTES, f"{name}: peak {peak / 2**20:.1f} MiB ({outcome})"
