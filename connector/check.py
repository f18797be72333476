"""`connector --check [--probe]`: the catalog entry and environment; with --probe Kafka, tenant entries, destination."""

from __future__ import annotations

import httpx

from config.destination import Destination
from config.topics import audit_line, audit_retention_wanted, retention_wanted
from connector.delivery import http_client
from hifi.check import CheckReport, probe_kafka
from hifi.errors import EntryRefused, HifiError
from hifi.kafka.settings import KafkaSettings
from hifi.lookup_cache import redis_hash
from hifi.lookup_cache.redis_hash import RedisSettings
from tenants.keys import tenants_key
from tenants.lookups import RouteDecoder


async def check(
    dest: Destination, settings: KafkaSettings, *, probe: bool, redis: RedisSettings | None = None
) -> CheckReport:
    """What the connector for `dest` would meet at start; the caller prints and exits."""
    report = CheckReport("connector")
    report.ok(f"destination {dest.name}: catalog entry valid, {len(dest.headers)} headers set")
    report.ok(audit_line(dest))
    report.ok(f"kafka settings: bootstrap {settings.bootstrap}, {settings.security_protocol}")
    if dest.lookups is not None and redis is not None:
        report.ok(
            f"tenant lookups: field {dest.lookups.tenant_field!r}, entries in hash"
            f" {tenants_key(dest.name)} at {redis.describe()}"
        )
    if not probe:
        return report
    await probe_kafka(
        settings,
        report,
        source_topics=dest.source_topics,
        retention_wanted={**retention_wanted(dest), **audit_retention_wanted([dest])},
    )
    if redis is not None:
        await probe_tenants(dest, redis, report)
    await probe_destination(dest, report)
    return report


async def probe_tenants(dest: Destination, redis: RedisSettings, report: CheckReport) -> None:
    """Read every tenant entry once, as the connector's preload would: how many, how many it
    would refuse (each refusal is a warning naming the tenant and why, never the entry)."""
    decode = RouteDecoder(dest, f"redis hash {tenants_key(dest.name)}")
    async with redis_hash.connected(redis, tenants_key(dest.name)) as store:
        try:
            found = await store.read_all()
        except HifiError as exc:
            report.fail(f"tenant entries: {exc}")
            return
    refused = 0
    for tenant, raw in found.items():
        try:
            decode(tenant, raw)
        except EntryRefused as exc:
            refused += 1
            report.warn(str(exc))
    report.ok(
        f"tenant entries: {len(found) - refused} usable, {refused} refused, in {store.describe()}"
    )


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
