"""The `[lookups]` table of a destination: where its tenants' routes come from and how long they are kept."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

_DAY_S = 86_400


class Lookups(BaseModel):
    """The `[lookups]` table: per-tenant entries from Redis, served from a refresh-ahead local cache
    (`tenants/`, docs/tenants.md). With it, `{tenant}` and `{name}` in `url` and the `[headers]`
    values are placeholders rendered from each tenant's entry."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    tenant_field: str = Field(min_length=1)  # the event field that names the tenant
    # a read after this long since an entry was loaded returns it and reloads it in the background
    refresh_after_s: float = Field(default=120.0, gt=0, le=30 * _DAY_S)
    # an entry not reloaded for this long (Redis failing all that time) is no longer served
    expire_after_s: float = Field(default=2_592_000.0, gt=0, le=366 * _DAY_S)
    # every entry is reloaded this often, so changes and removals reach every process
    bulk_refresh_s: float = Field(default=300.0, gt=0, le=_DAY_S)
    # events taken in and not yet sent, at most (both bounds hold): batches are cut per tenant,
    # so a long tail of tenants needs room for their batches to fill (docs/tenants.md)
    buffer_records: int = Field(default=100_000, ge=1_000, le=10_000_000)
    buffer_bytes: int = Field(default=64 * 1024 * 1024, ge=1024 * 1024, le=8 * 1024**3)
    # while the connector keeps up, a tenant's events wait at most this long for its batch to
    # fill before they are sent (then for an in-flight slot); 0: sent whenever a slot is free
    max_linger_s: float = Field(default=0.1, ge=0, le=60)

    @model_validator(mode="after")
    def _check_expiry(self) -> Self:
        if self.expire_after_s < self.refresh_after_s:
            raise ValueError(
                f"key 'expire_after_s': {self.expire_after_s:g} s is shorter than refresh_after_s"
                f" ({self.refresh_after_s:g} s); an entry must be served at least until it is"
                " reloaded: raise expire_after_s"
            )
        return self
