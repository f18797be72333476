"""The bench's destination: every setting at its catalog default (the audit trail on), as the connector loads it.

Its tenant lookups (`LOOKUPS`), for the lookup phase, are the only settings that differ.
"""

from __future__ import annotations

from pathlib import Path

from config.destination import Destination

DEST = "bench"


def bench_destination(topic: str, url: str = "http://127.0.0.1/") -> Destination:
    """The bench's destination as the connector loads it: every setting at its catalog default."""
    return Destination(name=DEST, url=url, source_topics=[topic])


# The lookup phase (bench/lookups.py): each tenant's events to its own path with its own key.
# Entries are refreshed every second (whole every 5 s) instead of 2 and 5 minutes, so a probe
# of 20 s keeps reloading from Redis, or keeps failing to when Redis is stopped.
TENANT_FIELD = "tenant"
LOOKUPS = f"""
[lookups]
tenant_field = "{TENANT_FIELD}"
refresh_after_s = 1
bulk_refresh_s = 5

[headers]
X-Api-Key = "{{api_key}}"
"""


def write_catalog(
    directory: Path,
    *,
    url: str,
    topics: list[str],
    audit: bool = True,
    lookups: bool = False,
    concurrency: str | None = None,
    buffer_records: int | None = None,
    max_batch_records: int | None = None,
    body_format: str | None = None,
    decode_url: str | None = None,
) -> None:
    """`bench.toml`: the destination with every setting at its catalog default; `audit=False`
    adds `[accounting] audit = false` (no audit trail), for the trail's cost; `lookups=True`
    routes each event by its tenant (`LOOKUPS`: `URL/{tenant}` with its `X-Api-Key`);
    `concurrency` sets `concurrency` ("fixed" or "adaptive") over its default; with lookups,
    `buffer_records` the events the connector holds (fewer: smaller requests per tenant);
    `max_batch_records` caps the events of a request; `body_format` sets `format`;
    `decode_url`: the records are decoded through this Schema Registry (`[decode]`)."""
    directory.mkdir(parents=True, exist_ok=True)
    listed = ", ".join(f'"{topic}"' for topic in topics)
    target = f"{url.rstrip('/')}/{{tenant}}" if lookups else url
    text = f'url = "{target}"\nsource_topics = [{listed}]\n'
    if lookups:  # the bench's tenants are served on loopback
        text += "allow_private_destinations = true\n"
    if concurrency is not None:
        text += f'concurrency = "{concurrency}"\n'
    if max_batch_records is not None:
        text += f"max_batch_records = {max_batch_records}\n"
    if body_format is not None:
        text += f'format = "{body_format}"\n'
    if not audit:
        text += "\n[accounting]\naudit = false\n"
    if decode_url is not None:
        text += f'\n[decode]\nkind = "schema_registry"\nurl = "{decode_url}"\n'
    if lookups:
        if buffer_records is not None:
            text += LOOKUPS.replace(
                "[lookups]\n", f"[lookups]\nbuffer_records = {buffer_records}\n"
            )
        else:
            text += LOOKUPS
    (directory / f"{DEST}.toml").write_text(text)
