"""A tenant's route: its entry compiled once, when it is loaded, into what each of its events needs.

The url and header templates of the destination are rendered with the entry's values here, so a
request of the tenant's events costs nothing more than another's. What a route decides per event
(`admit`) reads the event only when the entry has a filter or a projection; an enabled tenant
without either (`passes_all`) is a dict read and an append per event.

Masking: every value of the entry rendered into a header is a secret, like a value taken from the
environment into a catalog header, and so is each such rendered header value and its words of 8
characters or more (`hifi.redaction.header_secrets`). Values rendered only into the URL are not
secrets (put credentials in headers). `secrets` lists them; the cache registers them before any
read can return the route.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import orjson

from config.destination import Templates
from config.env_refs import HEADER_VALUE_RULE, header_value_problem
from config.templates import url_value
from hifi.errors import EntryRefused
from hifi.redaction import header_secrets
from tenants.entry import Scalar, TenantEntry

_MISSING = object()
_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])  # one JSON object, values unread


@dataclass(frozen=True, slots=True, eq=False)
class Route:
    """Where and how one tenant's events go. Compared by identity: a changed entry is a new route,
    so events taken in under different versions of an entry never share a request."""

    tenant: str
    url: str
    headers: dict[str, str] = field(repr=False)  # with secrets: never in a repr
    enabled: bool = True
    filter_when_disabled: bool = False  # a disabled tenant's events end `filtered`, not in the DLQ
    keep: frozenset[str] | None = None  # top-level fields to send (the id field always)
    drop: frozenset[str] | None = None  # top-level fields not to send
    filter_field: str | None = None
    filter_values: frozenset[Scalar] = frozenset()
    filter_keeps_listed: bool = True  # `in` (deliver the listed values) or `not_in`
    secrets: tuple[str, ...] = field(default=(), repr=False)
    rate_limit_events_per_s: float | None = None  # this tenant's limits (connector.rate_limits)
    rate_limit_requests_per_s: float | None = None
    passes_all: bool = field(init=False)  # enabled, no filter, no projection: events go as they are

    def __post_init__(self) -> None:
        reads = self.keep is not None or self.drop is not None or self.filter_field is not None
        object.__setattr__(self, "passes_all", self.enabled and not reads)

    @property
    def name(self) -> str:
        """The tenant, as logs and `/status` name a request's target."""
        return self.tenant

    @property
    def projects(self) -> bool:
        return self.keep is not None or self.drop is not None

    def admit(self, value: bytes) -> bytes | None:
        """The body the event is sent as (projected, or `value` itself), or None when the
        filter drops it. `value` is one JSON object (the intake checked it)."""
        if not self.projects:
            if self.filter_field is None:
                return value
            found = _field_reader(self.filter_field).decode(value).value
            return value if self._passes(found) else None
        # the event's members as their raw bytes: only the filter's value is parsed, and what is
        # kept goes out exactly as it came in (an integer past 64 bits included)
        event = _MEMBERS.decode(value)
        if self.filter_field is not None:
            found = event.get(self.filter_field)
            if not self._passes(_MISSING if found is None else msgspec.json.decode(found)):
                return None
        if self.keep is not None:
            kept = [(key, raw) for key, raw in event.items() if key in self.keep]
        else:
            dropped = self.drop or ()
            kept = [(key, raw) for key, raw in event.items() if key not in dropped]
        return b"{" + b",".join(orjson.dumps(key) + b":" + raw for key, raw in kept) + b"}"

    def _passes(self, found: object) -> bool:
        listed = found is not _MISSING and _hashable(found) and found in self.filter_values
        return listed if self.filter_keeps_listed else not listed


def compile_route(
    tenant: str, entry: TenantEntry, templates: Templates, *, id_field: str, where: str
) -> Route:
    """The route of `tenant`'s entry; `EntryRefused` when the entry cannot serve the templates
    (a value missing, a rendered header or URL that is not valid)."""
    values = entry.values
    missing = sorted(templates.value_names - values.keys())
    if missing:
        raise EntryRefused(
            f"{where}: tenant {tenant!r}: key 'values': {', '.join(missing)} missing; the"
            " destination's url and headers use them"
        )
    url = templates.url.render(tenant, values, url_value)
    headers: dict[str, str] = {}
    secrets: list[str] = []
    for key, template in templates.headers.items():
        rendered = template.render(tenant, values)
        if template.value_names:
            secrets.extend(values[name] for name in template.value_names)
            secrets.extend(header_secrets(rendered))
        problem = header_value_problem(rendered) or ("is empty" if not rendered.strip() else None)
        if problem:
            raise EntryRefused(
                f"{where}: tenant {tenant!r}: header {key!r} rendered from its values {problem};"
                f" {HEADER_VALUE_RULE}"
            )
        headers[key] = rendered
    projection, chosen = entry.project, entry.filter
    if projection is not None and projection.drop is not None and id_field in projection.drop:
        raise EntryRefused(
            f"{where}: tenant {tenant!r}: key 'project.drop': {id_field!r} is the destination's"
            " id_field; the destination needs it to deduplicate"
        )
    return Route(
        tenant,
        url,
        headers,
        enabled=entry.enabled,
        filter_when_disabled=entry.when_disabled == "filter",
        keep=None
        if projection is None or projection.keep is None
        else frozenset([*projection.keep, id_field]),
        drop=None if projection is None or projection.drop is None else frozenset(projection.drop),
        filter_field=None if chosen is None else chosen.field,
        filter_values=frozenset()
        if chosen is None
        else frozenset(chosen.in_ or chosen.not_in or ()),
        filter_keeps_listed=chosen is None or chosen.in_ is not None,
        secrets=tuple(secrets),
        rate_limit_events_per_s=entry.rate_limit_events_per_s,
        rate_limit_requests_per_s=entry.rate_limit_requests_per_s,
    )


class _Field(Protocol):
    value: Any


@functools.cache
def _field_reader(name: str) -> msgspec.json.Decoder[_Field]:
    """A decoder that builds only the field `name` of an event (for a filter without projection)."""
    fields = msgspec.defstruct("Field", [("value", Any, _MISSING)], rename={"value": name})
    return msgspec.json.Decoder(fields)


def _hashable(value: object) -> bool:
    return not isinstance(value, list | dict)
