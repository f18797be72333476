"""An entries file for `hifi-tenants`: TOML or JSON, one `[tenants.ID]` table per tenant, validated like the catalog.

    [tenants.acme]                     # JSON: {"tenants": {"acme": {...}, ...}}
    enabled = true
    values = { api_key = "${ACME_API_KEY}", region = "eu" }
    filter = { field = "type", in = ["play", "stop"] }

A string of `values` may hold `${VAR}`, read from the environment (`$$` is a literal `$`), so
the file itself need not hold the secrets; such a value must then be printable ASCII on one
line. Every entry is checked against the destination's templates too (a value they use is
missing, a rendered header is not a header value): what is pushed is what the connector will
accept. A problem is one line naming the file, the tenant and the key, never a value.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import orjson

from config.catalog import read_text
from config.destination import Destination
from config.env_refs import resolve_env
from hifi.errors import ConfigError, EntryRefused
from tenants.entry import TenantEntry, parse_entry
from tenants.lookups import RouteDecoder


def read_entries(path: Path, dest: Destination, environ: Mapping[str, str]) -> dict[str, bytes]:
    """Every tenant of the file, as the JSON Redis will hold, in the file's order."""
    tables = _tenant_tables(path)
    decoder = RouteDecoder(dest, str(path))
    found: dict[str, bytes] = {}
    for tenant, table in tables.items():
        where = f"tenants.{tenant}.values"
        if isinstance(table, dict) and isinstance(table.get("values"), dict):
            table = {
                **table,
                "values": {
                    name: resolve_env(value, path, name, environ, table=where)
                    if isinstance(value, str) and "$" in value
                    else value
                    for name, value in table["values"].items()
                },
            }
        try:
            raw = encode(parse_entry(str(path), tenant, table))
            decoder(tenant, raw)  # the destination's templates accept it
        except EntryRefused as exc:
            raise ConfigError(str(exc)) from None
        found[tenant] = raw
    return found


def encode(entry: TenantEntry) -> bytes:
    """An entry as hifi writes it to Redis: JSON without the keys left at their defaults."""
    return orjson.dumps(
        entry.model_dump(by_alias=True, exclude_defaults=True), option=orjson.OPT_SORT_KEYS
    )


def _tenant_tables(path: Path) -> dict[str, Any]:
    """The file's `tenants` table; a file that is not one is a one-line `ConfigError`."""
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise ConfigError(f"{path}: an entries file is .toml or .json, not {suffix or 'neither'}")
    text = read_text(path)
    try:
        document = tomllib.loads(text) if suffix == ".toml" else msgspec.json.decode(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(document, dict) or set(document) != {"tenants"}:
        keys = ", ".join(sorted(document)) if isinstance(document, dict) else type(document)
        raise ConfigError(
            f"{path}: the file holds one table, tenants (tenants.ID per tenant); found {keys}"
        )
    tables = document["tenants"]
    if not isinstance(tables, dict):
        raise ConfigError(f"{path}: key 'tenants' must be a table of tenants (tenants.ID)")
    return tables
