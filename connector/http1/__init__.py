"""The connector's HTTP/1.1 transport for httpx: asyncio protocols, httptools, a keep-alive pool."""

from __future__ import annotations

from connector.http1.transport import MAX_BODY_BYTES, Http1Transport

__all__ = ["MAX_BODY_BYTES", "Http1Transport"]
