"""Tenant entries in Redis against an entries file: what a push changes, what differs, what Redis holds.

Entries are compared as entries (parsed), not as bytes, so key order or spacing is no change. A
difference is named by its keys (`enabled`, `values.api_key`), never by a value: values may be
secrets. An entry Redis holds that cannot be read is a difference of its own (`invalid`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hifi.errors import EntryRefused
from tenants.entry import TenantEntry, parse_entry

INVALID = "the entry in Redis is not valid"


@dataclass
class Comparison:
    """An entries file against what Redis holds, tenant by tenant (each list in the file's order)."""

    added: list[str] = field(default_factory=list)  # in the file only
    changed: dict[str, list[str]] = field(default_factory=dict)  # tenant -> keys that differ
    unchanged: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # in Redis only

    @property
    def same(self) -> bool:
        return not (self.added or self.changed or self.extra)


def compare(wanted: Mapping[str, bytes], held: Mapping[str, bytes], where: str) -> Comparison:
    """What differs between the file's entries (`wanted`) and Redis' (`held`, at `where`)."""
    found = Comparison()
    for tenant, raw in wanted.items():
        if tenant not in held:
            found.added.append(tenant)
            continue
        keys = differing_keys(parse_entry(where, tenant, raw), held[tenant], where, tenant)
        if keys:
            found.changed[tenant] = keys
        else:
            found.unchanged.append(tenant)
    found.extra = [tenant for tenant in held if tenant not in wanted]
    return found


def differing_keys(entry: TenantEntry, raw: bytes, where: str, tenant: str) -> list[str]:
    """The keys (dotted) whose values differ between `entry` and the entry `raw` in Redis."""
    try:
        held = parse_entry(where, tenant, raw)
    except EntryRefused:
        return [INVALID]
    mine, theirs = _flat(entry.model_dump(by_alias=True)), _flat(held.model_dump(by_alias=True))
    return sorted(key for key in mine.keys() | theirs.keys() if mine.get(key) != theirs.get(key))


def shown(entry: TenantEntry, secret_names: frozenset[str]) -> dict[str, Any]:
    """An entry as `hifi-tenants get` prints it: keys at their defaults left out, and every value
    the destination puts into a header as `***`."""
    found = entry.model_dump(by_alias=True, exclude_defaults=True)
    values = found.get("values")
    if values:
        found["values"] = {
            name: "***" if name in secret_names else value for name, value in values.items()
        }
    return found


def _flat(document: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in document.items():
        if isinstance(value, Mapping) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
