"""The auditor decodes a source topic as its destinations do: they must agree on `[decode]`."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from auditor.daemon import _decodings
from config.catalog import Catalog
from config.destination import Destination
from hifi.errors import ConfigError

DECODE = '[decode]\nkind = "schema_registry"\nurl = "http://127.0.0.1:9"\n'


def _dest(catalog_dir: Path, name: str, topics: str, decode: str = "") -> Destination:
    (catalog_dir / f"{name}.toml").write_text(
        f'url = "http://127.0.0.1:9/"\nsource_topics = [{topics}]\n{decode}'
    )
    return Catalog(catalog_dir).load(name)


async def test_a_topic_read_with_and_without_decode_is_refused(catalog_dir: Path) -> None:
    plain = _dest(catalog_dir, "plain", '"shared", "own"')
    decoded = _dest(catalog_dir, "decoded", '"shared"', DECODE)
    async with contextlib.AsyncExitStack() as stack:
        with pytest.raises(ConfigError, match="source topic 'shared': destinations 'plain' and"):
            await _decodings(stack, [plain, decoded])


async def test_each_decoding_topic_gets_its_decoder(catalog_dir: Path) -> None:
    plain = _dest(catalog_dir, "plain", '"own"')
    first = _dest(catalog_dir, "first", '"a", "b"', DECODE)
    second = _dest(catalog_dir, "second", '"b"', DECODE)
    async with contextlib.AsyncExitStack() as stack:
        found = await _decodings(stack, [plain, first, second])
        assert sorted(found) == ["a", "b"]
        assert found["a"] is found["b"]  # one registry, one decoder
        assert found["a"].topics == {"a", "b"}
    async with contextlib.AsyncExitStack() as stack:
        assert await _decodings(stack, [plain]) == {}
