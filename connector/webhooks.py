"""The headers a request writes of its own: the id a receiver deduplicates by, the record's key
and headers and the CloudEvents attributes of a single-event request, and each attempt's
signature (`[webhook]`, `[signing]`; docs/webhooks.md).

The id is fixed once per request, so every attempt, a hand-off's return from the retrier and a
replayed dead letter carry the same one: in batch formats the `Idempotency-Key` (from the
events' ids), in the single format the event's own id. The signature is computed again at each
attempt, with that attempt's time, since receivers refuse an old `webhook-timestamp`. A value
taken from the event that cannot be a header value (not printable ASCII on one line) makes the
event a dead letter `bad_header` before any attempt: nothing of it is sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from config.destination import Destination
from config.env_refs import HEADER_VALUE_RULE, header_value_problem
from config.webhooks import Signing, Webhook
from connector.rebatch import Batch, content_type
from hifi.envelope import Event
from hifi.errors import DestinationRejected
from hifi.vocabulary import Reason

__all__ = ["RequestHeaders", "Signer", "body_content_type", "describe_requests"]

Header = tuple[str, str]
CLOUDEVENTS_SPEC_VERSION = "1.0"


def body_content_type(dest: Destination) -> str:
    """The Content-Type of the destination's bodies: the format's, or `[webhook]`'s."""
    if dest.format == "single" and dest.webhook is not None:
        return dest.webhook.content_type
    return content_type(dest.format)


def describe_requests(dest: Destination) -> str | None:
    """What `connector --check` says of the requests' own headers; None when they are a batch's
    (an `Idempotency-Key`) and unsigned."""
    parts = []
    webhook = dest.webhook
    if dest.format == "single" and webhook is not None:
        parts.append(
            f"one event a request ({webhook.content_type}), its id in {webhook.id_header!r}"
        )
        if webhook.key_header is not None:
            parts.append(f"the record key in {webhook.key_header!r}")
        if webhook.record_headers:
            parts.append(f"{len(webhook.record_headers)} record headers passed on")
        if webhook.cloudevents is not None:
            parts.append("CloudEvents attributes (binary mode)")
    if dest.signing is not None:
        count = len(dest.signing.secrets)
        where = "" if dest.signing.header is None else f" in {dest.signing.header!r}"
        parts.append(f"signed {dest.signing.kind}{where} with {count} secret{'s' * (count > 1)}")
    return None if not parts else "requests: " + ", ".join(parts)


class Signer:
    """The signature headers of one attempt of a request (`[signing]`)."""

    def __init__(self, signing: Signing) -> None:
        self.writes_id = self._standard = signing.kind == "standard_webhooks"  # `webhook-id`
        self._keys = signing.keys()
        self._header = signing.header or ""
        self._prefix = signing.prefix
        self._hex = signing.encoding == "hex"

    def headers(self, msg_id: str, body: bytes, now_s: float) -> list[Header]:
        """Standard Webhooks' `webhook-timestamp` and `webhook-signature` (a `v1,` signature
        per secret of `msg_id`, the time and `body`), or the HMAC of `body` in the catalog's
        header."""
        if not self._standard:
            digest = hmac.new(self._keys[0], body, hashlib.sha256).digest()
            encoded = digest.hex() if self._hex else base64.b64encode(digest).decode()
            return [(self._header, self._prefix + encoded)]
        timestamp = str(int(now_s))
        signed = f"{msg_id}.{timestamp}.".encode() + body
        signatures = " ".join(
            "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
            for key in self._keys
        )
        return [("webhook-timestamp", timestamp), ("webhook-signature", signatures)]


@dataclass(frozen=True, slots=True)
class Prepared:
    """One request's own headers: fixed for all its attempts, and the signer of each."""

    msg_id: str  # the id a receiver deduplicates by (the signature's `webhook-id`)
    fixed: list[Header]
    signer: Signer | None

    def of_attempt(self, body: bytes, now_s: float) -> list[Header]:
        """The headers of an attempt made at `now_s` (epoch seconds)."""
        if self.signer is None:
            return self.fixed
        return [*self.fixed, *self.signer.headers(self.msg_id, body, now_s)]


class RequestHeaders:
    """The destination's rules for a request's own headers (`of`)."""

    def __init__(self, dest: Destination) -> None:
        self._dest_name = dest.name
        self._webhook: Webhook | None = dest.webhook if dest.format == "single" else None
        self._signer = Signer(dest.signing) if dest.signing is not None else None
        cloud = self._webhook.cloudevents if self._webhook is not None else None
        self._cloud = cloud.templates() if cloud is not None else None

    def of(self, batch: Batch) -> Prepared:
        """The headers of `batch`'s request; `DestinationRejected` with reason `bad_header` when
        a value taken from its event cannot be sent (the event is then dead-lettered)."""
        if self._webhook is None or len(batch.events) != 1:
            key = batch.idempotency_key()
            return self._prepared(key, [("Idempotency-Key", key)])
        event = batch.events[0]
        headers = self._single(event, self._webhook)
        for name, value in headers:
            if problem := header_value_problem(value):
                raise DestinationRejected(
                    f"request header {name!r} of event {event.origin}: the value {problem};"
                    f" {HEADER_VALUE_RULE}",
                    status=None,
                    reason=Reason.BAD_HEADER,
                )
        return self._prepared(event.id, headers)

    def _prepared(self, msg_id: str, headers: list[Header]) -> Prepared:
        """With Standard Webhooks, `webhook-id` is `msg_id`, written once."""
        signer = self._signer
        written = any(name.lower() == "webhook-id" for name, _ in headers)
        if signer is not None and signer.writes_id and not written:
            headers = [*headers, ("webhook-id", msg_id)]
        return Prepared(msg_id, headers, signer)

    def _single(self, event: Event, webhook: Webhook) -> list[Header]:
        headers: list[Header] = [(webhook.id_header, event.id)]
        if webhook.key_header is not None and event.key is not None:
            headers.append((webhook.key_header, _text(event.key)))
        if webhook.record_headers and event.headers:
            headers += _record_headers(event.headers, webhook.record_headers)
        if self._cloud is not None:
            topic, partition, _ = event.origin_parts
            values = {"topic": topic, "partition": str(partition), "destination": self._dest_name}
            source, kind = (template.render("", values) for template in self._cloud)
            headers += [
                ("ce-specversion", CLOUDEVENTS_SPEC_VERSION),
                ("ce-id", event.id),
                ("ce-source", source),
                ("ce-type", kind),
                ("ce-time", _rfc3339(event.event_time_ms)),
            ]
        return headers


def _record_headers(
    record_headers: Sequence[tuple[str, bytes | None]], wanted: dict[str, str]
) -> list[Header]:
    """The request headers of the record's headers named in `wanted` (the last of a name wins;
    one with no value is left out)."""
    found: dict[str, bytes] = {}
    for name, value in record_headers:
        if name in wanted and value is not None:
            found[name] = value
    return [(wanted[name], _text(value)) for name, value in found.items()]


def _text(value: bytes) -> str:
    """Bytes as header text: Latin-1 keeps every byte, and the check that follows refuses any
    that is not printable ASCII."""
    return value.decode("latin-1")


def _rfc3339(epoch_ms: int) -> str:
    """An RFC 3339 UTC time with milliseconds (CloudEvents' `time`)."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"
