"""TLS at the edge: each refusal named in one line (an unknown CA, a host name mismatch, a client
certificate required), and no client certificate sent on a redirect to an origin not trusted.

The client-certificate refusal is checked against OpenSSL's own server (`openssl s_server`):
asyncio's server drops its alert, a real one sends it."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trustme

from connector.http1 import Http1Transport
from connector.http1.tls_refusals import tls_refusal
from devstack.ports import free_port
from tests.connector.loopback_http import OK, RawServer, answer

BODY = b'[{"id":"e1"}]'


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _server_context(ca: trustme.CA, *, ask_for_client_cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    if ask_for_client_cert:
        context.verify_mode = ssl.CERT_OPTIONAL
        ca.configure_trust(context)
    return context


def _trusting(ca: trustme.CA, *, client_cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    if client_cert:
        ca.issue_cert("hifi-client").configure_cert(context)
    return context


async def test_an_unknown_ca_is_named(ca: trustme.CA) -> None:
    async with (
        RawServer(answer([OK]), ssl_context=_server_context(ca)) as server,
        httpx.AsyncClient(transport=Http1Transport(ssl_context=_trusting(trustme.CA()))) as client,
    ):
        with pytest.raises(httpx.ConnectError, match=r"TLS: unknown CA: .*set tls_ca_file"):
            await client.post(server.url, content=BODY)


async def test_a_host_name_mismatch_is_named(ca: trustme.CA) -> None:
    async with (
        RawServer(answer([OK]), ssl_context=_server_context(ca)) as server,
        httpx.AsyncClient(transport=Http1Transport(ssl_context=_trusting(ca))) as client,
    ):
        with pytest.raises(httpx.ConnectError, match="TLS: hostname mismatch"):
            await client.post(
                server.url, content=BODY, extensions={"sni_hostname": "other.example"}
            )


@pytest.fixture
async def openssl_server(ca: trustme.CA, tmp_path: Path) -> AsyncIterator[str]:
    """`openssl s_server` on loopback, requiring a client certificate; its https URL."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command (apt-get install openssl)")
    cert, trust = tmp_path / "server.pem", tmp_path / "ca.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(cert))
    ca.cert_pem.write_to_path(str(trust))
    port = free_port()
    command = ["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(cert)]
    command += ["-Verify", "1", "-CAfile", str(trust), "-www", "-quiet"]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            break
        yield f"https://127.0.0.1:{port}/"
    finally:
        process.kill()
        await process.wait()


@pytest.mark.integration  # a process: OpenSSL's server
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2])
async def test_a_client_certificate_required_is_named(
    ca: trustme.CA, openssl_server: str, version: ssl.TLSVersion
) -> None:
    """TLS 1.3 refuses after the handshake (an alert on the first read), TLS 1.2 within it:
    either way the error says a client certificate is wanted, not "server disconnected"."""
    context = _trusting(ca)
    context.maximum_version = version
    async with httpx.AsyncClient(transport=Http1Transport(ssl_context=context)) as client:
        with pytest.raises(httpx.TransportError, match=r"TLS: .*client certificate") as caught:
            await client.post(openssl_server, content=BODY)
    assert "\n" not in str(caught.value)


async def test_no_client_certificate_on_a_hop_to_an_origin_not_trusted(ca: trustme.CA) -> None:
    """The destination presents its client certificate; a 307 to another origin reaches it
    without one, unless that origin is trusted."""
    peers: list[object] = []

    async def record(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
    ) -> None:
        while await server.read_request(reader) is not None:
            peers.append(writer.get_extra_info("peercert"))
            writer.write(OK)
            await writer.drain()

    asking = _server_context(ca, ask_for_client_cert=True)
    async with RawServer(record, ssl_context=asking) as other:
        where = f"https://127.0.0.1:{other.port}/in"
        moved = b"HTTP/1.1 308 Moved\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % where.encode()
        async with RawServer(answer([moved]), ssl_context=_server_context(ca)) as first:
            for trusted in (frozenset(), frozenset({f"https://127.0.0.1:{other.port}"})):
                transport = Http1Transport(
                    ssl_context=_trusting(ca, client_cert=True),
                    bare_ssl_context=_trusting(ca),
                    follow_redirects=True,
                    trusted_origins=trusted,
                )
                async with httpx.AsyncClient(transport=transport) as client:
                    response = await client.post(first.url, content=BODY)
                    assert response.status_code == 200
    bare, trusted_peer = peers
    assert not bare  # no certificate presented
    assert trusted_peer


def test_tls_refusals_are_named_from_openssl_reasons() -> None:
    required = ssl.SSLError(1, "tlsv13 alert certificate required")
    required.reason = "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    assert tls_refusal(required, client_cert=False) == (
        "TLS: client certificate required: the destination wants one; set tls_client_cert"
    )
    refused = ssl.SSLError(1, "tlsv1 alert unknown ca")
    refused.reason = "TLSV1_ALERT_UNKNOWN_CA"
    said = tls_refusal(refused, client_cert=True)
    assert said is not None
    assert said.startswith("TLS: the destination refused the client certificate")
    assert tls_refusal(OSError("no"), client_cert=False) is None
