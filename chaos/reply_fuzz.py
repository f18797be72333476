"""`python -m chaos --only reply_fuzz`: the connector's HTTP client against 100,000 hostile replies.

The cases are `tests.connector.reply_fuzz.replies()`, drawn by hypothesis and run on one loopback
rig, `max_in_flight` at a time, while the next ones are drawn. Each broken property is kept once
per place it breaks (the smallest case), run again alone and reduced (`minimize`) for the report.
Memory: the peak RSS (VmHWM) is read after each case; a jump of `MAX_SPIKE_KIB` names the cases
running then as suspects, each of which is run alone with the peak reset (`memory`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as seeded

from connector.sender import Sender
from tests.connector.reply_fuzz import MAX_HOLD_BYTES, Case, Failure, Outcome, ReplyRig, replies

MAX_CASE_RSS_KIB = 32 * 1024  # one case alone: a gzip bomb may cost ~1 MiB, never 100
MAX_SPIKE_KIB = 128 * 1024  # a jump of the peak RSS over the RSS after the last jump
MAX_RUN_RSS_KIB = 512 * 1024  # the whole run: the peak RSS over the RSS at its start
_SUSPECT_EVENTS = 8  # memory jumps whose suspects are run alone
_CHUNK = 1_000  # cases per hypothesis run (its memory of what it drew is dropped after each)


def rss_kib(key: bytes = b"VmRSS:") -> int:
    """The process's RSS now (or `VmHWM:`, its peak since `reset_peak_rss`), in KiB."""
    with open("/proc/self/status", "rb") as status:
        return next((int(line.split()[1]) for line in status if line.startswith(key)), 0)


def reset_peak_rss() -> int:
    """Reset the peak (VmHWM) to the RSS now (Linux `clear_refs` 5); return that RSS in KiB."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    return rss_kib()


async def reproduce(rig: ReplyRig, cases: Sequence[Case]) -> list[Failure]:
    """The failures of the last case, run after the others on one fresh connection, with
    `memory` when the peak RSS grew more than `MAX_CASE_RSS_KIB` while it ran."""
    async with rig.new_sender(1) as sender:
        for earlier in cases[:-1]:
            await rig.run(earlier, sender)
        baseline_kib = reset_peak_rss()
        outcome = await rig.run(cases[-1], sender)
    grown_kib = rss_kib(b"VmHWM:") - baseline_kib
    if grown_kib > MAX_CASE_RSS_KIB:
        grown = f"peak RSS +{grown_kib >> 10} MiB"
        outcome.failures.append(Failure("memory", outcome.kind, grown, cases[-1]))
    return outcome.failures


async def minimize(rig: ReplyRig, failure: Failure, budget_s: float = 10.0) -> Failure | None:
    """A smaller case breaking the same property in the same place, alone (or after the cases
    before it on its connection when alone it does not); None if it does not happen again."""
    deadline_s = time.monotonic() + budget_s

    async def breaks(history: tuple[Case, ...], case: Case) -> bool:
        if case.end == "hold" and len(case.data) > MAX_HOLD_BYTES:
            return False
        found = await reproduce(rig, [*history, case])
        return any(f.signature == failure.signature for f in found)

    history: tuple[Case, ...] = ()
    if not await breaks(history, failure.case):
        history = failure.history
        if not history or not await breaks(history, failure.case):
            return None
    case = failure.case
    if len(case.writes) > 1 and await breaks(history, Case((case.data,), case.end)):
        case = Case((case.data,), case.end)
    if len(case.writes) == 1:
        end = case.end
        for units in (_lines, _bytes):
            data = await _ddmin(
                case.data, units, lambda d: breaks(history, Case((d,), end)), deadline_s
            )
            case = Case((data,), end)
    return replace(failure, case=case, history=history)


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def _bytes(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))] if len(data) <= 4096 else [data]


async def _ddmin(
    data: bytes,
    units_of: Callable[[bytes], list[bytes]],
    breaks: Callable[[bytes], Awaitable[bool]],
    deadline_s: float,
) -> bytes:
    """Remove runs of units (lines, bytes) while `breaks` stays true, until `deadline_s`."""
    units = units_of(data)
    size = max(1, len(units) // 2)
    while size >= 1 and time.monotonic() < deadline_s:
        start, shrunk = 0, False
        while start < len(units) and time.monotonic() < deadline_s:
            candidate = units[:start] + units[start + size :]
            if await breaks(b"".join(candidate)):
                units, shrunk = candidate, True
            else:
                start += size
        if not shrunk:
            size //= 2
    return b"".join(units)


class FuzzRun:
    """A rig on an event loop of its own, fed one case at a time from synchronous code (a
    hypothesis test): `feed` returns once fewer than `max_in_flight` cases are running."""

    def __init__(self, request_timeout_s: float = 0.5, max_in_flight: int = 32) -> None:
        self._runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)
        self.rig = ReplyRig(request_timeout_s, max_in_flight)
        self._runner.run(self.rig.__aenter__())
        self._running: dict[asyncio.Task[None], Case] = {}
        self.kinds: Counter[str] = Counter()
        self.found: dict[tuple[str, str], tuple[int, Failure]] = {}  # count, smallest case
        self.suspects: list[list[Case]] = []
        self._crash: BaseException | None = None  # the rig's own failure, raised by `feed`
        self.start_kib = self._last_kib = reset_peak_rss()
        self.peak_kib = self.start_kib

    def close(self) -> None:
        self._runner.run(self.rig.__aexit__(None, None, None))
        self._runner.close()

    def feed(self, case: Case) -> None:
        self._runner.run(self._feed(case))

    def drain(self) -> None:
        self._runner.run(self._drain())

    def run_one(self, case: Case, sender: Sender | None = None) -> Outcome:
        return self._runner.run(self.rig.run(case, sender))

    def replay(self, *cases: Case) -> list[Failure]:
        """The failures of the last case, run after the others on a connection of their own,
        none beside them (`memory` included)."""
        return self._runner.run(reproduce(self.rig, cases))

    def forget(self) -> None:
        """Clear what was found (the counts stay)."""
        self.found.clear()
        self.suspects.clear()

    def report(self, budget_s: float = 10.0) -> list[Failure]:
        """Every distinct failure found, run again and reduced; those that did not happen again
        are kept as found, but for `slow` (a case held up by another's work). Memory suspects
        are run alone first."""
        self._runner.run(self._confirm_suspects())
        reduced = []
        for _, failure in self.found.values():
            smaller = self._runner.run(minimize(self.rig, failure, budget_s))
            if smaller is not None:
                reduced.append(smaller)
            elif failure.prop != "slow":
                reduced.append(replace(failure, detail=f"{failure.detail} (not again alone)"))
        return reduced

    async def _feed(self, case: Case) -> None:
        # a large reply (a bomb) may hold the loop: run alone, it times out no case beside it
        alone = len(case.data) > MAX_HOLD_BYTES
        if alone:
            await self._drain()
        task = asyncio.create_task(self._one(case))
        self._running[task] = case
        task.add_done_callback(self._done)
        while len(self._running) >= (1 if alone else self.rig.max_in_flight):
            await asyncio.wait(list(self._running), return_when=asyncio.FIRST_COMPLETED)

        self._raise_crash()

    async def _drain(self) -> None:
        while self._running:
            await asyncio.wait(list(self._running))
        self._raise_crash()

    def _raise_crash(self) -> None:
        crash, self._crash = self._crash, None
        if crash is not None:
            raise crash

    def _done(self, task: asyncio.Task[None]) -> None:
        case = self._running.pop(task)
        if not task.cancelled() and task.exception() is not None:
            self._crash = task.exception()
        peak_kib = rss_kib(b"VmHWM:")
        self.peak_kib = max(self.peak_kib, peak_kib)
        if peak_kib - self._last_kib > MAX_SPIKE_KIB:
            if len(self.suspects) < _SUSPECT_EVENTS:
                self.suspects.append([case, *self._running.values()])
            self._last_kib = reset_peak_rss()

    async def _one(self, case: Case) -> None:
        outcome = await self.rig.run(case)
        self.kinds[outcome.kind] += 1
        status = outcome.final_status
        if outcome.kind != "delivered" and status is not None and 200 <= status < 300:
            self.kinds["2xx read, not delivered"] += 1
        for failure in outcome.failures:
            self._keep(failure)

    def _keep(self, failure: Failure) -> None:
        count, kept = self.found.get(failure.signature, (0, failure))
        if len(failure.case.data) < len(kept.case.data):
            kept = failure
        self.found[failure.signature] = (count + 1, kept)

    async def _confirm_suspects(self) -> None:
        for cases in self.suspects:
            for case in cases:
                memory = [f for f in await reproduce(self.rig, [case]) if f.prop == "memory"]
                if memory:
                    self._keep(memory[0])
                    break


def feed_cases(run: FuzzRun, cases: int, seed: int | None = None) -> int:
    """Draw `cases` cases with hypothesis (in runs of `_CHUNK`) and feed them; the number fed."""
    fed = 0
    while fed < cases:
        before = fed

        def one(case: Case) -> None:
            nonlocal fed
            fed += 1
            run.feed(case)

        test = given(replies())(one)
        if seed is not None:
            test = seeded(seed + fed)(test)
        settings(
            max_examples=min(_CHUNK, cases - fed),
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )(test)()
        if fed == before:
            break
    run.drain()
    return fed


def fuzz(cases: int, seed: int | None = None, request_timeout_s: float = 0.5) -> bool:
    """Run `cases` cases; print what they came to and every distinct failure; True if none."""
    started_s = time.monotonic()
    run = FuzzRun(request_timeout_s)
    try:
        fed = feed_cases(run, cases, seed)
        ran_s = time.monotonic() - started_s
        failures = run.report()
    finally:
        run.close()
    grown_kib = run.peak_kib - run.start_kib
    kinds = " ".join(f"{kind}={count}" for kind, count in sorted(run.kinds.items()))
    print(f"reply_fuzz: cases={fed} in {ran_s:.0f}s ({fed / max(ran_s, 1e-9):.0f}/s); {kinds}")
    print(f"reply_fuzz: RSS {run.start_kib >> 10} MiB at start, peak {run.peak_kib >> 10} MiB")
    if grown_kib > MAX_RUN_RSS_KIB:
        print(f"reply_fuzz: FAILED memory: the peak RSS grew {grown_kib >> 10} MiB over the run")
    for failure in failures:
        count = run.found[failure.signature][0]
        print(f"reply_fuzz: FAILED x{count} {failure}")
        replayed = [*failure.history, failure.case]
        if sum(len(case.data) for case in replayed) <= 4096:  # whole, to reproduce
            print(f"    writes: {[case.writes for case in replayed]!r}")
    print(
        f"reply_fuzz: failures={len(failures)} in {time.monotonic() - started_s:.0f}s", flush=True
    )
    return not failures and grown_kib <= MAX_RUN_RSS_KIB
