"""A tenant's entry: what Redis holds for one tenant of a destination, validated like the catalog.

    {"enabled": true,                       # false: its events are dead-lettered (tenant_disabled)
     "when_disabled": "dead_letter",        # or "filter": a disabled tenant's events end filtered
     "values": {"api_key": "...", "region": "eu"},   # for the url and header templates
     "project": {"keep": ["id", "type", "payload"]}, # or {"drop": [...]}: top-level fields
     "filter": {"field": "type", "in": ["play", "stop"]},  # or "not_in": events it drops end filtered
     "rate_limit_events_per_s": 200,         # this tenant's limits, besides the destination's
     "rate_limit_requests_per_s": 20}

Every key is optional; `{}` is an enabled tenant whose events go as they are. Types are strict
(`"true"` is not a boolean) and unknown keys are refused. Errors are one line that names where
the entry is, the key and what is allowed, and never quote a value of `values` (secrets).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from config.destination import MAX_RATE_PER_S
from config.problems import describe
from hifi.errors import EntryRefused

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
MAX_TENANT_CHARS = 256
Scalar = str | int | float | bool
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def _exactly_one_of(first: str, second: str, what: str) -> Any:
    """The model validator of a table that takes exactly one of two keys (`first` and `second`,
    by attribute name); `what` names them in the refusal."""

    def check(table: BaseModel) -> BaseModel:
        if (getattr(table, first) is None) == (getattr(table, second) is None):
            raise ValueError(f"give {what}, not both")
        return table

    return model_validator(mode="after")(check)


class Projection(BaseModel):
    """The top-level fields of each event to send: `keep` these, or `drop` these."""

    model_config = _STRICT

    keep: list[str] | None = Field(default=None, min_length=1)
    drop: list[str] | None = Field(default=None, min_length=1)

    _one_of = _exactly_one_of("keep", "drop", "keep or drop (a list of top-level fields)")


class Filter(BaseModel):
    """Which events to deliver by the value of one top-level field; the others end `filtered`."""

    model_config = ConfigDict(**_STRICT, populate_by_name=True)

    field: str = Field(min_length=1)
    in_: list[Scalar] | None = Field(default=None, alias="in")  # deliver only these values
    not_in: list[Scalar] | None = None  # deliver every value but these

    _one_of = _exactly_one_of("in_", "not_in", "in or not_in (a list of values)")


class TenantEntry(BaseModel):
    """One tenant's entry."""

    model_config = _STRICT

    enabled: bool = True
    when_disabled: Literal["dead_letter", "filter"] = "dead_letter"
    values: dict[str, str] = Field(default_factory=dict)
    project: Projection | None = None
    filter: Filter | None = None
    # token buckets of this tenant's route, with a burst of one second (connector.rate_limits)
    rate_limit_events_per_s: float | None = Field(default=None, gt=0, le=MAX_RATE_PER_S)
    rate_limit_requests_per_s: float | None = Field(default=None, gt=0, le=MAX_RATE_PER_S)

    @field_validator("values")
    @classmethod
    def _check_names(cls, values: dict[str, str]) -> dict[str, str]:
        for name in values:
            if not _NAME_RE.fullmatch(name) or name == "tenant":
                raise ValueError(
                    f"value name {name!r} is not a placeholder name (letters, digits and '_',"
                    " not starting with a digit, not 'tenant')"
                )
        return values


def tenant_problem(tenant: str) -> str | None:
    """What makes `tenant` unfit as a tenant id; None when fit."""
    if not tenant:
        return "is empty"
    if len(tenant) > MAX_TENANT_CHARS:
        return f"is longer than {MAX_TENANT_CHARS} characters"
    if not tenant.isprintable():
        return "contains a non-printable character"
    return None


def parse_entry(where: str, tenant: str, raw: object) -> TenantEntry:
    """`raw` (JSON bytes, or a table already parsed) as the entry of `tenant`; `EntryRefused`
    in one line naming `where`, the tenant and the key."""
    problem = tenant_problem(tenant)
    if problem:
        raise EntryRefused(f"{where}: tenant id {tenant[:80]!r} {problem}")
    try:
        if isinstance(raw, bytes):
            return TenantEntry.model_validate_json(raw, strict=True)
        return TenantEntry.model_validate(raw)
    except ValidationError as exc:
        if isinstance(raw, bytes) and any(e["type"] == "json_invalid" for e in exc.errors()):
            raise EntryRefused(f"{where}: tenant {tenant!r}: the entry is not JSON") from None
        raise EntryRefused(
            describe(f"{where}: tenant {tenant!r}", exc, TenantEntry, secret_keys=("values",))
        ) from None
