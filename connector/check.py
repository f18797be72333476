"""`connector --check [--probe]`: the catalog entry and environment, and with --probe Kafka and the destination."""

from __future__ import annotations

import httpx

from config.catalog import Destination
from config.topics import audit_line, audit_retention_wanted, retention_wanted
from connector.delivery import http_client
from hifi.check import CheckReport, probe_kafka
from hifi.kafka_settings import KafkaSettings


async def check(dest: Destination, settings: KafkaSettings, *, probe: bool) -> CheckReport:
    """What the connector for `dest` would meet at start; the caller prints and exits."""
    report = CheckReport("connector")
    report.ok(f"destination {dest.name}: catalog entry valid, {len(dest.headers)} headers set")
    report.ok(audit_line(dest))
    report.ok(f"kafka settings: bootstrap {settings.bootstrap}, {settings.security_protocol}")
    if not probe:
        return report
    await probe_kafka(
        settings,
        report,
        source_topics=dest.source_topics,
        retention_wanted={**retention_wanted(dest), **audit_retention_wanted([dest])},
    )
    await probe_destination(dest, report)
    return report


async def probe_destination(dest: Destination, report: CheckReport) -> None:
    """TCP, TLS and a HEAD request to the destination's URL: any HTTP status means reachable.

    Never a POST: a check must not deliver anything.
    """
    async with http_client(dest) as client:
        try:
            response = await client.head(dest.url)
        except (httpx.TransportError, TimeoutError) as exc:
            cause = exc.__cause__ or exc
            report.fail(f"destination {dest.url}: unreachable: {type(cause).__name__}: {cause}")
            return
    report.ok(f"destination {dest.url}: reachable (HEAD answered {response.status_code})")
