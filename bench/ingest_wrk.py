"""`make bench-ingest`'s load generator: Debian's `wrk` with a Lua script of ours, one run at a time.

The script builds a pool of request bodies once per thread (`init`), each `batch` NDJSON events
with ids of their own, and hands them out in turn (`request`), so wrk spends nothing per request
on making one. With a rate it paces each thread to that many requests/s (`delay`, against
the monotonic clock through LuaJIT's ffi: Debian's wrk has no `-R`); a thread that falls
behind does not catch up in a burst, so the achieved rate is what is reported. `done` prints
one line, `hifi-wrk {json}`: requests, duration, errors and the latency distribution's
percentiles. wrk measures the client's latency: from a request's first byte written to its
answer's last byte read, so it includes the loopback and wrk's own queueing.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import orjson

WRK = "wrk"
MARK = "hifi-wrk "
BEARER_ENV = "HIFI_BENCH_TOKEN"  # how the script gets the token: never on a command line

SCRIPT = r"""-- bench/ingest_wrk.py: bodies made once, paced by delay(), percentiles printed by done()
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } hifi_timespec;
int clock_gettime(int clk_id, hifi_timespec *tp);
]]
local clock = ffi.new("hifi_timespec")
local BODIES = 64 -- bodies made per thread, handed out in turn
local function now_ms()
  ffi.C.clock_gettime(1, clock) -- CLOCK_MONOTONIC
  return tonumber(clock.tv_sec) * 1000 + tonumber(clock.tv_nsec) / 1e6
end

local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
end

local requests = {}
local index = 0
local interval_ms = 0
local next_ms = nil

function init(args)
  local batch, rate, pad_bytes, label = tonumber(args[1]), tonumber(args[2]), tonumber(args[3]), args[4]
  local pad = string.rep("x", pad_bytes)
  local headers = {
    ["Content-Type"] = "application/x-ndjson",
    ["Authorization"] = "Bearer " .. os.getenv("HIFI_BENCH_TOKEN"),
  }
  local stamp = os.time() * 1000
  for b = 1, BODIES do
    local lines = {}
    for e = 1, batch do
      lines[e] = string.format('{"id":"%s-%d-%d-%d","event_time":%d,"payload":"%s"}',
        label, id, b, e, stamp, pad)
    end
    requests[b] = wrk.format("POST", nil, headers, table.concat(lines, "\n"))
  end
  if rate > 0 then interval_ms = 1000 / rate end
end

function request()
  index = index % #requests + 1
  return requests[index]
end

function delay()
  if interval_ms == 0 then return 0 end
  local now = now_ms()
  if next_ms == nil or next_ms < now then next_ms = now end
  local wait_ms = next_ms - now
  next_ms = next_ms + interval_ms
  return math.floor(wait_ms + 0.5)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'hifi-wrk {"requests":%d,"duration_us":%d,"bytes":%d,"connect_errors":%d,"read_errors":%d,'
    .. '"write_errors":%d,"status_errors":%d,"timeouts":%d,"p50_us":%d,"p95_us":%d,"p99_us":%d,'
    .. '"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(95), latency:percentile(99),
    latency.max, latency.mean))
end
"""


@dataclass(frozen=True)
class WrkRun:
    """What one wrk run did; latencies are wrk's, client side, in microseconds."""

    batch: int
    connections: int
    offered_rps: float | None  # None: as fast as answers come
    requests: int
    duration_us: int
    errors: int  # non-2xx/3xx answers, timeouts, connection errors
    p50_us: int
    p95_us: int
    p99_us: int
    max_us: int

    @property
    def ok_requests(self) -> int:
        return max(0, self.requests - self.errors)

    @property
    def rps(self) -> float:
        return self.ok_requests / (self.duration_us / 1e6) if self.duration_us else 0.0

    @property
    def events_per_s(self) -> float:
        return self.rps * self.batch

    @property
    def events(self) -> int:
        return self.ok_requests * self.batch


def wrk_missing() -> str | None:
    """Why the load generator cannot run, or None."""
    if shutil.which(WRK) is None:
        return "wrk is not installed (apt-get install wrk; `make bench-ingest` does it as root)"
    return None


def parse_done_line(stdout: str) -> dict[str, float]:
    """The `hifi-wrk {json}` line the script's `done` printed."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            parsed: dict[str, float] = orjson.loads(line[len(MARK) :])
            return parsed
    raise RuntimeError(f"wrk printed no {MARK.strip()} line: {stdout[-500:]!r}")


def run(
    url: str,
    token: str,
    *,
    work: Path,
    batch: int,
    connections: int,
    duration_s: float,
    pad_bytes: int,
    label: str,
    rate_rps: float | None = None,
) -> WrkRun:
    """One wrk run of `duration_s` against `url`, one thread, `connections` connections."""
    work.mkdir(parents=True, exist_ok=True)
    script = work / "ingest.lua"
    script.write_text(SCRIPT)
    args = [
        WRK,
        "-t1",
        f"-c{connections}",
        f"-d{max(1, math.ceil(duration_s))}s",
        "--timeout",
        "15s",
        "-s",
        str(script),
        url,
        "--",
        str(batch),
        f"{rate_rps or 0:.3f}",
        str(pad_bytes),
        label,
    ]
    env = {**os.environ, BEARER_ENV: token}
    done = subprocess.run(
        args, capture_output=True, text=True, env=env, timeout=duration_s + 60, check=False
    )
    (work / f"wrk-{label}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"wrk exited with {done.returncode}: {done.stderr[-500:]}")
    line = parse_done_line(done.stdout)
    errors = sum(
        int(line[key])
        for key in ("connect_errors", "read_errors", "write_errors", "status_errors", "timeouts")
    )
    return WrkRun(
        batch=batch,
        connections=connections,
        offered_rps=rate_rps,
        requests=int(line["requests"]),
        duration_us=int(line["duration_us"]),
        errors=errors,
        p50_us=int(line["p50_us"]),
        p95_us=int(line["p95_us"]),
        p99_us=int(line["p99_us"]),
        max_us=int(line["max_us"]),
    )
