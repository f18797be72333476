"""A destination's tenant lookups: its routes from Redis behind the refresh-ahead cache, and where the snapshot goes."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from config.destination import Destination, Templates
from hifi import redaction
from hifi.files import state_dir
from hifi.lookup_cache.refresh_ahead import RefreshAheadCache
from hifi.lookup_cache.source import CacheSettings, Source
from tenants.entry import parse_entry
from tenants.keys import tenants_key
from tenants.route import Route, compile_route

CACHE_NAME = "tenants"
_RETRY_MAX_S = 30.0  # a failing Redis is tried again at least this often (bulk_refresh_s if less)


def snapshot_path(dest: str, directory: Path | None = None) -> Path:
    """Where the connector of `dest` keeps its last good tenant entries: under `HIFI_STATE_DIR`
    (`~/.local/state/hifi`) unless `directory` is given."""
    return (directory or state_dir()) / "lookups" / f"{dest}.{CACHE_NAME}.json"


class RouteDecoder:
    """Turns a tenant's entry as Redis holds it into its route, for one destination."""

    def __init__(self, dest: Destination, where: str) -> None:
        if dest.lookups is None:
            raise ValueError(f"destination {dest.name!r} has no [lookups]")
        self._templates: Templates = dest.templates()
        self._id_field = dest.id_field
        self._where = where

    def __call__(self, tenant: str, raw: bytes) -> Route:
        """The route; `EntryRefused` says in one line why the entry cannot be used."""
        entry = parse_entry(self._where, tenant, raw)
        return compile_route(
            tenant, entry, self._templates, id_field=self._id_field, where=self._where
        )


def register_secrets(routes: Iterable[Route]) -> None:
    """Mask the secrets of these routes from now on (one registration for a whole load)."""
    redaction.register(secret for route in routes for secret in route.secrets)


def tenant_cache(
    dest: Destination, source: Source, *, snapshot: Path | None
) -> RefreshAheadCache[Route]:
    """The cache of `dest`'s routes from `source` (the hash `tenants_key(dest.name)`)."""
    lookups = dest.lookups
    if lookups is None:
        raise ValueError(f"destination {dest.name!r} has no [lookups]")
    settings = CacheSettings(
        refresh_after_s=lookups.refresh_after_s,
        expire_after_s=lookups.expire_after_s,
        bulk_refresh_s=lookups.bulk_refresh_s,
        retry_max_s=min(_RETRY_MAX_S, lookups.bulk_refresh_s),
    )
    return RefreshAheadCache(
        source,
        RouteDecoder(dest, f"redis hash {tenants_key(dest.name)}"),
        settings,
        dest=dest.name,
        name=CACHE_NAME,
        snapshot_path=snapshot,
        accepted=register_secrets,
    )
