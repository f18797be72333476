"""docs/metrics.md lists every hifi metric the daemons register, and no metric that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

import prometheus_client

import auditor.metrics  # noqa: F401 - registers the auditor's metrics
import connector.metrics  # noqa: F401 - registers the connector's metrics
import hifi.lookup_cache.metrics  # registers the lookup caches' metrics
import hifi.memory  # registers the memory release counters
import hifi.ops_http  # registers hifi_build_info
import hifi.worker.gaps  # noqa: F401 - registers hifi_offset_gaps
import ingest.metrics  # noqa: F401 - registers the ingest service's metrics
import retrier.metrics  # noqa: F401 - registers the retrier's metrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_every_metric_is_documented_and_every_documented_one_exists() -> None:
    """The names in the doc's tables are exactly the hifi_* families in the registry."""
    registered = {
        metric.name
        for metric in prometheus_client.REGISTRY.collect()
        if metric.name.startswith("hifi_")
    }
    documented = set(re.findall(r"^\| `(hifi_[a-z0-9_]+)` \|", DOC.read_text(), re.MULTILINE))
    # prometheus_client names counter families without `_total`; the exposition adds it.
    documented = {name.removesuffix("_total") for name in documented}
    assert documented == registered
