"""docs/kafka-security.md stays true: its table names every security variable hifi reads, and
every example is a set-up `KafkaSettings.from_env` accepts (its files made real)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trustme

from hifi.kafka.settings import ENV_KEYS, KafkaSettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "kafka-security.md"
_BLOCK = re.compile(r"```\n(.*?)```", re.S)
_SECURITY_FIELDS = (
    "bootstrap",
    "security_protocol",
    "ca_file",
    "ssl_check_hostname",
    "cert_file",
    "key_file",
    "key_password",
    "sasl_mechanism",
    "username",
    "password",
    "oauth_token_url",
    "oauth_client_id",
    "oauth_client_secret",
    "oauth_scope",
)


def _examples() -> list[dict[str, str]]:
    examples = []
    for block in _BLOCK.findall(DOC.read_text()):
        lines = [line for line in block.splitlines() if line.startswith("HIFI_KAFKA_")]
        if lines and len(lines) == len(block.strip().splitlines()):
            examples.append(dict(line.split("=", 1) for line in lines))
    return examples


def test_the_table_names_every_security_variable() -> None:
    table = DOC.read_text().split("## The settings", 1)[1].split("\n\n", 2)[1]
    for field in _SECURITY_FIELDS:
        assert f"`{ENV_KEYS[field]}`" in table, field


def test_there_is_an_example_per_platform() -> None:
    text = DOC.read_text()
    for platform in ("Confluent Cloud", "MSK", "Aiven", "Redpanda", "Strimzi"):
        assert f"**{platform}" in text or f"**Amazon {platform}" in text, platform
    assert len(_examples()) >= 6


@pytest.mark.parametrize("example", _examples(), ids=lambda e: e["HIFI_KAFKA_BOOTSTRAP"][:40])
def test_each_example_is_accepted(example: dict[str, str], tmp_path: Path) -> None:
    """Files are replaced by real PEM files of a test CA; `...` by a value."""
    ca = trustme.CA()
    client = ca.issue_cert("hifi")
    pem = {
        "HIFI_KAFKA_CA_FILE": ca.cert_pem,
        "HIFI_KAFKA_CERT_FILE": client.cert_chain_pems[0],
        "HIFI_KAFKA_KEY_FILE": client.private_key_pem,
    }
    env = {}
    for name, value in example.items():
        assert name in ENV_KEYS.values(), f"{name} is not a variable hifi reads"
        if name in pem:
            path = tmp_path / Path(value).name
            pem[name].write_to_path(str(path))
            value = str(path)
        env[name] = "x-secret" if value in ("...", "API_SECRET") else value
    settings = KafkaSettings.from_env(env)
    assert settings.bootstrap == example["HIFI_KAFKA_BOOTSTRAP"]
