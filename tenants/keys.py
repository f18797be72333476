"""Where tenant entries live in Redis: one hash per destination, a field per tenant, the entry as JSON.

    hifi:tenants:{dest}    HASH    {tenant id} -> {"enabled": true, "values": {...}, ...}

One hash per destination: `HGETALL` loads every entry of it at once (a consistent view, for the
preload and the periodic full refresh), `HMGET` reloads the entries reads found due, and
`hifi-tenants push` writes with `HSET` (and `HDEL` with `--prune`). The destination's name is in
the key, so destinations sharing a Redis never read each other's entries. The field is the
tenant id exactly as events carry it in the destination's `tenant_field`.
"""

from __future__ import annotations

KEY_PREFIX = "hifi:tenants:"


def tenants_key(dest: str) -> str:
    """The Redis hash holding the tenant entries of destination `dest`."""
    return f"{KEY_PREFIX}{dest}"
