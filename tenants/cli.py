"""`hifi-tenants push|get|diff`: a destination's tenant entries between an entries file and Redis.

Redis is `HIFI_REDIS_URL`; the entries of destination NAME are the hash `hifi:tenants:NAME`
(docs/tenants.md). Every entry is validated as the connector will (the catalog's templates
included) before anything is written. Exit codes: 0 done (diff: no difference), 1 Redis
unreachable, a difference (diff) or an entry in Redis that cannot be read (get), 2 bad input
(a flag, the catalog, the entries file) with one line that never quotes a value.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hifi.cli import EXIT_FAILURE, Group, before_subcommand, run_command
from hifi.cli_options import catalog_option, version_option
from hifi.errors import ConfigError, EntryRefused
from hifi.redaction import mask
from tenants.keys import tenants_key

if TYPE_CHECKING:
    from config.destination import Destination
    from hifi.lookup_cache.redis_hash import RedisSettings
    from tenants.store import Comparison

PROG = "hifi-tenants"
_FILE = click.Path(path_type=Path, dir_okay=False, exists=True)


class _AnyVariable(Mapping[str, str]):
    """The environment, where a variable that is not set reads as a stand-in: hifi-tenants sends
    no request, so it needs the catalog's header templates, not the secrets inside them."""

    def __getitem__(self, name: str) -> str:
        return os.environ.get(name, "x")

    def __contains__(self, name: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(os.environ)

    def __len__(self) -> int:
        return len(os.environ)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@version_option(PROG)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Load, show and compare the tenant entries of a destination with `[lookups]` in Redis."""
    before_subcommand(ctx, _quiet_logging)


def _quiet_logging() -> None:
    from hifi.logging import configure_logging

    configure_logging("console", "WARNING", libraries=False)


@cli.command()
@click.option("--dest", required=True, metavar="NAME", help="Destination whose entries to write.")
@click.argument("entries_file", metavar="FILE", type=_FILE)
@click.option("--dry-run", is_flag=True, help="Say what would change; write nothing.")
@click.option("--prune", is_flag=True, help="Also remove the tenants FILE does not list.")
@catalog_option
def push(dest: str, entries_file: Path, dry_run: bool, prune: bool, catalog: Path | None) -> None:
    """Write the tenants of FILE (TOML or JSON) to Redis: new and changed entries (HSET);
    entries Redis holds that FILE does not list stay, unless --prune."""
    import asyncio

    from hifi.lookup_cache import redis_hash
    from tenants.store import compare

    destination, settings = _configured(catalog, dest)
    wanted = _file_entries(entries_file, destination)

    async def work() -> Comparison:
        async with redis_hash.connected(settings, tenants_key(destination.name)) as store:
            found = compare(wanted, await store.read_all(), store.describe())
            if not dry_run:
                changed = [*found.added, *found.changed]
                await store.write({tenant: wanted[tenant] for tenant in changed})
                if prune:
                    await store.delete(found.extra)
            return found

    found = asyncio.run(work())
    for tenant in found.added:
        click.echo(f"added      {tenant}")
    for tenant, keys in found.changed.items():
        click.echo(f"changed    {tenant} ({', '.join(keys)})")
    for tenant in found.extra:
        click.echo(f"{'removed' if prune else 'kept':<10} {tenant} (not in {entries_file})")
    verb = "would push" if dry_run else "pushed"
    removed = len(found.extra) if prune else 0
    click.echo(
        f"{verb} {len(wanted)} entries of {entries_file} to {_where(destination, settings)}:"
        f" {len(found.added)} added, {len(found.changed)} changed,"
        f" {len(found.unchanged)} unchanged, {removed} removed"
    )


@cli.command()
@click.option("--dest", required=True, metavar="NAME", help="Destination whose entries to show.")
@click.argument("tenants", nargs=-1, metavar="[TENANT]...")
@catalog_option
def get(dest: str, tenants: tuple[str, ...], catalog: Path | None) -> None:
    """Print the entries Redis holds (all, or these TENANTs) as an entries file in JSON; every
    value the destination puts into a header is shown as ***."""
    import asyncio

    import orjson

    from hifi.lookup_cache import redis_hash
    from tenants.entry import parse_entry
    from tenants.store import shown

    destination, settings = _configured(catalog, dest)

    async def work() -> dict[str, bytes | None]:
        async with redis_hash.connected(settings, tenants_key(destination.name)) as store:
            if tenants:
                return await store.read(list(tenants))
            return dict(await store.read_all())

    held = asyncio.run(work())
    secret_names = destination.templates().header_value_names
    printed: dict[str, Any] = {}
    problems = []
    for tenant, raw in sorted(held.items()):
        if raw is None:
            problems.append(f"tenant {tenant!r}: no entry in {_where(destination, settings)}")
            continue
        try:
            entry = parse_entry(_where(destination, settings), tenant, raw)
        except EntryRefused as exc:
            problems.append(str(exc))
            continue
        printed[tenant] = shown(entry, secret_names)
    text = orjson.dumps({"tenants": printed}, option=orjson.OPT_INDENT_2).decode()
    click.echo(mask(text))
    for problem in problems:
        click.echo(f"{PROG} get: {mask(problem)}", err=True)
    if problems:
        raise SystemExit(EXIT_FAILURE)


@cli.command()
@click.option("--dest", required=True, metavar="NAME", help="Destination whose entries to compare.")
@click.argument("entries_file", metavar="FILE", type=_FILE)
@catalog_option
def diff(dest: str, entries_file: Path, catalog: Path | None) -> None:
    """Compare FILE with the entries Redis holds: each tenant only in one of them, and the keys
    that differ (never their values); exit 1 when anything differs."""
    import asyncio

    from hifi.lookup_cache import redis_hash
    from tenants.store import compare

    destination, settings = _configured(catalog, dest)
    wanted = _file_entries(entries_file, destination)

    async def work() -> Comparison:
        async with redis_hash.connected(settings, tenants_key(destination.name)) as store:
            return compare(wanted, await store.read_all(), store.describe())

    found = asyncio.run(work())
    for tenant in found.added:
        click.echo(f"only in {entries_file}: {tenant}")
    for tenant in found.extra:
        click.echo(f"only in Redis: {tenant}")
    for tenant, keys in found.changed.items():
        click.echo(f"differs: {tenant} ({', '.join(keys)})")
    if found.same:
        click.echo(f"no differences: {len(found.unchanged)} entries alike")
        return
    raise SystemExit(EXIT_FAILURE)


def _configured(catalog: Path | None, name: str) -> tuple[Destination, RedisSettings]:
    """The destination (with `[lookups]`) and where Redis is; a bad one is a `ConfigError`."""
    from config.catalog import Catalog, default_catalog_dir
    from hifi.lookup_cache.redis_hash import RedisSettings

    destination = Catalog(catalog or default_catalog_dir(), _AnyVariable()).load(name)
    settings = RedisSettings.from_env()
    if destination.lookups is None:
        raise ConfigError(
            f"destination {name!r} has no [lookups] table; tenant entries serve only one"
        )
    return destination, settings


def _file_entries(path: Path, dest: Destination) -> dict[str, bytes]:
    """The entries of `path`, validated for `dest`; a bad one is a `ConfigError`."""
    from tenants.files import read_entries

    return read_entries(path, dest, os.environ)


def _where(dest: Destination, settings: RedisSettings) -> str:
    return f"hash {tenants_key(dest.name)} at {settings.describe()}"


def main() -> None:
    """The `hifi-tenants` command."""
    run_command(cli, PROG)
