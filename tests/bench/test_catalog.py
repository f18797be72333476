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


def test_the_lookup_phase_destination_differs_only_by_its_lookups(tmp_path: Path) -> None:
    """With lookups the url and X-Api-Key are per-tenant templates, and the tenants may be on
    loopback (`allow_private_destinations`); every other setting is the catalog default, as
    in the other phases: `max_in_flight` too, a tenant destination's (64)."""
    write_catalog(tmp_path / "on", url="http://127.0.0.1:1/v1/events", topics=["a"])
    write_catalog(tmp_path / "t", url="http://127.0.0.1:1/v1/events", topics=["a"], lookups=True)
    plain, tenanted = Catalog(tmp_path / "on").load(DEST), Catalog(tmp_path / "t").load(DEST)
    assert tenanted.lookups is not None
    assert tenanted.lookups.tenant_field == "tenant"
    assert tenanted.url == "http://127.0.0.1:1/v1/events/{tenant}"
    assert tenanted.templates().header_value_names == {"api_key"}
    assert tenanted.allow_private_destinations
    assert (tenanted.max_in_flight, plain.max_in_flight) == (64, 8)
    differs = {"url", "headers", "lookups", "allow_private_destinations", "max_in_flight"}
    assert tenanted.model_dump(exclude=differs) == plain.model_dump(exclude=differs)


def test_concurrency_is_the_default_unless_given(tmp_path: Path) -> None:
    """The lag phase's reference probe runs the connector with `concurrency = "fixed"`."""
    write_catalog(tmp_path / "d", url="http://127.0.0.1:1/", topics=["a"])
    write_catalog(tmp_path / "f", url="http://127.0.0.1:1/", topics=["a"], concurrency="fixed")
    default, fixed = Catalog(tmp_path / "d").load(DEST), Catalog(tmp_path / "f").load(DEST)
    assert (default.concurrency, fixed.concurrency) == ("adaptive", "fixed")
    assert fixed.model_dump(exclude={"concurrency"}) == default.model_dump(exclude={"concurrency"})
