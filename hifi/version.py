"""hifi's version, as installed (the `hifi-streams` distribution)."""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "hifi-streams"

try:
    VERSION = metadata.version(DISTRIBUTION)
except metadata.PackageNotFoundError:  # run from a checkout that was never installed
    VERSION = "0+unknown"
