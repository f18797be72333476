"""Per-tenant routing of a destination's events from entries in Redis, served from a local cache (docs/tenants.md)."""

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
