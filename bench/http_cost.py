"""CPU per request of the connector's HTTP path: `connector.http1` driven directly (the connector's
`Http1Sender`), httpx over `connector.http1` (the path before it), and httpx over httpx-aiohttp
(the stack before that: a development dependency, kept for this comparison).

The client's CPU time (`time.process_time`) per request, `CONCURRENCY` requests in flight, a
JSON batch of `EVENTS_PER_BATCH` events (~2 KB), against devstack's destination in another
process (its CPU is not counted). Each variant runs twice, alternated, in one run:
- `post`: one POST of the batch's body: `Http1Sender.post` of a prepared route (`direct`), or
  `client.post(url, content=..., headers=...)` on an httpx client (`httpx`, `old`);
- `deliverer`: the connector's own call path, `Deliverer.deliver` of one batch (encoding,
  headers, metrics, classification), Kafka a fake that is never called, over each sender
  (the httpx clients through `HttpxSender`), so its ratios are what the request path changes.
The ratios to `httpx` are printed per round; the last line has each variant's lower figure.

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
from connector.http_client import destination_transport, http_client
from connector.rebatch import Batch
from connector.sender import Http1Sender, HttpxSender, Route, Sender

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


def _send(sender: Http1Sender, url: str) -> Request:
    content = b"[" + b",".join(event.value for event in _batch(0).events) + b"]"
    route = Route.of(url, {"Content-Type": "application/json"})
    extra = [("Idempotency-Key", "0123456789abcdef")]

    async def one(seq: int) -> None:
        answer = await sender.post(route, content, extra)
        if answer.status != 200:
            raise RuntimeError(f"the destination answered {answer.status}")

    return one


def _deliver(sender: Sender, dest: Destination, batches: list[Batch]) -> Request:
    deliverer = Deliverer(sender, dest, Diverter(RefusingProducer("http_cost"), dest))

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
        timeout_s = dest.request_timeout_s
        transport = destination_transport(dest)
        stack.push_async_callback(transport.aclose)
        direct = Http1Sender(transport, timeout_s=timeout_s)
        new = await stack.enter_async_context(http_client(dest))
        old = await stack.enter_async_context(_old_client(dest))
        variants = {
            "old post": _post(old, url),
            "httpx post": _post(new, url),
            "direct post": _send(direct, url),
            "old deliverer": _deliver(HttpxSender(old, timeout_s=timeout_s), dest, batches),
            "httpx deliverer": _deliver(HttpxSender(new, timeout_s=timeout_s), dest, batches),
            "direct deliverer": _deliver(direct, dest, batches),
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
        before = figures.get(f"httpx {path}")
        for label in ("old", "direct"):
            other = figures.get(f"{label} {path}")
            if before and other:
                ratio = other[-1] / before[-1]
                print(f"round {round_}  {path}: {label}/httpx = {ratio:.2f}", flush=True)


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
