"""The bench's catalog: every setting at its default, and the audit trail switched off on request."""

from __future__ import annotations

from pathlib import Path

from bench.catalog import DEST, write_catalog
from config.catalog import Catalog


def test_the_bench_destination_audits_unless_told_not_to(tmp_path: Path) -> None:
    """The default catalog keeps the audit trail on; `audit=False` loads with it off."""
    write_catalog(tmp_path / "on", url="http://127.0.0.1:1/", topics=["a", "b"])
    write_catalog(tmp_path / "off", url="http://127.0.0.1:1/", topics=["a"], audit=False)
    on, off = Catalog(tmp_path / "on").load(DEST), Catalog(tmp_path / "off").load(DEST)
    assert (on.accounting.audit, on.source_topics) == (True, ["a", "b"])
    assert (off.accounting.audit, off.source_topics) == (False, ["a"])
    assert off.model_dump(exclude={"accounting", "source_topics"}) == on.model_dump(
        exclude={"accounting", "source_topics"}
    )
