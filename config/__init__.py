"""Configuration: the destination catalog (one TOML file per destination) and process settings from the environment."""

from config.catalog import Catalog, default_catalog_dir
from config.destination import Destination
from hifi.kafka.settings import KafkaSettings

__all__ = ["Catalog", "Destination", "KafkaSettings", "default_catalog_dir"]
