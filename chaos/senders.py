"""Senders for the ingest scenarios: concurrent clients posting batches of own ids, each resent until a 2xx."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx
import orjson

from chaos.harness import now_ms

_REQUEST_TIMEOUT_S = 15.0  # more than ingest's two ack waits (events, then accepted facts)
_RETRY_AFTER_MAX_S = 2.0
_CONNECT_BACKOFF_S = 0.2  # a refused or reset connection: the process is restarting


@dataclass
class SendCounts:
    """What the senders saw; `acknowledged` is what a 2xx promised, the loss is counted from it."""

    sent_ids: dict[str, int] = field(default_factory=dict)  # id -> event time (ms), every id sent
    acknowledged: dict[str, int] = field(default_factory=dict)  # ids whose batch got a 2xx
    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    connection_errors: int = 0
    resent: int = 0  # batches posted again after a non-2xx answer or a connection error
    rejected: int = 0  # events a 2xx answer listed as rejected (none are invalid: a bug)
    unanswered: int = 0  # batches that never got a 2xx before the deadline

    def line(self) -> str:
        non_2xx = sum(n for status, n in self.statuses.items() if not 200 <= status < 300)
        return (
            f"requests={self.requests} http_503={self.statuses[503]} non_2xx={non_2xx}"
            f" conn_errors={self.connection_errors} resent={self.resent}"
        )


class Senders:
    """Up to `concurrency` batches in flight to `url`, each resent, same ids, until a 2xx."""

    def __init__(
        self, url: str, token: str, *, name: str, batch_events: int, concurrency: int
    ) -> None:
        self._url = url
        self._headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
        self._name = name
        self._batch_events = batch_events
        self._concurrency = concurrency
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._acknowledged = asyncio.Condition()
        self._client: httpx.AsyncClient | None = None
        self._deadline = float("inf")
        self.counts = SendCounts()

    async def __aenter__(self) -> Senders:
        limits = httpx.Limits(max_connections=self._concurrency)  # one per slot
        self._client = httpx.AsyncClient(timeout=_REQUEST_TIMEOUT_S, limits=limits)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            if self._client is not None:
                await self._client.aclose()

    async def send_paced(self, events: int, rate_per_s: float, deadline_s: float) -> None:
        """Post `events` in batches at `rate_per_s` (slower when every slot is busy); return once
        every batch got its 2xx, or `deadline_s` after the start (the rest counted unanswered)."""
        self._deadline = time.monotonic() + deadline_s
        interval_s = self._batch_events / rate_per_s
        started = time.monotonic()
        for index, first in enumerate(range(0, events, self._batch_events)):
            await asyncio.sleep(max(0.0, started + index * interval_s - time.monotonic()))
            batch = self._batch(first, min(first + self._batch_events, events))
            await self._slots.acquire()  # the bound before the task
            task = asyncio.create_task(self._send(batch), name=f"send-{self._name}-{first}")
            self._tasks.add(task)
            task.add_done_callback(self._release)
            self._reap()
        while self._tasks:
            await asyncio.wait(set(self._tasks))
            self._reap()

    async def wait_for_acknowledged(self, count: int, timeout_s: float) -> bool:
        """True once at least `count` events were acknowledged, False after `timeout_s`."""
        async with self._acknowledged:
            try:
                async with asyncio.timeout(timeout_s):
                    await self._acknowledged.wait_for(
                        lambda: len(self.counts.acknowledged) >= count
                    )
            except TimeoutError:
                return False
        return True

    def _batch(self, first: int, end: int) -> list[dict[str, Any]]:
        batch = []
        for seq in range(first, end):
            event_id, event_ms = f"{self._name}-{seq}", now_ms()
            batch.append({"id": event_id, "event_time": event_ms, "seq": seq})
            self.counts.sent_ids[event_id] = event_ms
        return batch

    def _release(self, task: asyncio.Task[None]) -> None:
        self._slots.release()

    def _reap(self) -> None:
        """Surface a sender task's crash instead of letting it vanish."""
        for task in [t for t in self._tasks if t.done()]:
            self._tasks.discard(task)
            task.result()

    async def _send(self, batch: list[dict[str, Any]]) -> None:
        """Post until a 2xx, the same body each time; 503: after its Retry-After."""
        assert self._client is not None
        body = orjson.dumps(batch)
        counts = self.counts
        first = True
        while time.monotonic() < self._deadline:
            if not first:
                counts.resent += 1
            first = False
            counts.requests += 1
            try:
                response = await self._client.post(self._url, content=body, headers=self._headers)
            except httpx.HTTPError:
                counts.connection_errors += 1
                await asyncio.sleep(_CONNECT_BACKOFF_S)
                continue
            counts.statuses[response.status_code] += 1
            if response.is_success:
                await self._acknowledge(response.json()["results"])
                return
            await asyncio.sleep(_retry_after_s(response))
        counts.unanswered += 1

    async def _acknowledge(self, results: list[dict[str, Any]]) -> None:
        async with self._acknowledged:
            for result in results:
                if result["status"] == "accepted":
                    event_id = result["id"]
                    self.counts.acknowledged[event_id] = self.counts.sent_ids[event_id]
                else:
                    self.counts.rejected += 1
            self._acknowledged.notify_all()


def _retry_after_s(response: httpx.Response) -> float:
    try:
        return min(float(response.headers.get("retry-after", "0.5")), _RETRY_AFTER_MAX_S)
    except ValueError:
        return 0.5
