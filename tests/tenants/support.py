"""Builders shared by the tenant tests: a destination with `[lookups]`, entries, events with a tenant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from aiokafka import ConsumerRecord, TopicPartition

from config.catalog import Catalog
from config.destination import Destination
from hifi.envelope import Event, parse_records
from tenants.lookups import RouteDecoder
from tenants.route import Route

TENANT_FIELD = "customer"


def write_tenant_destination(
    catalog_dir: Path,
    name: str,
    url: str,
    topic: str,
    *,
    lookups: str = "",
    headers: str = 'X-Api-Key = "{api_key}"\nX-Tenant = "{tenant}"\n',
    extra: str = "",
) -> Destination:
    """A destination whose url and headers are templates, with fast test settings."""
    text = (
        f'url = "{url}"\nsource_topics = ["{topic}"]\nlocal_retry_attempts = 2\n'
        "local_retry_max_backoff_s = 0.05\ncommit_interval_s = 0.2\nshutdown_timeout_s = 10.0\n"
        f"internal_topic_partitions = 2\n{extra}"
        + ("" if "allow_private_destinations" in extra else "allow_private_destinations = true\n")
        + f'[lookups]\ntenant_field = "{TENANT_FIELD}"\n{lookups}'
        f"[headers]\n{headers}"
    )
    (catalog_dir / f"{name}.toml").write_text(text)
    return Catalog(catalog_dir).load(name)


def entry(**keys: Any) -> bytes:
    """An entry as Redis holds it."""
    return orjson.dumps(keys)


def route_of(dest: Destination, tenant: str, **keys: Any) -> Route:
    """The route the connector compiles from such an entry."""
    return RouteDecoder(dest, "test")(tenant, entry(**keys))


def tenant_events(
    tenants: list[Any],
    *,
    topic: str = "src",
    partition: int = 0,
    start: int = 0,
    taken_ms: int = 1,
    **fields: Any,
) -> list[Event]:
    """Events as the connector reads them: the i-th with `customer` = tenants[i] (absent when
    the value is `...`)."""
    records = []
    for i, tenant in enumerate(tenants, start):
        body: dict[str, Any] = {"id": f"e{i}", **fields}
        if tenant is not ...:
            body[TENANT_FIELD] = tenant
        value = orjson.dumps(body)
        records.append(
            ConsumerRecord(topic, partition, i, 1, 0, None, value, None, 3, len(value), ())
        )
    return parse_records(
        TopicPartition(topic, partition),
        records,
        id_field="id",
        event_time_field="t",
        max_bytes=1 << 20,
        taken_ms=taken_ms,
        tenant_field=TENANT_FIELD,
    ).events
