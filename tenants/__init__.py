"""Per-tenant routing of a destination's events from entries in Redis, served from a local cache (docs/tenants.md).

- `entry`: a tenant's entry (`TenantEntry`, `parse_entry`); `keys`: its Redis key (`tenants_key`);
- `route`: the route of each event (`Route`, `compile_route`);
- `lookups`: the cache of a destination's entries (`tenant_cache`, `snapshot_path`);
- `cli`: the `hifi-tenants` command.

Each name is imported from the module that defines it, so `hifi-tenants --help` loads none of them.
"""
