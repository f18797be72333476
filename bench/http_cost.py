"""CPU per request of the connector's HTTP path: httpx over `connector.http1` against the stack it
replaced, httpx over httpx-aiohttp (a development dependency, kept for this comparison).

The client's CPU time (`time.process_time`) per request, `CONCURRENCY` requests in flight, a
JSON batch of `EVENTS_PER_BATCH` events (~2 KB), against devstack's destination in another
process (its CPU is not counted). Each variant runs twice, alternated, in one run:
- `post`: `client.post(url, content=..., headers=...)` on the client as the connector builds it;
- `deliverer`: the connector's own call path, `Deliverer.deliver` of one batch (encoding,
  headers, metrics, classification), Kafka a fake that is never called; the old stack's runs
  today's `Deliverer` over the old client, so its ratio is what the client stack changes.
The ratios new/old are printed per round; the last line has each variant's lower figure.

`python -m bench.http_cost [--requests N]`
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import click
import httpx
from aiokafka import TopicPartition

from bench.memory_batches import RefusingProducer, memory_batch
from bench.processes import destination
from config.destination import Destination
from connector.delivery import Deliverer
from connector.divert import Diverter
from connector.http_client import http_client
from connector.rebatch import Batch

CONCURRENCY = 8
EVENTS_PER_BATCH = 20
WARMUP_REQUESTS = 200
ROUNDS = 2
_TP = TopicPartition("bench.http_cost", 0)
_HEADERS = {"Content-Type": "application/json", "Idempotency-Key": "0123456789abcdef"}

Request = Callable[[int], Awaitable[None]]


def _batch(seq: int) -> Batch:
    return memory_batch(_TP, seq, EVENTS_PER_BATCH, "h", tenant="t1", v="x" * 40)


def _old_client(dest: Destination) -> httpx.AsyncClient:
    """The connector's client before `connector.http1`: httpx over httpx-aiohttp."""
    from httpx_aiohttp import AiohttpTransport  # a development dependency, for this comparison

    limits = httpx.Limits(
        max_connections=dest.max_in_flight, max_keepalive_connections=dest.max_in_flight
    )
    return httpx.AsyncClient(
        timeout=httpx.Timeout(dest.request_timeout_s),
        limits=limits,
        follow_redirects=dest.follow_redirects,
        transport=AiohttpTransport(verify=True, limits=limits),
        headers={"User-Agent": "hifi-connector"},
    )


def _post(client: httpx.AsyncClient, url: str) -> Request:
    content = b"[" + b",".join(event.value for event in _batch(0).events) + b"]"

    async def one(seq: int) -> None:
        response = await client.post(url, content=content, headers=_HEADERS)
        if response.status_code != 200:
            raise RuntimeError(f"the destination answered {response.status_code}")

    return one


def _deliver(client: httpx.AsyncClient, dest: Destination, batches: list[Batch]) -> Request:
    deliverer = Deliverer(client, dest, Diverter(RefusingProducer("http_cost"), dest))

    async def one(seq: int) -> None:
        await deliverer.deliver(batches[seq % len(batches)])

    return one


async def _cpu_per_request_us(one: Request, requests: int) -> float:
    """Client CPU µs per request, `CONCURRENCY` in flight, after a warm-up."""
    for seq in range(WARMUP_REQUESTS):
        await one(seq)
    share = requests // CONCURRENCY

    async def worker(start: int) -> None:
        for seq in range(start, start + share):
            await one(seq)

    began_s = time.process_time()
    await asyncio.gather(*(worker(n * share) for n in range(CONCURRENCY)))
    return 1e6 * (time.process_time() - began_s) / (share * CONCURRENCY)


async def measure(url: str, requests: int) -> dict[str, list[float]]:
    """µs per request of each variant, one figure per round."""
    dest = Destination(
        name="bench-http-cost", url=url, source_topics=[_TP.topic], max_in_flight=CONCURRENCY
    )
    batches = [_batch(seq) for seq in range(requests)]
    figures: dict[str, list[float]] = {}
    async with AsyncExitStack() as stack:
        new = await stack.enter_async_context(http_client(dest))
        variants = {"new post": _post(new, url), "new deliverer": _deliver(new, dest, batches)}
        old = await stack.enter_async_context(_old_client(dest))
        variants = {
            "old post": _post(old, url),
            **variants,
            "old deliverer": _deliver(old, dest, batches),
        }
        for round_ in range(1, ROUNDS + 1):
            for label, one in variants.items():
                us = await _cpu_per_request_us(one, requests)
                figures.setdefault(label, []).append(us)
                print(f"round {round_}  {label:14s} {us:7.1f} µs CPU per request", flush=True)
            _print_ratios(figures, round_)
    return figures


def _print_ratios(figures: dict[str, list[float]], round_: int) -> None:
    for path in ("post", "deliverer"):
        old, new = figures.get(f"old {path}"), figures.get(f"new {path}")
        if old and new:
            print(f"round {round_}  {path}: new/old = {new[-1] / old[-1]:.2f}", flush=True)


@click.command()
@click.option("--requests", default=4000, show_default=True, help="requests per variant and round")
def main(requests: int) -> None:
    """Print the client CPU per request of each variant, alternated, and the ratios."""
    with tempfile.TemporaryDirectory(prefix="hifi-http-cost-") as tmp:
        work = Path(tmp)
        with destination(work / "deliveries.jsonl", work / "destination.log") as url:
            figures = asyncio.run(measure(url, requests))
    summary = " ".join(
        f"{label.replace(' ', '_')}_us={min(us):.0f}" for label, us in figures.items()
    )
    print(f"bench-http-cost: {summary}")


if __name__ == "__main__":
    main()
