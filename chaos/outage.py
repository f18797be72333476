"""A destination down for longer than `settle_s`: its events wait, late, and nothing is lost.

The destination answers 503 to everything; the connector's breaker opens and its partitions
wait in Kafka, a few batches wait in the retrier. The outage lasts `long_outage_s` (`make
chaos`: 10 minutes, with the default `settle_s` of 5 minutes) and in any case until a minute of
its events became final while it lasted: the auditor then shows them `waiting` (late), not
`missing`. Once the destination is back and every event delivered, the run's account by id and
the auditor's must agree (`chaos/audit.py`), no minute may be down for loss, and the auditor
must never have raised its loss alarm.
"""

from __future__ import annotations

import asyncio
import re
import time

import httpx

from chaos import audit
from chaos.harness import now_ms
from devstack.destination import Reply

_LOOK_EVERY_S = 2.0
_GRACE_S = 45.0  # after the first minute should be final: the auditor's progress and holdings
_ALARMS = re.compile(r'^hifi_auditor_loss_alarms_total\{dest="([^"]+)"\} ([0-9.e+]+)$', re.M)


async def destination_down_past_settle(run: object) -> None:
    """503 for everything from 30 % of the load, until the outage is long enough."""
    from chaos.scenarios import Run, _at, _healthy  # the scenarios import this module

    assert isinstance(run, Run)
    await _at(run, 0.3)
    run.stage.destination.set_faults(1.0, [Reply(503)], seed=run.rng.randrange(1000))
    started = time.monotonic()
    first_final_ms = audit.minute_of(now_ms()) + audit.MINUTE_MS + round(run.settle_s * 1000)
    deadline = max(started + run.size.long_outage_s, time.monotonic() + _GRACE_S)
    deadline += max(0.0, (first_final_ms - now_ms()) / 1000)
    seen_waiting = False
    async with httpx.AsyncClient(timeout=5.0) as client:
        while True:
            rows = await audit.tables(client, run.auditor_url, run.name) or []
            waiting = [r for r in rows if r["final"] and r.get("waiting", 0) > 0]
            if waiting and not seen_waiting:
                seen_waiting = True
                run.notes.append(
                    f"final_while_down={len(waiting)} waiting={sum(r['waiting'] for r in waiting)}"
                    f" missing={sum(r['missing'] for r in waiting)}"
                )
            long_enough = time.monotonic() - started >= run.size.long_outage_s
            if (seen_waiting and long_enough) or time.monotonic() > deadline:
                break
            await asyncio.sleep(_LOOK_EVERY_S)
    _healthy(run)
    run.notes.append(f"outage_s={time.monotonic() - started:.0f}")
    if not seen_waiting:
        run.notes.append("no_minute_final_while_down")


async def after_outage(run: object) -> tuple[str, ...]:
    """What the run must also show: a minute final while it waited, no minute down for loss,
    no loss alarm ever."""
    from chaos.scenarios import Run

    assert isinstance(run, Run)
    problems: list[str] = []
    if "no_minute_final_while_down" in run.notes:
        problems.append("no minute of the outage became final while it lasted")
    async with httpx.AsyncClient(timeout=5.0) as client:
        rows = await audit.tables(client, run.auditor_url, run.name) or []
        lossy = [r["minute"] for r in rows if r.get("down_reason") == "loss"]
        if lossy:
            problems.append(f"minutes down for loss: {lossy}")
        try:
            text = (await client.get(f"{run.auditor_url}/metrics")).text
        except httpx.HTTPError as exc:
            problems.append(f"the auditor's metrics did not answer: {exc}")
            text = ""
    alarms = {dest: float(n) for dest, n in _ALARMS.findall(text)}
    if alarms.get(run.name, 0.0) > 0:
        problems.append(f"loss alarms: {alarms[run.name]:g}")
    elif text and run.name not in alarms:
        problems.append("no hifi_auditor_loss_alarms_total series for the destination")
    return tuple(problems)
