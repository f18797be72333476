"""The soak's faults, done to the running stack at their planned times, each timed as it ran."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Coroutine
from typing import Any

from devstack.destination import Reply
from soak import schedule
from soak.model import Fault
from soak.schedule import PlannedFault
from soak.stack import JOINER, PLAIN, TENANTS_DEST, Stack

_READY_TIMEOUT_S = 180.0
_SIGTERM_TIMEOUT_S = 60.0


class FaultRunner:
    """Runs a schedule against `stack`; `done` holds each fault as it ran, `active` those running."""

    def __init__(self, stack: Stack, planned: list[PlannedFault], started: float) -> None:
        """`started`: the run's `time.monotonic()` origin, which the schedule counts from."""
        self._stack = stack
        self._planned = planned
        self._started = started
        self.done: list[Fault] = []
        self._kinds: dict[str, Callable[[PlannedFault], Coroutine[Any, Any, str]]] = {
            schedule.KILL9: self._kill9,
            schedule.SIGTERM_RESTART: self._sigterm_restart,
            schedule.MEMBER_JOIN_LEAVE: self._member_join_leave,
            schedule.BROKER_FROZEN: self._broker_frozen,
            schedule.DESTINATION_DOWN: self._destination_down,
            schedule.UNAUTHORIZED: self._unauthorized,
            schedule.REDIS_STOPPED: self._redis_stopped,
        }

    async def run(self) -> None:
        """Every fault at its time, overlapping ones concurrently; returns when all have ended."""
        async with asyncio.TaskGroup() as group:
            for fault in self._planned:
                group.create_task(self._at(fault), name=f"fault-{fault.kind}-{fault.start_s:.0f}")

    def _now_s(self) -> float:
        return time.monotonic() - self._started

    async def _at(self, planned: PlannedFault) -> None:
        await asyncio.sleep(max(0.0, planned.start_s - self._now_s()))
        start_s = self._now_s()
        detail = await self._kinds[planned.kind](planned)
        self.done.append(Fault(planned.kind, planned.target, start_s, self._now_s(), detail))

    async def _ready_again(self, name: str) -> str:
        daemon = self._stack.daemons[name]
        started = time.monotonic()
        if not await daemon.ready(timeout_s=_READY_TIMEOUT_S):
            return f"not ready again within {_READY_TIMEOUT_S:.0f} s"
        return f"ready again in {time.monotonic() - started:.1f} s"

    async def _kill9(self, planned: PlannedFault) -> str:
        daemon = self._stack.daemons[planned.target]
        pid = daemon.pid
        daemon.kill9()
        await asyncio.sleep(1.0)  # the supervisor's restart, then the new process's start
        return f"SIGKILL pid {pid}; {await self._ready_again(planned.target)}"

    async def _sigterm_restart(self, planned: PlannedFault) -> str:
        daemon = self._stack.daemons[planned.target]
        pid = daemon.pid
        code = await daemon.stop(timeout_s=_SIGTERM_TIMEOUT_S)
        await daemon.start()
        return f"SIGTERM pid {pid}, exit {code}; {await self._ready_again(planned.target)}"

    async def _member_join_leave(self, planned: PlannedFault) -> str:
        joiner = self._stack.connector(JOINER)
        self._stack.daemons[JOINER] = joiner
        await joiner.start()
        try:
            ready = await joiner.ready(timeout_s=_READY_TIMEOUT_S)
            await asyncio.sleep(max(0.0, planned.length_s))
        finally:
            code = await joiner.stop(timeout_s=_SIGTERM_TIMEOUT_S)
            del self._stack.daemons[JOINER]
        return f"{JOINER} {'ready' if ready else 'never ready'}, left with exit {code}"

    async def _broker_frozen(self, planned: PlannedFault) -> str:
        broker = self._stack.broker
        if broker is None:  # not planned on a Kafka of the caller's (`schedule.plan`'s `without`)
            return "no broker of the soak's own to freeze"
        pid = broker.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(planned.length_s)
        finally:
            os.kill(pid, signal.SIGCONT)
        return f"SIGSTOP then SIGCONT to the broker (pid {pid})"

    async def _destination_down(self, planned: PlannedFault) -> str:
        dest = _dest(planned.target)
        destination = self._stack.destinations[dest]
        await destination.set_down(True)
        try:
            await asyncio.sleep(planned.length_s)
        finally:
            await destination.set_down(False)
        return f"{dest} refused connections"

    async def _unauthorized(self, planned: PlannedFault) -> str:
        dest = _dest(planned.target)
        self._stack.destinations[dest].set_faults(1.0, [Reply(401)], seed=self._stack.seed)
        try:
            await asyncio.sleep(planned.length_s)
        finally:
            self._stack.steady(dest)
        return f"{dest} answered 401 to every request"

    async def _redis_stopped(self, planned: PlannedFault) -> str:
        server = self._stack.redis
        await asyncio.to_thread(server.stop)
        try:
            await asyncio.sleep(planned.length_s)
        finally:
            await asyncio.to_thread(server.start)
            await asyncio.to_thread(self._stack.fill_redis)  # no persistence: as after a restore
        return "redis-server stopped, started again and refilled"


def _dest(target: str) -> str:
    return TENANTS_DEST if target.endswith("tenants") else PLAIN
