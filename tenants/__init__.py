"""Per-tenant routing of a destination's events from entries in Redis, served from a local cache (docs/tenants.md)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tenants.entry import TenantEntry, parse_entry
    from tenants.keys import tenants_key
    from tenants.lookups import snapshot_path, tenant_cache
    from tenants.route import Route, compile_route

__all__ = [
    "Route",
    "TenantEntry",
    "compile_route",
    "parse_entry",
    "snapshot_path",
    "tenant_cache",
    "tenants_key",
]

# where each public name lives; imported on first use, so `hifi-tenants --help` loads none of it
_HOMES = {
    "Route": "tenants.route",
    "TenantEntry": "tenants.entry",
    "compile_route": "tenants.route",
    "parse_entry": "tenants.entry",
    "snapshot_path": "tenants.lookups",
    "tenant_cache": "tenants.lookups",
    "tenants_key": "tenants.keys",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
