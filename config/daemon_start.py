"""What hifi's commands load at start from the catalog and the environment: destinations and Kafka's settings."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from config.catalog import Catalog, default_catalog_dir
from config.destination import Destination
from hifi.cli_options import INSTANCE_ID_FROM
from hifi.kafka.settings import KafkaSettings

if TYPE_CHECKING:
    from hifi.cli_options import DaemonFlags


def load_daemon_inputs(
    flags: DaemonFlags, dests: Sequence[str], instance_id: str | None
) -> tuple[list[Destination], KafkaSettings]:
    """What a daemon over several destinations (the auditor, the retrier) starts from: the
    destinations named by `--dest` (every one in the catalog when none is), without their HTTP
    secrets, which it never uses, and the Kafka settings from the environment, as static member
    `instance_id` when there is one; a bad one is a `ConfigError`."""
    catalog = Catalog(flags.catalog or default_catalog_dir(), for_delivery=False)
    destinations = catalog.load_named(dests)
    settings = KafkaSettings.from_env().as_static_member(instance_id, where=INSTANCE_ID_FROM)
    return destinations, settings


def load_without_secrets(catalog_dir: Path | None, name: str) -> tuple[Destination, KafkaSettings]:
    """Destination `name` without its HTTP secrets, and the Kafka settings: what a command that
    only reads and writes a destination's topics uses (`connector rewind|backfill`, `retrier
    dlq`); a bad one is a `ConfigError`."""
    destination = Catalog(catalog_dir or default_catalog_dir(), for_delivery=False).load(name)
    return destination, KafkaSettings.from_env()
