"""A destination's webhook conventions: one event per request (`format = "single"`, `[webhook]`)
and signed requests (`[signing]`), as Standard Webhooks, Svix and Knative receivers expect them.

`docs/webhooks.md` is the reference: which headers each part writes, on which attempt, and what
a receiver deduplicates by.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from config.env_refs import HEADER_VALUE_RULE, header_value_problem
from config.templates import Template, parse_template

_TOKEN_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)
STANDARD_WEBHOOKS_PREFIX = "whsec_"
SINGLE_MAX_IN_FLIGHT = 64  # as a tenant destination's: a request carries one event
MIN_KEY_BYTES = 16  # a shorter key is a typo or a placeholder, not a secret
#: the placeholders of the CloudEvents templates: where the event entered hifi, and the catalog's name
CLOUDEVENT_PLACEHOLDERS = frozenset({"topic", "partition", "destination"})
#: headers a request of the single format writes itself (the catalog's names may not take them)
_SINGLE_OWN = frozenset(
    {"content-type", "content-length", "content-encoding", "host", "transfer-encoding"}
)
_STANDARD_WEBHOOKS_HEADERS = frozenset({"webhook-id", "webhook-timestamp", "webhook-signature"})
_CLOUDEVENT_HEADERS = frozenset({"ce-specversion", "ce-id", "ce-source", "ce-type", "ce-time"})


def header_name_problem(name: str) -> str | None:
    """Why `name` is not an HTTP header name; None when it is one."""
    return None if _TOKEN_RE.match(name) else f"{name!r} is not a valid HTTP header name"


class CloudEvents(BaseModel):
    """`[webhook.cloudevents]`: each request a CloudEvent in binary content mode (`ce-*` headers,
    the event as the body); `source` and `type` are templates of `{topic}`, `{partition}` (where
    the event entered hifi) and `{destination}`."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    source: str = Field(min_length=1, max_length=1024)
    type: str = Field(min_length=1, max_length=1024)

    @field_validator("source", "type")
    @classmethod
    def _check_template(cls, value: str) -> str:
        template = parse_template(value)  # a ValueError names what is wrong
        unknown = sorted(template.names - CLOUDEVENT_PLACEHOLDERS)
        if unknown:
            raise ValueError(
                f"placeholder {{{unknown[0]}}} is unknown; write {{topic}}, {{partition}} or"
                " {destination}"
            )
        literal = "".join(text for text, _ in template.parts)
        if problem := header_value_problem(literal):
            raise ValueError(f"the text {problem}; {HEADER_VALUE_RULE}")
        return value

    def templates(self) -> tuple[Template, Template]:
        """`source` and `type`, parsed."""
        return parse_template(self.source), parse_template(self.type)


class Webhook(BaseModel):
    """`[webhook]`: the request of one event (`format = "single"`): its Content-Type, the header
    that carries its id, and which of the record's headers (and its key) become request headers."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    content_type: str = Field(default="application/json", min_length=1, max_length=256)
    # the event's id (its `id_field`, else topic/partition/offset): the same on every attempt
    id_header: str = Field(default="webhook-id", min_length=1)
    key_header: str | None = None  # the record's key as this request header (omitted if none)
    # a record header (its name as in Kafka) -> the request header it becomes (omitted if absent)
    record_headers: dict[str, str] = Field(default_factory=dict, max_length=64)
    cloudevents: CloudEvents | None = None

    @field_validator("content_type")
    @classmethod
    def _check_content_type(cls, value: str) -> str:
        if problem := header_value_problem(value):
            raise ValueError(f"the value {problem}; {HEADER_VALUE_RULE}")
        return value

    @model_validator(mode="after")
    def _check_names(self) -> Self:
        named = [("id_header", self.id_header)]
        if self.key_header is not None:
            named.append(("key_header", self.key_header))
        named += [(f"record_headers.{key}", value) for key, value in self.record_headers.items()]
        seen: dict[str, str] = {}
        for key, name in named:
            if problem := header_name_problem(name):
                raise ValueError(f"key '{key}': {problem}")
            lowered = name.lower()
            if lowered in _SINGLE_OWN or lowered in _CLOUDEVENT_HEADERS:
                raise ValueError(f"key '{key}': {name!r} is a header each request writes itself")
            if lowered in seen:
                raise ValueError(f"key '{key}': {name!r} is also written by '{seen[lowered]}'")
            seen[lowered] = key
        for kafka_name in self.record_headers:
            if not kafka_name or kafka_name.lower().startswith("hifi-"):
                raise ValueError(
                    f"key 'record_headers': {kafka_name!r} is not a producer's header (hifi-*"
                    " headers are hifi's own)"
                )
        return self


class Signing(BaseModel):
    """`[signing]`: every request signed with HMAC-SHA256, again at each attempt.

    `standard_webhooks`: the `webhook-id`, `webhook-timestamp` and `webhook-signature` headers of
    standardwebhooks.com, one `v1,` signature per secret (`whsec_` and base64; several while a
    secret is rotated). `hmac_sha256`: the body's HMAC under the one secret (its UTF-8 bytes) in
    `header`, hex or base64 after `prefix` (GitHub's `X-Hub-Signature-256` is `sha256=` and hex).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    kind: Literal["standard_webhooks", "hmac_sha256"]
    secrets: list[SecretStr] = Field(min_length=1, max_length=8)
    header: str | None = None  # hmac_sha256: the header of the signature
    encoding: Literal["hex", "base64"] = "hex"  # hmac_sha256
    prefix: str = Field(default="", max_length=64)  # hmac_sha256: written before the signature

    @model_validator(mode="after")
    def _check_kind(self) -> Self:
        if self.kind == "standard_webhooks":
            for key in ("header", "prefix"):
                if getattr(self, key):
                    raise ValueError(
                        f"key '{key}': standard_webhooks writes its own headers; remove {key}"
                    )
            for index, secret in enumerate(self.secrets):
                standard_webhooks_key(secret.get_secret_value(), f"secrets[{index}]")
        elif problem := self._hmac_problem():
            raise ValueError(problem)
        return self

    def _hmac_problem(self) -> str | None:
        if self.header is None:
            return "key 'header': hmac_sha256 needs the name of its header"
        if problem := header_name_problem(self.header):
            return f"key 'header': {problem}"
        if self.header.lower() in _SINGLE_OWN | _STANDARD_WEBHOOKS_HEADERS:
            return f"key 'header': {self.header!r} is a header hifi writes itself"
        if problem := header_value_problem(self.prefix):
            return f"key 'prefix': the value {problem}; {HEADER_VALUE_RULE}"
        if len(self.secrets) > 1:
            return (
                "key 'secrets': hmac_sha256 sends one signature; give one secret (rotate on the"
                " receiver's side, or use standard_webhooks, which sends one per secret)"
            )
        if len(self.secrets[0].get_secret_value().encode()) < MIN_KEY_BYTES:
            return f"key 'secrets[0]': shorter than {MIN_KEY_BYTES} bytes"
        return None

    def keys(self) -> list[bytes]:
        """The HMAC keys, in the order of `secrets`."""
        if self.kind == "hmac_sha256":
            return [secret.get_secret_value().encode() for secret in self.secrets]
        return [standard_webhooks_key(s.get_secret_value(), "secrets") for s in self.secrets]


def standard_webhooks_key(secret: str, where: str) -> bytes:
    """The key of a Standard Webhooks secret (`whsec_` then base64, padding optional); a
    `ValueError` names `where`, never the secret."""
    encoded = secret.removeprefix(STANDARD_WEBHOOKS_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(
            f"key '{where}': not a Standard Webhooks secret ('whsec_' then base64)"
        ) from None
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"key '{where}': its key is shorter than {MIN_KEY_BYTES} bytes")
    return key


def single_defaults(data: dict[str, object]) -> dict[str, object]:
    """The catalog's raw table with the single format's defaults: one event a request, and as
    many in flight as a tenant destination (each request carries one event)."""
    if data.get("format") != "single":
        return data
    if data.get("breaker_probe") == "empty":
        raise ValueError(
            "key 'breaker_probe': format = \"single\" would post an empty request, which a"
            ' webhook receiver takes for an event; use "event"'
        )
    if data.get("max_batch_records", 1) != 1:
        raise ValueError(
            "key 'max_batch_records': format = \"single\" sends one event per request; remove"
            " max_batch_records"
        )
    return {"max_in_flight": SINGLE_MAX_IN_FLIGHT, "webhook": {}, **data, "max_batch_records": 1}


def webhook_problem(
    body_format: str,
    webhook: Webhook | None,
    signing: Signing | None,
    compression: str,
    headers: Iterable[str],
) -> str | None:
    """What is wrong with `[webhook]` and `[signing]` beside the other keys (`headers`: the
    names of `[headers]`), or None."""
    if webhook is not None and body_format != "single":
        return "key 'webhook': applies to format = \"single\" only; remove [webhook]"
    if signing is not None and compression != "none":
        return (
            "key 'signing': receivers disagree on whether a compressed body or the body it"
            " decodes to is signed; remove compression or [signing]"
        )
    written = {name.lower(): key for key, name in _written(webhook, signing)}
    for name in headers:
        if name.lower() in written:
            return f"key 'headers.{name}': {written[name.lower()]} writes this header already"
    return None


def _written(webhook: Webhook | None, signing: Signing | None) -> list[tuple[str, str]]:
    """The headers `[webhook]` and `[signing]` write: (the key that says so, the name)."""
    written: list[tuple[str, str]] = []
    if signing is not None:
        names = sorted(_STANDARD_WEBHOOKS_HEADERS) if signing.header is None else [signing.header]
        written += [("[signing]", name) for name in names]
    if webhook is not None:
        written.append(("webhook.id_header", webhook.id_header))
        if webhook.key_header is not None:
            written.append(("webhook.key_header", webhook.key_header))
        written += [("webhook.record_headers", name) for name in webhook.record_headers.values()]
        if webhook.cloudevents is not None:
            written += [("[webhook.cloudevents]", name) for name in sorted(_CLOUDEVENT_HEADERS)]
    return written
