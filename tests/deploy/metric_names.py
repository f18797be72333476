"""The metric names hifi exposes (from the registry the daemons fill) and those a PromQL
expression reads, for the checks of the alert rules and the Grafana dashboard."""

from __future__ import annotations

import re
from pathlib import Path

import prometheus_client
import yaml

import auditor.metrics  # noqa: F401 - registers the auditor's metrics
import connector.metrics  # noqa: F401 - registers the connector's metrics
import hifi.kafka.reach  # registers hifi_kafka_reachable (every daemon)
import hifi.lookup_cache.metrics  # registers the lookup caches' metrics
import hifi.ops_http  # noqa: F401 - registers hifi_build_info and hifi_ready
import ingest.metrics  # noqa: F401 - registers the ingest service's metrics
import retrier.metrics  # noqa: F401 - registers the retrier's metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "hifi.rules.yml"

# Series Prometheus itself writes: `up` for every target, `ALERTS` for every pending or firing
# alert (HifiOutageAftermath reads which causes fired).
PROMETHEUS_SERIES = frozenset({"up", "ALERTS"})

# The series names each family type is exposed as (the text format's suffixes).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_GROUPINGS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_KEYWORDS = frozenset({"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring"})
_KEYWORDS |= {"group_left", "group_right", "inf", "nan", "atan2"}
_NAME = re.compile(r"(?<![\w:$.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()")


def registry_series() -> set[str]:
    """Every series name the daemons' registry exposes, suffixes included."""
    names: set[str] = set()
    for family in prometheus_client.REGISTRY.collect():
        for suffix in _SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def referenced_names(expr: str) -> set[str]:
    """The series names (and recorded names) a PromQL expression selects: label matchers,
    ranges, grouping labels, functions, keywords and numbers left out."""
    expr = _STRINGS.sub('""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = _GROUPINGS.sub(" ", expr)
    return {name for name in _NAME.findall(expr) if name.lower() not in _KEYWORDS}


def rules() -> list[dict[str, object]]:
    """Every rule of the rule file, recording and alerting, in order."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def duration_s(text: str) -> int:
    """A Prometheus duration (`90s`, `5m`, `1h30m`) in seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    parts = re.findall(r"(\d+)([smhd])", text)
    assert "".join(n + u for n, u in parts) == text, f"duration {text!r}"
    return sum(int(n) * units[u] for n, u in parts)


def recorded_names() -> set[str]:
    return {str(rule["record"]) for rule in rules() if "record" in rule}


def unknown_names(exprs: list[str]) -> dict[str, set[str]]:
    """Per expression, the names it reads that neither the registry, Prometheus nor a
    recording rule of the rule file provides."""
    known = registry_series() | PROMETHEUS_SERIES | recorded_names()
    found = {expr: referenced_names(expr) - known for expr in exprs}
    return {expr: names for expr, names in found.items() if names}
