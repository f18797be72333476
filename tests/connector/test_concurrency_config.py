"""The `concurrency` key of a destination file: adaptive by default, fixed on request, else one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.catalog import Catalog
from connector.concurrency import Limiter
from hifi.errors import ConfigError

BASE = 'url = "https://x.test/"\nsource_topics = ["e"]\nmax_in_flight = 12\n'


def _load(catalog_dir: Path, text: str) -> Limiter:
    (catalog_dir / "d.toml").write_text(text)
    return Limiter.for_destination(Catalog(catalog_dir, {}).load("d"))


def test_adaptive_by_default_with_max_in_flight_as_ceiling(catalog_dir: Path) -> None:
    """Without the key the limit is adaptive: it starts at 1 under a ceiling of max_in_flight."""
    limiter = _load(catalog_dir, BASE)
    assert (limiter.adaptive, limiter.limit(), limiter.ceiling) == (True, 1, 12)


def test_fixed_is_max_in_flight(catalog_dir: Path) -> None:
    """`concurrency = "fixed"`: the limit is max_in_flight from the start."""
    limiter = _load(catalog_dir, BASE + 'concurrency = "fixed"\n')
    assert (limiter.adaptive, limiter.limit(), limiter.ceiling) == (False, 12, 12)


def test_other_values_are_one_line_naming_the_key(catalog_dir: Path) -> None:
    """Any other value is refused with one line naming the file, the key and what is allowed."""
    with pytest.raises(ConfigError) as info:
        _load(catalog_dir, BASE + 'concurrency = "auto"\n')
    message = str(info.value)
    assert "\n" not in message
    assert str(catalog_dir / "d.toml") in message
    assert "key 'concurrency'" in message
    assert "'adaptive' or 'fixed'" in message
