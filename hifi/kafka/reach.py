"""Whether Kafka answers a daemon, and how its clients wait while it does not.

A Kafka client waits for Kafka. A daemon keeps one `KafkaReach`: each of its clients says when
a call failed because Kafka did not answer (`BrokerUnavailable`) and when one was answered
again. While any is failing the daemon is not ready (`/readyz` says which call and since when),
`hifi_kafka_reachable` is 0 and its worker starts no new work; `patiently()` retries a call
with a growing delay until Kafka answers or the daemon is told to stop. Only what retrying
cannot mend ends a daemon: a configuration error (`ConfigError`), a refusal (`BrokerRefused`). A daemon's whole session
runs in `serving()`: one that Kafka ends (at start, or a fetch that failed) starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import prometheus_client
import structlog

from hifi.errors import BrokerUnavailable
from hifi.ops_http import OpsServer, Readiness

__all__ = ["BACKOFF_FIRST_S", "BACKOFF_MAX_S", "KafkaReach", "backoff_s"]

log = structlog.get_logger(__name__)

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0

REACHABLE = prometheus_client.Gauge(
    "hifi_kafka_reachable",
    "1 while this daemon's Kafka calls are answered; 0 while one waits for Kafka (not ready).",
    ["component"],
)

T = TypeVar("T")


def backoff_s(attempt: int) -> float:
    """The wait before retry `attempt` (1, 2, ...): doubling from `BACKOFF_FIRST_S` to the cap."""
    return float(min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** min(attempt - 1, 16)))


class KafkaReach:
    """Which of a daemon's Kafka calls wait for Kafka now, since when, and why."""

    def __init__(self, component: str | None = None, *, ops: OpsServer | None = None) -> None:
        """`component`: exported as `hifi_kafka_reachable{component}`; `ops`: the daemon's ops
        server, not ready while a call waits."""
        self._failing: dict[str, tuple[float, str]] = {}  # call -> (monotonic since, error)
        if component is not None:
            REACHABLE.labels(component).set_function(lambda: float(self.reachable))
        if ops is not None:
            ops.require(self.readiness)

    @property
    def reachable(self) -> bool:
        """No call waits for Kafka."""
        return not self._failing

    def failed(self, call: str, error: str) -> None:
        """`call` got no answer from Kafka (the first failure of a streak is logged)."""
        if call not in self._failing:
            log.warning("kafka_waiting", call=call, error=error)
            self._failing[call] = (time.monotonic(), error)
        else:
            self._failing[call] = (self._failing[call][0], error)

    def answered(self, call: str) -> None:
        """`call` was answered: if it was waiting, that is logged with how long it waited."""
        failing = self._failing.pop(call, None)
        if failing is not None:
            waited_s = round(time.monotonic() - failing[0], 1)
            log.info("kafka_answered", call=call, waited_s=waited_s)

    def forget(self, call: str) -> None:
        """`call` is no longer made (its client stopped): it neither waits nor answered."""
        self._failing.pop(call, None)

    def readiness(self) -> Readiness:
        """For `OpsServer.require`: not ready while a call waits for Kafka."""
        if not self._failing:
            return Readiness(True, "kafka: answering")
        now = time.monotonic()
        waits = "; ".join(
            f"{call} for {now - since:.0f} s: {error}"
            for call, (since, error) in sorted(self._failing.items())
        )
        return Readiness(False, f"kafka: waiting: {waits}")

    async def patiently(
        self,
        call: str,
        attempt: Callable[[], Awaitable[T]],
        *,
        stop: asyncio.Event | None = None,
    ) -> T:
        """`attempt()` until Kafka answers it: a `BrokerUnavailable` is retried after
        `backoff_s`; a stop request ends the wait by raising the last failure. Any other error
        is raised at once."""
        tries = 0
        try:
            while True:
                try:
                    result = await attempt()
                except BrokerUnavailable as exc:
                    tries += 1
                    self.failed(call, str(exc))
                    if stop is not None and stop.is_set():
                        raise
                    await _sleep(backoff_s(tries), stop)
                    if stop is not None and stop.is_set():
                        raise
                    continue
                self.answered(call)
                return result
        except BaseException:
            self.forget(call)  # nobody waits on it any more
            raise

    async def run_daemon(
        self,
        ops: OpsServer | None,
        session: Callable[[], Awaitable[None]],
        *,
        stop: asyncio.Event,
    ) -> None:
        """A daemon's `run()`: its ops server up the whole time, its `session` run `serving()`."""
        async with contextlib.AsyncExitStack() as stack:
            if ops is not None:
                await stack.enter_async_context(ops.running())
            await self.serving(session, stop=stop)

    async def serving(self, session: Callable[[], Awaitable[None]], *, stop: asyncio.Event) -> None:
        """Run a daemon's `session` (its clients started, its worker run) until it returns; one
        that ends because Kafka does not answer (at start, or later) is run again after a
        backoff, the daemon not ready meanwhile. Returns once `stop` is set while waiting."""
        try:
            await self.patiently("connect", session, stop=stop)
        except BrokerUnavailable:
            if not stop.is_set():
                raise
            log.info("kafka_wait_stopped", reason="asked to stop while waiting for Kafka")


async def _sleep(delay_s: float, stop: asyncio.Event | None) -> None:
    if stop is None:
        await asyncio.sleep(delay_s)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), delay_s)
