"""Every Kafka client hifi creates carries the process's security settings.

Two halves: every aiokafka client is constructed in `hifi.kafka` and nowhere else (read from the
source), and each of those constructions, given one settings object with TLS, a client
certificate and SASL, receives the protocol, the TLS context and the SASL options.
"""

from __future__ import annotations

import ast
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import trustme

from hifi.kafka import admin, admin_client, consuming, oauthbearer, producing, reading
from hifi.kafka.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]
_CLIENT_CLASSES = {"AIOKafkaConsumer", "AIOKafkaProducer", "AIOKafkaAdminClient", "AIOKafkaClient"}
# Everything that runs in a hifi process (product code, the demo's and the bench's helpers);
# the tests' own clients go through the same factories.
_PACKAGES = ("hifi", "connector", "retrier", "auditor", "spark_batch", "tenants", "config")
_TOOLS = ("devstack", "bench", "chaos", "tests")


def _constructions(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(), filename=str(path))
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in _CLIENT_CLASSES:
                calls.append(node)
    return calls


def _spreads_client_options(call: ast.Call) -> bool:
    """`Client(**client_options(settings), ...)` or `Client(**kafka.client_options(...))`."""
    for keyword in call.keywords:
        value = keyword.value
        if keyword.arg is None and isinstance(value, ast.Call):
            func = value.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name == "client_options":
                return True
    return False


def test_every_client_is_built_from_client_options() -> None:
    """No code constructs an aiokafka client but `hifi.kafka`, and there always with
    `**client_options(settings)`; so a client cannot forget the security settings."""
    found: dict[str, int] = {}
    for package in (*_PACKAGES, *_TOOLS):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            for call in _constructions(path):
                where = f"{relative}:{call.lineno}"
                assert _spreads_client_options(call), f"{where}: client without client_options"
                if not relative.startswith("hifi/kafka/"):
                    found[where] = found.get(where, 0) + 1
    # outside hifi.kafka only the tools (the bench's load generators, a test's admin client)
    # build one, with the same options (checked above); never a component
    assert not [where for where in found if where.split("/")[0] in _PACKAGES], found


class _Built(Exception):
    """Raised by a recording client class instead of starting a client."""


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """Replace each aiokafka class where `hifi.kafka` uses it with one that records its options."""
    records: list[tuple[str, dict[str, Any]]] = []

    def recorder(kind: str) -> Callable[..., Any]:
        def build(*args: Any, **options: Any) -> Any:
            records.append((kind, options))
            raise _Built(kind)

        return build

    monkeypatch.setattr(consuming, "AIOKafkaConsumer", recorder("consumer"))
    monkeypatch.setattr(producing, "AIOKafkaProducer", recorder("producer"))
    monkeypatch.setattr(admin_client, "AIOKafkaAdminClient", recorder("admin"))
    return records


@pytest.fixture
def secured(tmp_path: Path) -> KafkaSettings:
    """SASL_SSL with SCRAM, a CA file and a client certificate, from the environment."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    client = ca.issue_cert("hifi-client")
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "client.pem"))
    client.private_key_pem.write_to_path(str(tmp_path / "client.key"))
    return KafkaSettings.from_env(
        {
            "HIFI_KAFKA_BOOTSTRAP": "kafka.example:9093",
            "HIFI_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "HIFI_KAFKA_CA_FILE": str(tmp_path / "ca.pem"),
            "HIFI_KAFKA_CERT_FILE": str(tmp_path / "client.pem"),
            "HIFI_KAFKA_KEY_FILE": str(tmp_path / "client.key"),
            "HIFI_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "HIFI_KAFKA_USERNAME": "hifi",
            "HIFI_KAFKA_PASSWORD": "pw-" + "x" * 12,
        }
    )


async def _enter(factory: Callable[[], Any]) -> None:
    manager = factory()
    if hasattr(manager, "__aenter__"):
        async with manager:
            pass
    else:
        await manager


def _uses(settings: KafkaSettings) -> dict[str, Callable[[], Any]]:
    """Each way hifi makes a client: the daemons' consumer and producer, the admin calls of
    `--check --probe` and topic creation, the reads of the DLQ tools, rewind and backfill."""

    async def read_at() -> None:
        async for _ in reading.read_at(settings, "t", {0: [1]}):
            pass

    async def committed() -> None:
        await reading.committed_offsets(settings, "g", "t")

    uses: dict[str, Callable[[], Coroutine[Any, Any, Any] | AsyncIterator[Any] | Any]] = {
        "group consumer": lambda: consuming.open_consumer(settings, group_id="g"),
        "producer": lambda: producing.open_producer(settings),
        "admin: list topics": lambda: admin.list_topics(settings),
        "admin: ensure topics": lambda: admin.ensure_topics(settings, ["t"], partitions=1),
        "read a topic (dlq list, rewind)": lambda: reading.read_topic(settings, "t"),
        "read at offsets (dlq replay)": read_at,
        "committed offsets (backfill)": committed,
    }
    return uses


async def test_each_client_carries_protocol_tls_client_certificate_and_sasl(
    built: list[tuple[str, dict[str, Any]]], secured: KafkaSettings
) -> None:
    for use, factory in _uses(secured).items():
        built.clear()
        with pytest.raises(_Built):
            await _enter(factory)
        assert built, f"{use}: built no client"
        _, options = built[0]
        assert options["bootstrap_servers"] == "kafka.example:9093", use
        assert options["security_protocol"] == "SASL_SSL", use
        assert options["sasl_mechanism"] == "SCRAM-SHA-512", use
        assert options["sasl_plain_username"] == "hifi", use
        assert options["sasl_plain_password"] == secured.password.get_secret_value()  # type: ignore[union-attr]
        context = options["ssl_context"]
        assert isinstance(context, ssl.SSLContext), use
        assert context.check_hostname, use
        assert context.verify_mode == ssl.CERT_REQUIRED, use
        assert len(context.get_ca_certs()) == 1, f"{use}: the CA file only, not the system's bundle"


async def test_oauthbearer_clients_get_a_token_provider(
    built: list[tuple[str, dict[str, Any]]],
) -> None:
    settings = KafkaSettings(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        oauth_token_url="http://127.0.0.1:1/token",
        oauth_client_id="hifi",
        oauth_client_secret="s3cret-value",  # type: ignore[arg-type]
    )
    for use, factory in _uses(settings).items():
        built.clear()
        with pytest.raises(_Built):
            await _enter(factory)
        _, options = built[0]
        assert options["sasl_mechanism"] == "OAUTHBEARER", use
        assert isinstance(options["sasl_oauth_token_provider"], oauthbearer.OAuthBearerTokens)
        assert "sasl_plain_password" not in options


async def test_hostname_verification_off_only_when_asked(
    built: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    settings = KafkaSettings.from_env(
        {
            "HIFI_KAFKA_SECURITY_PROTOCOL": "SSL",
            "HIFI_KAFKA_CA_FILE": str(tmp_path / "ca.pem"),
            "HIFI_KAFKA_SSL_CHECK_HOSTNAME": "false",
        }
    )
    with pytest.raises(_Built):
        await _enter(lambda: producing.open_producer(settings))
    context = built[0][1]["ssl_context"]
    assert context.check_hostname is False
    assert context.verify_mode == ssl.CERT_REQUIRED  # the chain is still verified
