"""The short version of `make bench-auditor`: real broker, real auditor process, the summary line and its JSON."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from bench.auditor import QUICK_BACKLOG, QUICK_SUSTAINED, QUICK_WAITING

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_BACKLOG_LINE = re.compile(
    r"^bench-auditor: backlog=(\d+) connector_eps=(\d+) auditor_eps=(\d+) keeps_up=(\d+\.\d\d)$"
)
_GROUP_LINE = re.compile(
    r"^bench-auditor: per_cpu_two_over_one=(\d+\.\d\d) two_over_one_drain=(\d+\.\d\d)$"
)
_LINE = re.compile(
    r"^bench-auditor: waiting=(\d+) rss_waiting_mb=(\d+) sustained_eps=(\d+) rss_sustained_mb=(\d+)$"
)


def test_quick_run_ends_with_the_summary_line_of_real_figures(tmp_path: Path) -> None:
    """Every produced event is tracked as waiting; the rates and RSS are measured, not zero."""
    run = subprocess.run(
        [sys.executable, "-m", "bench.auditor", "--quick", "--results-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=360,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    last = run.stdout.strip().splitlines()[-1]
    found = _LINE.match(last)
    assert found, last
    waiting, rss_waiting_mb, sustained_eps, rss_sustained_mb = map(int, found.groups())
    assert waiting == QUICK_WAITING
    assert rss_waiting_mb > 0
    assert sustained_eps > 0
    assert rss_sustained_mb > 0
    [path] = tmp_path.glob("bench-auditor-*.json")
    report = orjson.loads(path.read_bytes())
    assert report["summary"] == last
    assert report["sustained"]["events"] == QUICK_SUSTAINED
    assert report["sustained"]["facts"] > 0
    assert report["sustained"]["max_tracked_events"] == QUICK_SUSTAINED  # nothing settles yet
    assert report["waiting"]["time_past"] == report["sustained"]["time_past"] == 0
    backlog = _BACKLOG_LINE.match(run.stdout.strip().splitlines()[-3])
    assert backlog, run.stdout.strip().splitlines()[-3]
    events, connector_eps, auditor_eps = map(int, backlog.groups()[:3])
    assert events == QUICK_BACKLOG
    assert connector_eps > 0
    assert auditor_eps > 0
    assert report["backlog"]["auditor"]["facts"] > 0  # the connector's own facts were read
    assert report["keeps_up"] == (float(backlog.group(4)) >= 1.0)
    group = _GROUP_LINE.match(run.stdout.strip().splitlines()[-2])
    assert group, run.stdout.strip().splitlines()[-2]
    assert report["group_line"] == group.group(0)
    one, two = report["group"]["one"], report["group"]["two"]
    assert (one["members"], len(two["events"])) == (1, 2)
    assert sum(one["events"]) > 0
    assert sum(two["events"]) > 0
    assert min(two["events"]) > 0  # both members read a share of the source events
    assert float(group.group(1)) > 0
    assert float(group.group(2)) > 0
