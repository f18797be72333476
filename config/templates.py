"""Placeholders of a destination with `[lookups]`: `{tenant}` and `{name}` in its url and header values.

A template is parsed once, when the catalog is loaded, and rendered once per tenant entry (never
per event): `{tenant}` is the tenant's id, any other `{name}` the entry's value `name`. `{{` and
`}}` are literal braces. Values rendered into the URL are percent-encoded (`/` too), so a value
cannot move the request to another path or host; values rendered into a header are checked to
be a valid header value.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote

TENANT = "tenant"  # the placeholder of the tenant's id; every other name is an entry value
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_SYNTAX = (
    "write {tenant} or {name} (letters, digits and '_', not starting with a digit), and {{ or }}"
    " for a literal brace"
)


@dataclass(frozen=True, slots=True)
class Template:
    """Literal text and placeholders, in order: (text, name or None)."""

    parts: tuple[tuple[str, str | None], ...]

    @property
    def names(self) -> frozenset[str]:
        """Every placeholder, `tenant` included."""
        return frozenset(name for _, name in self.parts if name is not None)

    @property
    def value_names(self) -> frozenset[str]:
        """The placeholders an entry must give a value for (all but `tenant`)."""
        return self.names - {TENANT}

    def render(
        self, tenant: str, values: Mapping[str, str], encode: Callable[[str], str] = str
    ) -> str:
        """The text with `{tenant}` and every `{name}` replaced by `encode(value)`; a missing
        value is a `KeyError` naming it."""
        pieces = []
        for text, name in self.parts:
            pieces.append(text)
            if name is not None:
                pieces.append(encode(tenant if name == TENANT else values[name]))
        return "".join(pieces)


def parse_template(text: str) -> Template:
    """The template of `text`; `ValueError` says what is wrong without quoting the text (a header
    value may hold a secret)."""
    parts: list[tuple[str, str | None]] = []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:  # a single '{' or '}'
        raise ValueError(f"has an unmatched brace ({exc}); {_SYNTAX}") from None
    for literal, name, spec, conversion in parsed:
        if name is None:
            parts.append((literal, None))
            continue
        if not _NAME_RE.fullmatch(name) or spec or conversion:
            shown = name if _NAME_RE.fullmatch(name) else "..."
            raise ValueError(f"placeholder {{{shown}}} is not a name; {_SYNTAX}")
        parts.append((literal, name))
    return Template(tuple(parts))


def url_value(value: str) -> str:
    """A value as it goes into a URL: percent-encoded, `/` included."""
    return quote(value, safe="")
