"""Why a Kafka address does not work: a raw probe (TCP, TLS, one Kafka ApiVersions request and,
with SASL, one SaslHandshake) that names the cause in one line.

`diagnose` runs when a client could not start. What it finds is a `Diagnosis`: its text, and
whether the cause is the set-up (`refused`: an untrusted or misnamed certificate, a client
certificate the broker refused, the wrong protocol for the listener, a SASL mechanism the broker
does not offer), which the caller reports as a `ConfigError`, exit 2, instead of a transient one.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hifi.kafka.settings import KafkaSettings

_TIMEOUT_S = 5.0
_CORRELATION_ID = 0x68696669  # "hifi"
_CLIENT_ID = b"hifi-probe"
_API_VERSIONS, _SASL_HANDSHAKE = 18, 17
_UNSUPPORTED_SASL_MECHANISM = 33
# A client certificate the server refused: TLS 1.3 tells after the handshake, on the first read
# (certificate required / unknown CA / bad certificate); TLS 1.2 fails the handshake itself.
_CLIENT_CERT_ALERTS = (
    "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "TLSV1_ALERT_UNKNOWN_CA",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "TLSV1_ALERT_ACCESS_DENIED",
    "SSLV3_ALERT_HANDSHAKE_FAILURE",
)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """One line on what an address does; `refused`: the set-up is wrong, not the network."""

    text: str
    refused: bool = False

    def __str__(self) -> str:
        return self.text


def _request(api_key: int, version: int, body: bytes = b"") -> bytes:
    header = struct.pack(
        f">hhih{len(_CLIENT_ID)}s", api_key, version, _CORRELATION_ID, len(_CLIENT_ID), _CLIENT_ID
    )
    return struct.pack(">i", len(header) + len(body)) + header + body


async def diagnose(settings: KafkaSettings, context: ssl.SSLContext | None) -> Diagnosis:
    """What the first bootstrap address of `settings` does with a Kafka request, over TLS with
    `context` (None: plaintext)."""
    host, _, port_text = settings.bootstrap.split(",")[0].strip().rpartition(":")
    host = host.strip("[]") or "localhost"
    try:
        port = int(port_text)
    except ValueError:
        return Diagnosis(f"{settings.bootstrap!r} is not host:port", refused=True)
    probe = _Probe(settings, host, port, context)
    return await probe.run()


class _Probe:
    def __init__(
        self, settings: KafkaSettings, host: str, port: int, context: ssl.SSLContext | None
    ) -> None:
        self.settings, self.host, self.port, self.context = settings, host, port, context
        self.where = f"{host}:{port}"

    async def run(self) -> Diagnosis:
        try:
            async with asyncio.timeout(_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=self.context,
                    server_hostname=self.host if self.context else None,
                )
        except ssl.SSLCertVerificationError as exc:
            return self._untrusted(exc)
        except ssl.SSLError as exc:
            return await self._handshake_failed(exc)
        except ConnectionRefusedError:
            return Diagnosis(f"connection to {self.where} refused: nothing listens there")
        except TimeoutError:
            if self.context is not None and await self._answers_plaintext():
                return self._plaintext_listener()  # it waits for the rest of a "request"
            return Diagnosis(
                f"no TCP connection to {self.where} within {_TIMEOUT_S:g} s (wrong host, firewall?)"
            )
        except (ConnectionResetError, asyncio.IncompleteReadError) as exc:
            if self.context is not None:  # closed during the handshake
                return await self._handshake_failed(exc)
            return Diagnosis(f"cannot connect to {self.where}: {exc}")
        except OSError as exc:
            return Diagnosis(f"cannot connect to {self.where}: {exc.strerror or exc}")
        try:
            return await self._converse(reader, writer)
        finally:
            writer.close()

    async def _converse(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Diagnosis:
        try:
            writer.write(_request(_API_VERSIONS, 0))
            async with asyncio.timeout(_TIMEOUT_S):
                head = await reader.readexactly(8)
                size = struct.unpack(">i", head[:4])[0]
                if head.startswith((b"HTTP/", b"<")):
                    return Diagnosis(f"{self.where} answers HTTP, not Kafka", refused=True)
                if struct.unpack(">i", head[4:])[0] != _CORRELATION_ID or not 0 < size < 1 << 20:
                    return Diagnosis(f"{self.where} answers, but not in Kafka's protocol", True)
                await reader.readexactly(size - 4)
        except ssl.SSLError as exc:
            return self._client_certificate_refused(exc)
        except TimeoutError:
            if self.context is None and await self._speaks_tls():
                return self._tls_listener()
            return Diagnosis(
                f"{self.where} accepts connections but does not answer a Kafka request"
            )
        except (asyncio.IncompleteReadError, ConnectionError):
            if self.context is None and await self._speaks_tls():
                return self._tls_listener()
            alert = await self._tls12_alert() if self.context is not None else None
            if alert is not None and alert.reason in _CLIENT_CERT_ALERTS:
                return self._client_certificate_refused(alert)
            return Diagnosis(
                f"{self.where} closed the connection on a Kafka request: not a Kafka listener?"
            )
        if self.settings.sasl_mechanism is not None:
            return await self._sasl(reader, writer)
        return self._answers()

    async def _sasl(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Diagnosis:
        mechanism = self.settings.sasl_mechanism or ""
        name = mechanism.encode()
        try:
            writer.write(_request(_SASL_HANDSHAKE, 1, struct.pack(">h", len(name)) + name))
            async with asyncio.timeout(_TIMEOUT_S):
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                body = await reader.readexactly(size)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            return Diagnosis(
                f"{self.where} closed the connection on a SASL handshake for {mechanism}: the"
                " mechanism is not enabled there, or the listener takes no SASL; check"
                " HIFI_KAFKA_SASL_MECHANISM and HIFI_KAFKA_SECURITY_PROTOCOL",
                refused=True,
            )
        error = struct.unpack(">h", body[4:6])[0] if len(body) >= 6 else -1
        if error == _UNSUPPORTED_SASL_MECHANISM:
            listed = _strings(body[6:])
            if listed == [mechanism]:  # it echoes the refused name (Tansu without SASL)
                return Diagnosis(
                    f"{self.where}: SASL mechanism {mechanism} is not enabled on the broker"
                    " (it names no other: SASL may be off on this listener; is"
                    " HIFI_KAFKA_SECURITY_PROTOCOL right?)",
                    refused=True,
                )
            offered = ", ".join(listed) or "none"
            return Diagnosis(
                f"{self.where}: SASL mechanism {mechanism} is not enabled on the broker (it"
                f" offers: {offered}); HIFI_KAFKA_SASL_MECHANISM",
                refused=True,
            )
        return self._answers()

    def _answers(self) -> Diagnosis:
        who = ""
        if self.settings.sasl_mechanism is not None:
            who = f" (SASL {self.settings.sasl_mechanism} is offered: check the credentials)"
        return Diagnosis(
            f"{self.where} answers Kafka requests{who}, yet the client could not start: check"
            " the credentials and the broker's advertised listeners"
        )

    def _untrusted(self, exc: ssl.SSLCertVerificationError) -> Diagnosis:
        from hifi.kafka.security import trust_described

        message = exc.verify_message or str(exc)
        if "hostname mismatch" in message.lower() or "ip address mismatch" in message.lower():
            return Diagnosis(
                f"{self.where}: the broker's certificate is not valid for {self.host!r}"
                f" ({message.rstrip('.')}); connect by a name it carries, or set"
                " HIFI_KAFKA_SSL_CHECK_HOSTNAME=false to accept it for any name",
                refused=True,
            )
        return Diagnosis(
            f"{self.where}: the broker's certificate is not trusted: not signed by"
            f" {trust_described(self.settings)} ({message.rstrip('.')})",
            refused=True,
        )

    async def _handshake_failed(self, exc: BaseException) -> Diagnosis:
        reason = str(getattr(exc, "reason", None) or exc)
        if reason in _CLIENT_CERT_ALERTS:
            return self._client_certificate_refused(exc)
        if await self._answers_plaintext():
            return self._plaintext_listener()
        return Diagnosis(
            f"TLS handshake with {self.where} failed ({reason}); is it a TLS listener?"
        )

    def _plaintext_listener(self) -> Diagnosis:
        return Diagnosis(
            f"{self.where} answers Kafka in plaintext, not TLS: set"
            " HIFI_KAFKA_SECURITY_PROTOCOL=PLAINTEXT or SASL_PLAINTEXT, or use its TLS port",
            refused=True,
        )

    def _client_certificate_refused(self, exc: BaseException) -> Diagnosis:
        reason = str(getattr(exc, "reason", None) or exc)
        if self.settings.cert_file is None:
            return Diagnosis(
                f"{self.where}: the broker requires a client certificate (mutual TLS, {reason});"
                " set HIFI_KAFKA_CERT_FILE and HIFI_KAFKA_KEY_FILE",
                refused=True,
            )
        return Diagnosis(
            f"{self.where}: the broker refused the client certificate"
            f" {self.settings.cert_file} ({reason}): is it signed by a CA the broker trusts?",
            refused=True,
        )

    def _tls_listener(self) -> Diagnosis:
        return Diagnosis(
            f"{self.where} is a TLS listener: set HIFI_KAFKA_SECURITY_PROTOCOL=SSL (or SASL_SSL)",
            refused=True,
        )

    async def _tls12_alert(self) -> ssl.SSLError | None:
        """The error a TLS 1.2 handshake with these settings ends with, None if it completes.
        Over TLS 1.3 a server refuses a client certificate after the handshake, and may close
        the connection before the client reads the alert; TLS 1.2 refuses it in the handshake."""
        from hifi.kafka.security import ssl_context

        context = ssl_context(self.settings)
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        try:
            async with asyncio.timeout(_TIMEOUT_S):
                _, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=context, server_hostname=self.host
                )
        except ssl.SSLError as exc:
            return exc
        except (OSError, TimeoutError):
            return None
        writer.close()
        return None

    async def _speaks_tls(self) -> bool:
        """Whether the address completes a TLS handshake (any certificate)."""
        anything = ssl.create_default_context()
        anything.check_hostname = False
        anything.verify_mode = ssl.CERT_NONE
        try:
            async with asyncio.timeout(_TIMEOUT_S):
                _, writer = await asyncio.open_connection(self.host, self.port, ssl=anything)
        except (OSError, TimeoutError, ssl.SSLError):
            return False
        writer.close()
        return True

    async def _answers_plaintext(self) -> bool:
        """Whether the address answers a Kafka ApiVersions request without TLS."""
        try:
            async with asyncio.timeout(_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(self.host, self.port)
                try:
                    writer.write(_request(_API_VERSIONS, 0))
                    head = await reader.readexactly(8)
                finally:
                    writer.close()
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            return False
        correlation: int = struct.unpack(">i", head[4:])[0]
        return correlation == _CORRELATION_ID


def _strings(data: bytes) -> list[str]:
    """A Kafka array of strings (int32 count, then int16-length strings); [] if cut short."""
    if len(data) < 4:
        return []
    count, offset, found = struct.unpack(">i", data[:4])[0], 4, []
    for _ in range(max(0, min(count, 64))):
        if offset + 2 > len(data):
            break
        length = struct.unpack(">h", data[offset : offset + 2])[0]
        found.append(data[offset + 2 : offset + 2 + length].decode("utf-8", "replace"))
        offset += 2 + length
    return found
