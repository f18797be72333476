"""`--check` and `--probe`: what a daemon would meet at start, line by line, and the exit code for it.

Configuration problems never reach here: loading the catalog and the environment raises
`ConfigError` first (one line, exit 2). With `--probe` the check also reaches Kafka (and each
daemon adds its own probes, e.g. the connector's destination): unreachable is exit 1, refused
credentials exit 2, warnings (a missing source topic, a retention too short) leave exit 0.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import NoReturn

import click

from hifi.cli import EXIT_FAILURE, EXIT_USAGE
from hifi.durations import for_people_ms
from hifi.errors import ConfigError, HifiError
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from hifi.redaction import mask


@dataclass
class CheckReport:
    """What a check found: a line each, and whether anything was unreachable or refused."""

    prog: str
    unreachable: bool = False
    refused: bool = False
    warnings: int = 0
    lines: list[str] = field(default_factory=list)

    def ok(self, what: str) -> None:
        self._say("ok", what)

    def warn(self, what: str) -> None:
        self.warnings += 1
        self._say("warning", what)

    def fail(self, what: str, *, refused: bool = False) -> None:
        self.refused = self.refused or refused
        self.unreachable = self.unreachable or not refused
        self._say("error", what)

    def finish(self) -> NoReturn:
        """Print the summary and exit: 2 if something refused us, 1 if unreachable, else 0."""
        code = EXIT_USAGE if self.refused else EXIT_FAILURE if self.unreachable else 0
        verdict = {0: "ok", EXIT_FAILURE: "unreachable", EXIT_USAGE: "refused"}[code]
        warned = f", {self.warnings} warning{'s' * (self.warnings != 1)}" if self.warnings else ""
        click.echo(f"{self.prog} check: {verdict}{warned}")
        raise SystemExit(code)

    def _say(self, level: str, what: str) -> None:
        line = f"{level:<8}{mask(what)}"
        self.lines.append(line)
        click.echo(line)


async def probe_kafka(
    settings: KafkaSettings,
    report: CheckReport,
    *,
    source_topics: Collection[str],
    retention_wanted: Mapping[str, int],
) -> None:
    """Reach Kafka, list its topics, and read the retention of the hifi topics that exist."""
    try:
        existing = await kafka_admin.list_topics(settings)
    except ConfigError as exc:  # credentials, TLS or ACLs refused
        report.fail(str(exc), refused=True)
        return
    except HifiError as exc:
        report.fail(str(exc))
        return
    report.ok(f"kafka {settings.bootstrap}: reachable over {settings.security_protocol}")
    for topic in sorted(source_topics):
        if topic in existing:
            report.ok(f"source topic {topic}: exists")
        else:
            report.warn(
                f"source topic {topic}: does not exist; nothing is read from it until it does"
            )
    present = sorted(topic for topic in retention_wanted if topic in existing)
    try:
        found = await kafka_admin.retention_ms(settings, present)
    except HifiError as exc:
        report.warn(f"cannot read the retention of hifi's topics: {exc}")
        return
    for topic in present:
        have, wanted = found.get(topic), retention_wanted[topic]
        if have is None:
            report.ok(f"topic {topic}: exists (its retention is not reported)")
        elif too_short(have, wanted):
            report.warn(
                f"topic {topic}: retention.ms={have} ({for_people_ms(have)}) is shorter than the"
                f" {for_people_ms(wanted)} hifi may need; records would be deleted before their outcome"
            )
        else:
            report.ok(f"topic {topic}: retention {for_people_ms(have)}")
    for topic in sorted(set(retention_wanted) - existing):
        report.ok(
            f"topic {topic}: will be created with retention {for_people_ms(retention_wanted[topic])}"
        )


def too_short(retention_ms: int | None, wanted_ms: int) -> bool:
    """True when a topic keeping records `retention_ms` (None: unknown) may drop them too early."""
    if retention_ms is None or retention_ms < 0:
        return False
    return wanted_ms < 0 or retention_ms < wanted_ms
