"""Why a Kafka address does not work: a raw probe (TCP, TLS, one Kafka ApiVersions request) that names the cause."""

from __future__ import annotations

import asyncio
import ssl
import struct

_TIMEOUT_S = 5.0
_CORRELATION_ID = 0x68696669  # "hifi"
_CLIENT_ID = b"hifi-probe"
# ApiVersions v0: size, api key 18, version 0, correlation id, client id. Every Kafka broker
# answers it before authentication, so an answer tells a Kafka listener from anything else.
_API_VERSIONS = struct.pack(
    f">ihhih{len(_CLIENT_ID)}s",
    2 + 2 + 4 + 2 + len(_CLIENT_ID),
    18,
    0,
    _CORRELATION_ID,
    len(_CLIENT_ID),
    _CLIENT_ID,
)


async def diagnose(bootstrap: str, ssl_context: ssl.SSLContext | None) -> str:
    """One line on what the first bootstrap address does with a Kafka request."""
    host, _, port_text = bootstrap.split(",")[0].strip().rpartition(":")
    host = host.strip("[]") or "localhost"
    try:
        port = int(port_text)
    except ValueError:
        return f"{bootstrap!r} is not host:port"
    try:
        async with asyncio.timeout(_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=ssl_context, server_hostname=host if ssl_context else None
            )
    except ssl.SSLError as exc:
        return (
            f"TLS handshake with {host}:{port} failed ({exc.reason or exc}); is it a TLS listener?"
        )
    except ConnectionRefusedError:
        return f"connection to {host}:{port} refused: nothing listens there"
    except TimeoutError:
        return f"no TCP connection to {host}:{port} within {_TIMEOUT_S:g} s (wrong host, firewall?)"
    except OSError as exc:
        return f"cannot connect to {host}:{port}: {exc.strerror or exc}"
    try:
        writer.write(_API_VERSIONS)
        async with asyncio.timeout(_TIMEOUT_S):
            head = await reader.readexactly(8)
    except TimeoutError:
        return f"{host}:{port} accepts connections but does not answer a Kafka request" + (
            " (does it expect TLS? HIFI_KAFKA_SECURITY_PROTOCOL)" if not ssl_context else ""
        )
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        return f"{host}:{port} closed the connection on a Kafka request: not a Kafka listener?"
    finally:
        writer.close()
    if head.startswith((b"HTTP/", b"<")):
        return f"{host}:{port} answers HTTP, not Kafka"
    if struct.unpack(">i", head[4:])[0] != _CORRELATION_ID:
        return f"{host}:{port} answers, but not in Kafka's protocol"
    return (
        f"{host}:{port} answers Kafka requests, yet the client could not start: check"
        " HIFI_KAFKA_SASL_MECHANISM and the credentials, and the broker's advertised listeners"
    )
