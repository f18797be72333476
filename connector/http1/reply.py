"""A reply as the connection read it, before httpx sees it (`connector.http1.decoding`)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Reply"]


@dataclass(slots=True)
class Reply:
    """A complete response as read from the wire (its body cut at the connection's cap)."""

    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    http_version: bytes
    #: the connection may serve another request (keep-alive, fully read, not closing)
    reusable: bool
    #: what was odd about it and read anyway (`hifi_connector_reply_anomalies_total{kind}`)
    anomalies: list[str] = field(default_factory=list)
